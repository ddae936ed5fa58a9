// Package snapshot reads etcd snapshot files without trusting them: etcd's
// shape (a bbolt database followed by its sha256), the hash, and, through
// go.etcd.io/bbolt, the revision and the members the database holds, all
// within a size and time budget that honours the caller's context. It does
// not take snapshots (machines streams them, backup writes them) and it
// imports nothing of devata's.
package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// MaxSize bounds a snapshot file. etcd refuses writes past its backend
// quota, which it recommends at 8 GiB at most; twice that leaves room for
// a database that grew past its quota before the alarm.
const MaxSize int64 = 16 << 30

// Member is one member of the etcd cluster a snapshot was taken of, as
// etcd's members bucket stores it (membership.Member's JSON).
type Member struct {
	ID        uint64 `json:"id"`
	Name      string `json:"name,omitempty"`
	IsLearner bool   `json:"isLearner,omitempty"`
}

// File is a verified etcd snapshot on disk.
type File struct {
	Path   string
	Size   int64
	SHA256 string
	// Revision is etcd's revision when the snapshot was taken: the main
	// revision of the newest key, as etcdutl's snapshot status reports it.
	Revision int64
	// Members are the members bucket's: who the cluster was. A member
	// removed before the snapshot sits in members_removed, not here.
	Members []Member
}

// Voters are the names of the members that are not learners.
func (f *File) Voters() []string {
	var names []string
	for _, m := range f.Members {
		if !m.IsLearner {
			names = append(names, m.Name)
		}
	}
	return names
}

// ErrBudget is wrapped when reading a snapshot took longer than its
// budget: a file of etcd's shape is read well within it.
var ErrBudget = errors.New("reading it took longer than any etcd snapshot of its size takes")

// budget is how long reading a snapshot of size bytes may take: its hash
// at a slow disk's 50 MiB/s, and a minute besides.
func budget(size int64) time.Duration {
	return time.Minute + time.Duration(size/(50<<20))*time.Second
}

// Verify checks the etcd snapshot at path before anything is sent
// anywhere: a regular file no larger than MaxSize, etcd's shape (the
// database then its sha256, size % 512 == 32, as etcdutl's restore tests
// it), the hash itself, and a bbolt database whose page graph is a tree
// inside the file (checkShape), from which bbolt reads the revision and
// the members. It stops when ctx ends or its budget runs out. Its errors
// quote nothing of the file and say what to do.
func Verify(ctx context.Context, path string) (*File, error) {
	fail := func(format string, args ...any) (*File, error) {
		return nil, fmt.Errorf("etcd snapshot %s: "+format, append([]any{path}, args...)...)
	}
	// a FIFO or a device is refused before it is opened: opening one can block
	if st, err := os.Stat(path); err != nil {
		return fail("%w", err)
	} else if !st.Mode().IsRegular() {
		return fail("not a regular file (%s): give the snapshot file devata backup etcd wrote", st.Mode().Type())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fail("%w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail("%w", err)
	}
	size := st.Size()
	switch {
	case !st.Mode().IsRegular():
		return fail("not a regular file (%s): give the snapshot file devata backup etcd wrote", st.Mode().Type())
	case size > MaxSize:
		return fail("%d bytes is more than any etcd snapshot (etcd's database stays below its 8 GiB quota; devata reads up to %d): is this the right file?", size, MaxSize)
	case size < 2*512+sha256.Size || size%512 != sha256.Size:
		return fail("%d bytes is not an etcd snapshot's size (a database of 512-byte multiples and its sha256): take a new one with devata backup etcd", size)
	}
	bctx, cancel := context.WithTimeoutCause(ctx, budget(size), ErrBudget)
	defer cancel()
	stopped := func(err error) (*File, error) {
		if cause := context.Cause(bctx); ctx.Err() == nil && errors.Is(cause, ErrBudget) {
			return fail("%w (%s): refused; take a new one with devata backup etcd", ErrBudget, budget(size))
		}
		return fail("%w", err)
	}

	h := sha256.New()
	if _, err := io.Copy(h, &ctxReader{ctx: bctx, r: io.NewSectionReader(f, 0, size-sha256.Size)}); err != nil {
		if bctx.Err() != nil {
			return stopped(bctx.Err())
		}
		return fail("%w", err)
	}
	want := make([]byte, sha256.Size)
	if _, err := f.ReadAt(want, size-sha256.Size); err != nil {
		return fail("%w", err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return nil, fmt.Errorf("etcd snapshot %s is damaged: its sha256 does not match the one etcd appended; restore it from another copy or take a new one with devata backup etcd", path)
	}
	if err := checkShape(bctx, f, size-sha256.Size); err != nil {
		if bctx.Err() != nil {
			return stopped(bctx.Err())
		}
		return fail("%w; it is not a database etcd wrote, though its hash matches: do not restore it; take a new one with devata backup etcd", err)
	}
	rev, members, err := contents(bctx, f)
	if err != nil {
		if bctx.Err() != nil {
			return stopped(bctx.Err())
		}
		return fail("%w", err)
	}
	return &File{Path: path, Size: size, SHA256: hex.EncodeToString(want), Revision: rev, Members: members}, nil
}

// ctxReader stops reading when ctx ends: hashing several GiB takes long
// enough for a Ctrl-C.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
