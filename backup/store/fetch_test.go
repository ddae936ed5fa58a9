package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/backup/store"
	"devata.dev/devata/internal/testenv"
)

// fetchContract is what Fetch keeps on every store: the bytes land in a
// new 0600 file with their size and sha256; a missing object, an object
// past the limit, an existing file and a canceled context each leave
// nothing in the directory.
func fetchContract(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()
	data := bytes.Repeat([]byte("etcd snapshot "), 100_000) // 1.4 MB: more than one read
	if _, err := s.Put(ctx, "a.db", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, w, err := store.Fetch(ctx, s, "a.db", dir, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if path != filepath.Join(dir, "a.db") || !bytes.Equal(got, data) || w.Size != int64(len(data)) || w.SHA256 != sum(data) {
		t.Errorf("Fetch: %s, %d bytes, %+v; want %s with the %d bytes put and their sha256", path, len(got), w, filepath.Join(dir, "a.db"), len(data))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the fetched file: %v, %v; want 0600", fi, err)
	}
	if _, _, err := store.Fetch(ctx, s, "a.db", dir, 0); err == nil {
		t.Error("a second Fetch over the first file succeeded; want it refused (created exclusively)")
	}
	os.Remove(path)

	if _, _, err := store.Fetch(ctx, s, "missing.db", dir, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Fetch of a missing object: %v, want ErrNotFound", err)
	}
	if _, _, err := store.Fetch(ctx, s, "a.db", dir, int64(len(data))-1); err == nil {
		t.Error("Fetch past its limit succeeded; want it refused")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := store.Fetch(canceled, s, "a.db", dir, 0); err == nil {
		t.Error("Fetch with a canceled context succeeded")
	}
	if _, _, err := store.Fetch(ctx, s, "../a.db", dir, 0); !errors.Is(err, store.ErrInvalidName) {
		t.Errorf("Fetch of ../a.db: %v, want ErrInvalidName", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("after the failed fetches %s holds %v, want nothing", dir, entries)
	}
}

func TestFetchDir(t *testing.T) {
	fetchContract(t, openDir(t, "file://"+t.TempDir()+"/"))
}

func TestFetchS3(t *testing.T) {
	srv := testenv.StartS3(t)
	useEnv(t, srv, srv.Endpoint)
	fetchContract(t, openS3(t, "s3://"+srv.Bucket+"/fetch/", store.Options{}))
}

// BenchmarkFetch fetches one object of DEVATA_BENCH_BYTES (default 256
// MiB; generated, never held) from the real S3 server and from a
// directory into a private file, as bootstrap --recover-from URL does, and
// prints the throughput beside a plain file copy of the same bytes. No
// figure is asserted.
//
//	go test ./backup/store/ -run '^$' -bench Fetch -benchtime 1x
func BenchmarkFetch(b *testing.B) {
	size := int64(256 << 20)
	if v := os.Getenv("DEVATA_BENCH_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		size = n
	}
	srv := testenv.StartS3(b)
	b.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	b.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	b.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	b.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	src := b.TempDir()
	for range b.N {
		for _, dest := range []string{"s3://" + srv.Bucket + "/bench/", "file://" + src + "/"} {
			s, err := store.Open(b.Context(), dest, store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Put(b.Context(), "big.db", io.LimitReader(rand.NewChaCha8([32]byte{}), size)); err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			start := time.Now()
			path, w, err := store.Fetch(b.Context(), s, "big.db", dir, 0)
			if err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			fmt.Printf("fetch %s: %d MiB in %s, %.0f MiB/s, sha256 %.12s\n", strings.SplitN(dest, ":", 2)[0], w.Size>>20, d.Round(time.Millisecond), float64(w.Size)/(1<<20)/d.Seconds(), w.SHA256)
			if strings.HasPrefix(dest, "file:") {
				start = time.Now()
				in, _ := os.Open(path)
				out, _ := os.Create(path + ".copy")
				n, _ := io.Copy(out, in)
				if err := out.Sync(); err != nil {
					b.Fatal(err)
				}
				in.Close()
				out.Close()
				d = time.Since(start)
				fmt.Printf("plain copy: %d MiB in %s, %.0f MiB/s\n", n>>20, d.Round(time.Millisecond), float64(n)/(1<<20)/d.Seconds())
			}
			os.RemoveAll(dir)
			s.Close()
		}
	}
}
