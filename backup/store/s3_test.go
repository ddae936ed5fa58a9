package store_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"devata.dev/devata/backup/store"
	"devata.dev/devata/internal/testenv"
)

// Every test here runs against a real S3 server, versitygw, which the
// test bed builds from the module proxy (internal/testenv.StartS3).

// useEnv points the AWS SDK's standard environment at srv, as an operator
// would for the aws CLI, and keeps the machine's own AWS files out.
func useEnv(t *testing.T, srv *testenv.S3, endpoint string) {
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_ENDPOINT_URL_S3", endpoint)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func openS3(t *testing.T, raw string, opts store.Options) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), raw, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The environment alone (no options, no query) reaches the server: the
// endpoint from AWS_ENDPOINT_URL_S3, path-style because its host is an IP
// address, the region defaulted; and localhost is path-style too.
func TestS3RoundTrip(t *testing.T) {
	srv := testenv.StartS3(t)
	useEnv(t, srv, srv.Endpoint)
	t.Run("env", func(t *testing.T) {
		roundTrip(t, openS3(t, "s3://"+srv.Bucket+"/cluster-a/", store.Options{}))
	})
	t.Run("localhost", func(t *testing.T) {
		local := strings.Replace(srv.Endpoint, "127.0.0.1", "localhost", 1)
		roundTrip(t, openS3(t, "s3://"+srv.Bucket+"/cluster-b/?endpoint="+local, store.Options{}))
	})
	t.Run("generic AWS_ENDPOINT_URL and no prefix", func(t *testing.T) {
		t.Setenv("AWS_ENDPOINT_URL_S3", "")
		t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
		roundTrip(t, openS3(t, "s3://"+srv.Bucket, store.Options{}))
	})
	t.Run("pairs", func(t *testing.T) {
		pairRule(t, openS3(t, "s3://"+srv.Bucket+"/pairs/", store.Options{}))
	})
	// A prefix is a folder: another prefix's objects are not listed.
	a := openS3(t, "s3://"+srv.Bucket+"/one/", store.Options{})
	b := openS3(t, "s3://"+srv.Bucket+"/one-more/", store.Options{})
	if _, err := b.Put(t.Context(), "x.db", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if objs, err := a.List(t.Context()); err != nil || len(objs) != 0 {
		t.Errorf("s3://%s/one/ lists %v, %v; want nothing (x.db is under one-more/)", srv.Bucket, objs, err)
	}
}

// Forcing virtual-hosted addressing against a localhost endpoint sends
// the bucket as a subdomain of localhost, which does not reach the
// bucket: the automatic path style is what made "localhost" above work.
// (For an IP address the SDK's own endpoint rules use path style.)
func TestS3PathStyleForcedOff(t *testing.T) {
	srv := testenv.StartS3(t)
	useEnv(t, srv, strings.Replace(srv.Endpoint, "127.0.0.1", "localhost", 1))
	auto := openS3(t, "s3://"+srv.Bucket+"/p/", store.Options{})
	if _, err := auto.Put(t.Context(), "seen.db", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	off := openS3(t, "s3://"+srv.Bucket+"/p/?use_path_style=false", store.Options{})
	if objs, err := off.List(t.Context()); err == nil && len(objs) == 1 {
		t.Errorf("virtual-hosted addressing on localhost listed %v: path style was not what reached the bucket", objs)
	}
}

func TestS3Faults(t *testing.T) {
	srv := testenv.StartS3(t)
	useEnv(t, srv, srv.Endpoint)
	ctx := t.Context()

	t.Run("endpoint down", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down := "http://" + l.Addr().String()
		l.Close()
		s := openS3(t, "s3://"+srv.Bucket+"/p/", store.Options{Endpoint: down})
		_, err = s.Put(ctx, "a.db", strings.NewReader("x"))
		wantErr(t, err, store.ErrUnreachable, "s3://"+srv.Bucket+"/p/", down, "up and reachable")
		_, err = s.List(ctx)
		wantErr(t, err, store.ErrUnreachable, down)
	})
	t.Run("wrong secret", func(t *testing.T) {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-"+srv.SecretKey[:8]+"-hunter2")
		s := openS3(t, "s3://"+srv.Bucket+"/p/", store.Options{})
		_, err := s.Put(ctx, "a.db", strings.NewReader("x"))
		wantErr(t, err, store.ErrDenied, "check the credentials", "AWS_ACCESS_KEY_ID from the environment")
		noSecret(t, err, "hunter2", srv.SecretKey)
		_, err = s.List(ctx)
		wantErr(t, err, store.ErrDenied)
	})
	t.Run("unknown access key", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIANOBODY")
		s := openS3(t, "s3://"+srv.Bucket+"/p/", store.Options{})
		_, err := s.List(ctx)
		wantErr(t, err, store.ErrDenied)
		noSecret(t, err, srv.SecretKey)
	})
	t.Run("missing bucket", func(t *testing.T) {
		s := openS3(t, "s3://no-such-bucket/p/", store.Options{})
		_, err := s.Put(ctx, "a.db", strings.NewReader("x"))
		wantErr(t, err, store.ErrNoBucket, "s3://no-such-bucket/p/", `create bucket "no-such-bucket"`)
		_, err = s.List(ctx)
		wantErr(t, err, store.ErrNoBucket)
		_, err = s.Get(ctx, "a.db")
		wantErr(t, err, store.ErrNoBucket)
	})
	t.Run("missing object", func(t *testing.T) {
		s := openS3(t, "s3://"+srv.Bucket+"/p/", store.Options{})
		_, err := s.Get(ctx, "nothing.db")
		wantErr(t, err, store.ErrNotFound, "nothing.db", "devata backup list")
	})
}

func wantErr(t *testing.T, err, kind error, contains ...string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Errorf("error %v, want %v", err, kind)
		return
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not say %q", err, c)
		}
	}
}

func noSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if err != nil && strings.Contains(err.Error(), s) {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
}

// An upload interrupted half-way (the context canceled, as SIGTERM does to
// devata's commands, or the source failing) leaves nothing that List or
// Get would return, and no incomplete multipart upload on the server;
// what was under the name before stays.
func TestS3InterruptedPutLeavesNothing(t *testing.T) {
	srv := testenv.StartS3(t)
	useEnv(t, srv, srv.Endpoint)
	s := openS3(t, "s3://"+srv.Bucket+"/p/", store.Options{PartSize: 5 << 20})
	ctx := t.Context()
	if _, err := s.Put(ctx, "old.db", strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	// 12 MiB read (two parts sent, a third begun), then the cancel
	_, err := s.Put(cctx, "new.db", &failingReader{n: 12 << 20, cancel: cancel})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Put: %v, want context.Canceled", err)
	}
	boom := errors.New("source failed")
	_, err = s.Put(ctx, "old.db", &failingReader{n: 12 << 20, err: boom})
	if err == nil || !strings.Contains(err.Error(), "source failed") {
		t.Errorf("Put from a failing source: %v, want the source's error", err)
	}
	objs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Name != "old.db" || objs[0].Size != 3 {
		t.Errorf("List = %+v, want only old.db (3 bytes)", objs)
	}
	if got := get(t, s, "old.db"); string(got) != "old" {
		t.Errorf("old.db = %q after a failed replace, want %q", got, "old")
	}
	ups, err := srv.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(srv.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d incomplete multipart uploads left on the server: %+v", len(ups.Uploads), ups.Uploads)
	}
}

// An object changed or deleted behind devata's back after the upload: Get
// returns what is there now, and the SHA-256 Put returned tells the
// caller it is not what was written; a deleted sidecar makes its
// snapshot stop counting.
func TestS3TamperedAndDeletedAfterUpload(t *testing.T) {
	srv := testenv.StartS3(t)
	useEnv(t, srv, srv.Endpoint)
	s := openS3(t, "s3://"+srv.Bucket+"/p/", store.Options{})
	ctx := t.Context()
	data := bytes.Repeat([]byte{7}, 1<<20)
	w, err := store.PutSnapshot(ctx, s, "s.db", bytes.NewReader(data), func(store.Written) ([]byte, error) { return []byte("{}"), nil })
	if err != nil {
		t.Fatal(err)
	}
	// tampered: one byte changed in the file behind the bucket
	path := filepath.Join(srv.Dir, srv.Bucket, "p", "s.db")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{8}, 1000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := get(t, s, "s.db")
	if len(got) != len(data) || got[1000] != 8 {
		t.Errorf("Get after tampering returned %d bytes, byte 1000 = %d; want what is there now", len(got), got[1000])
	}
	if sum(got) == w.SHA256 {
		t.Error("the tampered object has the SHA-256 Put returned")
	}
	// deleted: the sidecar removed through the S3 API
	if _, err := srv.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("p/s.db.json")}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Latest(ctx, s); !errors.Is(err, store.ErrNoSnapshot) {
		t.Errorf("Latest after the sidecar was deleted: %v, want ErrNoSnapshot", err)
	}
	if _, err := srv.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("p/s.db")}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, "s.db")
	wantErr(t, err, store.ErrNotFound, "s.db")
}
