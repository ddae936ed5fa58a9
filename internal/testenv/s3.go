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

	proc *loopbackProcess
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
	s, err := startS3(filepath.Join(dir, versitygwBinary.name), t.TempDir())
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
	s := &S3{
		AccessKey: "devata" + randomHex(6),
		SecretKey: randomHex(20),
		Dir:       root,
	}
	proc, err := startLoopback("versitygw "+VersitygwVersion,
		func(addr string) *exec.Cmd {
			// Metadata in a sidecar directory: the posix backend's default,
			// extended attributes, is not on every file system a test runs on.
			cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", "--sidecar", meta, root)
			// The root user's keys go in the environment, not in ps' view.
			cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
			return cmd
		},
		func(addr string) bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
	if err != nil {
		return nil, err
	}
	s.proc, s.Endpoint = proc, "http://"+proc.addr
	return s, nil
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 seconds); the
// endpoint is then down. Stopping twice is fine.
func (s *S3) Stop() { s.proc.Stop() }

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
	return fmt.Errorf("versitygw: create bucket %s: %w\n%s", name, err, s.proc.out.String())
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
