package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"devata.dev/devata/internal/snapshottest"
)

// etcdSnapshot writes, with bbolt itself, a database holding etcd's
// members and key buckets (keys revisions 2..keys+1, enough of them for
// branch pages) and returns it as etcd streams it: bbolt's Tx.WriteTo,
// then the sha256.
func etcdSnapshot(t *testing.T, keys int, members ...Member) []byte {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		mb, err := tx.CreateBucket([]byte("members"))
		if err != nil {
			return err
		}
		for _, m := range members {
			v, _ := json.Marshal(map[string]any{"id": m.ID, "name": m.Name, "isLearner": m.IsLearner, "peerURLs": []string{"https://10.0.0.1:2380"}})
			if err := mb.Put(fmt.Appendf(nil, "%x", m.ID), v); err != nil {
				return err
			}
		}
		if _, err := tx.CreateBucket([]byte("members_removed")); err != nil {
			return err
		}
		kb, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := range keys {
			if err := kb.Put(snapshottest.RevKey(uint64(i+2)), bytes.Repeat([]byte("v"), 100)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&buf); return err }); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return append(buf.Bytes(), sum[:]...)
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "etcd.snapshot")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A snapshot bbolt wrote reads as etcdutl's snapshot status reads it.
func TestVerifyReadsWhatBboltWrote(t *testing.T) {
	cps := []Member{{ID: 0x1a, Name: "cp-1"}, {ID: 0x2b, Name: "cp-2"}, {ID: 0x3c, Name: "cp-3", IsLearner: true}}
	for _, keys := range []int{1, 20000} { // an inline key bucket; one of several branch levels
		path := writeFile(t, etcdSnapshot(t, keys, cps...))
		f, err := Verify(t.Context(), path)
		if err != nil {
			t.Fatalf("%d keys: %v", keys, err)
		}
		if f.Revision != int64(keys+1) || len(f.Members) != 3 || f.Members[2] != cps[2] || strings.Join(f.Voters(), ",") != "cp-1,cp-2" {
			t.Errorf("%d keys: revision %d, members %+v, voters %v", keys, f.Revision, f.Members, f.Voters())
		}
		data, _ := os.ReadFile(path)
		if sum := sha256.Sum256(data[:len(data)-32]); f.SHA256 != fmt.Sprintf("%x", sum) || f.Size != int64(len(data)) {
			t.Errorf("%d keys: sha256 %s, size %d", keys, f.SHA256, f.Size)
		}
	}
}

// the builders of files bbolt would never write
var (
	page   = snapshottest.Page
	file   = snapshottest.File
	bucket = snapshottest.BucketHeader
	root   = snapshottest.Root
	keys   = snapshottest.Keys
	member = snapshottest.Member
)

type el = snapshottest.El

