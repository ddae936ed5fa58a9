package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// VersitygwVersion is the S3 server the test bed runs: versitygw, an S3
// gateway over a directory (its posix backend), built from the Go module
// proxy (build/versitygw) into the cache directory as versitygw-VERSION.
const VersitygwVersion = "v1.8.0"

var versitygwBinary = binary{
	name:     "versitygw-" + VersitygwVersion,
	module:   "versitygw",
	pkg:      "github.com/versity/versitygw/cmd/versitygw",
	version:  VersitygwVersion,
	estimate: "about 3 minutes on 2 idle cores",
}

// S3 is a running S3 server: a real versitygw process on loopback serving
// Dir over plain HTTP, with one root user and one bucket.
type S3 struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Bucket    string
	Dir       string // the directory behind the buckets: Dir/BUCKET/KEY

	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
}

// StartS3 starts versitygw with a fresh directory, a random root user and
// a bucket named "backups", and stops it when the test ends. The binary
// is built first if missing (minutes, once per machine; run
// `go run ./internal/testenv/cmd/testbin` to do it beforehand).
func StartS3(t testing.TB) *S3 {
	t.Helper()
	dir, err := DefaultDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := Install(t.Context(), dir, logWriter{t}); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	var s *S3
	for range 3 { // the port picked may be taken before versitygw binds it
		s, err = startS3(filepath.Join(dir, versitygwBinary.name), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(s.Stop)
	if err := s.CreateBucket(t.Context(), "backups"); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s.Bucket = "backups"
	t.Logf("testenv: versitygw %s up at %s (bucket %s)", VersitygwVersion, s.Endpoint, s.Bucket)
	return s
}

func startS3(bin, dir string) (*S3, error) {
	root, meta := filepath.Join(dir, "root"), filepath.Join(dir, "meta")
	for _, d := range []string{root, meta} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s := &S3{
		Endpoint:  "http://" + addr,
		AccessKey: "devata" + randomHex(6),
		SecretKey: randomHex(20),
		Dir:       root,
		out:       &tail{max: 16 << 10},
		done:      make(chan struct{}),
	}
	// Metadata in a sidecar directory: the posix backend's default,
	// extended attributes, is not on every file system a test runs on.
	s.cmd = exec.Command(bin, "--port", addr, "--quiet", "posix", "--sidecar", meta, root)
	// The root user's keys go in the environment, not in ps' view.
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("versitygw %s exited at start: %s", VersitygwVersion, s.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("versitygw %s did not listen on %s within %s: %s", VersitygwVersion, addr, startTimeout, s.out.String())
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 seconds); the
// endpoint is then down. Stopping twice is fine.
func (s *S3) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Client is an SDK client of the server as its root user, for a test to
// look at what a store wrote (ListMultipartUploads) or to change it
// behind the store's back.
func (s *S3) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// CreateBucket creates another bucket.
func (s *S3) CreateBucket(ctx context.Context, name string) error {
	var err error
	for range 50 { // the listener is up a moment before the gateway serves
		if _, err = s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err == nil {
			return nil
		}
		var oe *net.OpError
		if !errors.As(err, &oe) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("versitygw: create bucket %s: %w\n%s", name, err, s.out.String())
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
