package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/backup/store"
)

func openDir(t *testing.T, raw string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), raw, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// The same contract holds for a plain path and a file URL.
func TestDirRoundTrip(t *testing.T) {
	for _, form := range []string{"path", "file-url"} {
		t.Run(form, func(t *testing.T) {
			dir := t.TempDir()
			raw := dir
			if form == "file-url" {
				raw = "file://" + dir + "/"
			}
			roundTrip(t, openDir(t, raw))
			// 0600 whatever the umask, no temporary file left
			entries, _ := os.ReadDir(dir)
			if len(entries) != 0 {
				t.Errorf("after delete, %s holds %v", dir, entries)
			}
		})
	}
}

// roundTrip is the contract every Store keeps: put, list, get, replace,
// delete, and ErrNotFound for what is not there.
func roundTrip(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()
	data := bytes.Repeat([]byte("etcd snapshot "), 1000)
	w, err := s.Put(ctx, "a.db", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if w.Size != int64(len(data)) || w.SHA256 != sum(data) {
		t.Errorf("Put wrote %+v, want size %d sha256 %s", w, len(data), sum(data))
	}
	if _, err := s.Put(ctx, "b.db", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	objs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Name != "a.db" || objs[0].Size != int64(len(data)) || objs[1].Name != "b.db" || objs[1].Size != 0 || objs[0].ModTime.IsZero() {
		t.Errorf("List = %+v, want a.db (%d bytes) and b.db (0)", objs, len(data))
	}
	if got := get(t, s, "a.db"); !bytes.Equal(got, data) {
		t.Errorf("Get a.db returned %d bytes, want the %d put", len(got), len(data))
	}
	if _, err := s.Put(ctx, "a.db", strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "a.db"); string(got) != "new" {
		t.Errorf("Get after replace = %q, want %q", got, "new")
	}
	for _, name := range []string{"a.db", "b.db"} {
		if err := s.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, "a.db"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), s.String()) {
		t.Errorf("Get of a deleted object: %v, want ErrNotFound naming %s", err, s)
	}
	if err := s.Delete(ctx, "a.db"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of a deleted object: %v, want ErrNotFound", err)
	}
	if objs, err := s.List(ctx); err != nil || len(objs) != 0 {
		t.Errorf("List after delete = %v, %v; want nothing", objs, err)
	}
	for _, bad := range []string{"", "..", "a/b", ".hidden", "x\x00"} {
		if _, err := s.Put(ctx, bad, strings.NewReader("x")); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("Put(%q): %v, want ErrInvalidName", bad, err)
		}
	}
}