// Probe 2 of issue 31: a bbolt-shaped file whose members bucket fans out
// two ways over 63 levels (each branch's two children the same page) kept
// the hand-written walker at 100 % CPU forever, deaf to SIGINT; pages
// pointing back up, past the end, or overflowing it, and elements outside
// their page are as hostile. Each is refused, within the test's guard
// (the walk would otherwise take forever), naming what is wrong and never
// quoting the file.
func TestHostileSnapshotsAreRefused(t *testing.T) {
	good := file(root(), keys(), page(4, leafPage, member))
	if f, err := Verify(t.Context(), writeFile(t, good)); err != nil || f.Revision != 7 || len(f.Members) != 1 {
		t.Fatalf("the hand-made snapshot everything below spoils: %+v, %v", f, err)
	}

	huge := page(4, leafPage, member)
	binary.LittleEndian.PutUint32(huge[12:], 1<<16) // 256 MiB of overflow
	outside := page(4, leafPage, member)
	binary.LittleEndian.PutUint32(outside[pageHeaderSize+4:], snapshottest.PageSize) // the value starts past the page
	inlineHolder := page(2, leafPage,
		el{Bucket: true, Key: []byte("key"), Value: bucket(3)},
		el{Bucket: true, Key: []byte("members"), Value: append(bucket(0), page(0, leafPage, el{Bucket: true, Key: []byte("x"), Value: bucket(3)})[:64]...)})

	for _, c := range []struct {
		name, want string
		data       []byte
	}{
		{"two-way fan-out over 63 levels", "page 67 is reached twice", snapshottest.Fanout(63)},
		{"a branch naming itself", "page 4 is reached twice", file(root(), keys(), page(4, branchPage, el{Key: []byte("1"), Child: 4}))},
		{"a branch naming its parent bucket's page", "page 2 is reached twice", file(root(), keys(), page(4, branchPage, el{Key: []byte("1"), Child: 2}))},
		{"a child past the end", "names page 99, outside pages 2 to 4", file(root(), keys(), page(4, branchPage, el{Key: []byte("1"), Child: 99}))},
		{"a child that is a meta page", "names page 1, outside", file(root(), keys(), page(4, branchPage, el{Key: []byte("1"), Child: 1}))},
		{"an overflow past the end", "runs 65536 pages past the end", file(root(), keys(), huge)},
		{"a value outside its page", "lies outside the page", file(root(), keys(), outside)},
		{"a page of the wrong kind", "not a branch or leaf page", file(root(), keys(), page(4, 0x10))},
		{"a page that says it is another", "page 4 says it is page 5", file(root(), keys(), page(5, leafPage, member))},
		{"an inline bucket holding a bucket", "never inlines", file(inlineHolder, keys())},
		{"a meta page that lies about the size", "says 9 pages", func() []byte {
			d := file(root(), keys(), page(4, leafPage, member))
			copy(d, snapshottest.MetaPage(0, 2, 9))
			copy(d[snapshottest.PageSize:], snapshottest.MetaPage(1, 2, 9))
			sum := sha256.Sum256(d[:len(d)-32])
			copy(d[len(d)-32:], sum[:])
			return d
		}()},
		{"not bbolt", "not a bbolt database", func() []byte {
			d := make([]byte, 3*snapshottest.PageSize)
			sum := sha256.Sum256(d)
			return append(d, sum[:]...)
		}()},
		{"a members bucket that is not etcd's JSON", "does not decode", file(root(), keys(), page(4, leafPage, el{Key: []byte("1"), Value: []byte("\x1b]0;pwned\x07")}))},
		{"no key bucket", "no key bucket", file(page(2, leafPage, el{Bucket: true, Key: []byte("members"), Value: bucket(3)}), page(3, leafPage, member))},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a guard: the fan-out took forever before
			defer cancel()
			_, err := Verify(ctx, writeFile(t, c.data))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want a refusal saying %q", err, c.want)
			}
			if strings.ContainsAny(err.Error(), "\x1b\x07") || strings.Contains(err.Error(), "pwned") {
				t.Errorf("the refusal quotes the file: %q", err)
			}
		})
	}
}

// Ctrl-C works during any read of a snapshot: a cancelled context stops
// the hash and the walk, and says so.
func TestVerifyHonoursTheContext(t *testing.T) {
	path := writeFile(t, etcdSnapshot(t, 20000, Member{ID: 1, Name: "cp-1"}))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Verify(ctx, path); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled read: %v, want context.Canceled", err)
	}
	// the shape walk looks at the context too (every 1024 pages): a
	// members bucket of 6 branches over 200 leaves each
	pages := [][]byte{root(), keys()}
	var branches []el
	next := uint64(5 + 6)
	for b := range 6 {
		branches = append(branches, el{Key: []byte{byte(b)}, Child: uint64(5 + b)})
	}
	pages = append(pages, page(4, branchPage, branches...))
	var leaves [][]byte
	for b := range 6 {
		var kids []el
		for i := range 200 {
			kids = append(kids, el{Key: []byte{byte(b), byte(i)}, Child: next})
			leaves = append(leaves, page(next, leafPage))
			next++
		}
		pages = append(pages, page(uint64(5+b), branchPage, kids...))
	}
	data := file(append(pages, leaves...)...)
	if err := checkShape(t.Context(), bytes.NewReader(data), int64(len(data)-32)); err != nil {
		t.Fatalf("1,200 leaves: %v", err)
	}
	if err := checkShape(ctx, bytes.NewReader(data), int64(len(data)-32)); !errors.Is(err, context.Canceled) {
		t.Errorf("the shape walk under a cancelled context: %v", err)
	}
}

// What is not a snapshot file is refused before a byte is read: a FIFO
// (opening one blocks), a file larger than MaxSize (sparse here), and a
// size etcd never writes.
func TestVerifyRefusesWhatIsNotASnapshotFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxSize + 512 + 32); err != nil {
		t.Fatal(err)
	}
	f.Close()
	odd := writeFile(t, make([]byte, 5000))
	for path, want := range map[string]string{
		fifo: "not a regular file",
		big:  "more than any etcd snapshot",
		odd:  "not an etcd snapshot's size",
		dir:  "not a regular file",
	} {
		if _, err := Verify(t.Context(), path); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}