func get(t *testing.T, s store.Store, name string) []byte {
	t.Helper()
	r, err := s.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDirPutMode0600(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	if _, err := s.Put(t.Context(), "a.db", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

// failingReader yields n bytes, then fails (or calls cancel and keeps going).
type failingReader struct {
	n      int
	err    error
	cancel context.CancelFunc
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		if f.cancel != nil {
			f.cancel()
			f.cancel = nil
		} else if f.err != nil {
			return 0, f.err
		}
	}
	if len(p) > 1<<20 {
		p = p[:1<<20]
	}
	for i := range p {
		p[i] = byte(i)
	}
	f.n -= len(p)
	return len(p), nil
}

// A Put that fails or is canceled half-way leaves nothing under the name,
// no temporary file, and what was there before untouched.
func TestDirInterruptedPutLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	if _, err := s.Put(t.Context(), "old.db", strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := s.Put(t.Context(), "new.db", &failingReader{n: 3 << 20, err: boom}); !errors.Is(err, boom) {
		t.Errorf("Put with a failing reader: %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if _, err := s.Put(ctx, "old.db", &failingReader{n: 3 << 20, cancel: cancel}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Put: %v, want context.Canceled", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "old.db" {
		t.Errorf("directory holds %v, want only old.db", entries)
	}
	if got := get(t, s, "old.db"); string(got) != "old" {
		t.Errorf("old.db = %q after a canceled replace, want %q", got, "old")
	}
}

// Objects are never reached through a symbolic link, and hidden files
// (uploads in progress) are never listed.
func TestDirRefusesSymlinks(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "secret")
	if err := os.WriteFile(target, []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link.db")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".upload.tmp"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openDir(t, dir)
	ctx := t.Context()
	if objs, err := s.List(ctx); err != nil || len(objs) != 0 {
		t.Errorf("List = %v, %v; want nothing (a link and a hidden file)", objs, err)
	}
	if _, err := s.Get(ctx, "link.db"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Get through a link: %v, want a refusal naming the link", err)
	}
	if _, err := s.Put(ctx, "link.db", strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Put over a link: %v, want a refusal", err)
	}
	if err := s.Delete(ctx, "link.db"); err == nil {
		t.Error("Delete of a link succeeded, want a refusal")
	}
	if b, _ := os.ReadFile(target); string(b) != "outside" {
		t.Errorf("the link's target was changed: %q", b)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ raw, want string }{
		{"", "empty"},
		{filepath.Join(dir, "missing"), "does not exist: create it"},
		{file, "is not a directory"},
		{"file://relative/dir", "three slashes"},
		{"ftp://h/x", "scheme \"ftp\""},
		{"s3:///prefix/", "no bucket"},
		{"s3://b/p/?colour=blue", "unknown query parameter \"colour\""},
		{"s3://AKIAX:hunter2@b/p/", "credentials do not go in the URL"},
		{"s3://b/p/?endpoint=ftp://u:hunter2@h", "give a URL such as"},
		{"s3://b/p/?use_path_style=maybe", "give true or false"},
	} {
		_, err := store.Open(t.Context(), c.raw, store.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q): %v, want an error containing %q", c.raw, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): the error shows the password: %v", c.raw, err)
		}
	}
	// CreateDir makes what is missing, 0700.
	s, err := store.Open(t.Context(), filepath.Join(dir, "new", "sub")+"/", store.Options{CreateDir: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Stat(filepath.Join(dir, "new", "sub")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory: %v, %v; want 0700", fi, err)
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct{ in, dest, name string }{
		{"s3://b/p/", "s3://b/p/", ""},
		{"s3://b/p/etcd.db", "s3://b/p/", "etcd.db"},
		{"s3://b/etcd.db?region=eu-west-1", "s3://b/?region=eu-west-1", "etcd.db"},
		{"s3://b", "s3://b", ""},
		{"/var/backups/", "/var/backups/", ""},
		{"/var/backups/etcd.db", "/var/backups/", "etcd.db"},
		{"etcd.db", "./", "etcd.db"},
		{"file:///var/b/etcd.db", "file:///var/b/", "etcd.db"},
	} {
		dest, name := store.Split(c.in)
		if dest != c.dest || name != c.name {
			t.Errorf("Split(%q) = %q, %q; want %q, %q", c.in, dest, name, c.dest, c.name)
		}
	}
}

// The pair rule: a snapshot counts once its sidecar exists.
func TestSnapshotsCountOnlyWithSidecar(t *testing.T) {
	pairRule(t, openDir(t, t.TempDir()))
}

func pairRule(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()
	// An interrupted run: a snapshot without its sidecar.
	if _, err := s.Put(ctx, "etcd-c-20261205T030000Z.db", strings.NewReader("orphan")); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Latest(ctx, s); !errors.Is(err, store.ErrNoSnapshot) {
		t.Errorf("Latest with only an orphan: %v, want ErrNoSnapshot", err)
	}
	var recorded store.Written
	w, err := store.PutSnapshot(ctx, s, "etcd-c-20261205T020000Z.db", strings.NewReader("snap"), func(w store.Written) ([]byte, error) {
		recorded = w
		return []byte(`{"sha256":"` + w.SHA256 + `"}`), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if recorded != w || w.SHA256 != sum([]byte("snap")) {
		t.Errorf("the sidecar was given %+v, Put returned %+v, want sha256 of the snapshot", recorded, w)
	}
	latest, err := store.Latest(ctx, s)
	if err != nil || latest.Name != "etcd-c-20261205T020000Z.db" || latest.Sidecar.Name != latest.Name+".json" {
		t.Errorf("Latest = %+v, %v; want the older snapshot, the only one with a sidecar", latest, err)
	}
	orphans, err := store.Orphans(ctx, s)
	if err != nil || len(orphans) != 1 || orphans[0].Name != "etcd-c-20261205T030000Z.db" {
		t.Errorf("Orphans = %v, %v; want the snapshot without a sidecar", orphans, err)
	}
	// A sidecar that cannot be made: the snapshot goes again.
	if _, err := store.PutSnapshot(ctx, s, "etcd-c-20261205T040000Z.db", strings.NewReader("snap"), func(store.Written) ([]byte, error) {
		return nil, errors.New("no sidecar")
	}); err == nil {
		t.Error("PutSnapshot with a failing sidecar succeeded")
	}
	if _, err := s.Get(ctx, "etcd-c-20261205T040000Z.db"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the snapshot of a failed PutSnapshot: %v, want it removed", err)
	}
	if err := store.DeleteSnapshot(ctx, s, latest.Name); err != nil {
		t.Fatal(err)
	}
	if snaps, err := store.Snapshots(ctx, s); err != nil || len(snaps) != 0 {
		t.Errorf("Snapshots after delete = %v, %v", snaps, err)
	}
	if _, err := store.PutSnapshot(ctx, s, "x.json", strings.NewReader(""), nil); !errors.Is(err, store.ErrInvalidName) {
		t.Errorf("a snapshot named like a sidecar: %v, want ErrInvalidName", err)
	}
}
