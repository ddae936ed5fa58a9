package snapshot

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// maxMembers bounds the members bucket read: etcd allows far fewer.
const maxMembers = 1024

// contents reads, with bbolt, the revision (the newest key of etcd's key
// bucket: mvcc.RevToBytes, 8 bytes of main revision, '_', 8 of sub
// revision, and 't' for a tombstone) and the members (the members bucket,
// membership.Member's JSON by hex ID) of the snapshot f, which checkShape
// admitted: every path bbolt can take through it ends inside the file
// within as many steps as it has pages. bbolt opens the very file that was
// hashed and checked (a duplicate of its descriptor, never the path
// again), read-only. A panic or a fault inside bbolt (a file cut short
// under it) is an error, not a crash.
func contents(ctx context.Context, f *os.File) (rev int64, members []Member, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			rev, members, err = 0, nil, fmt.Errorf("bbolt could not read it (%v): it is not a database etcd wrote", r)
		}
	}()
	db, err := bolt.Open(f.Name(), 0o400, &bolt.Options{
		ReadOnly: true,
		Timeout:  time.Second,
		OpenFile: func(string, int, os.FileMode) (*os.File, error) {
			fd, err := syscall.Dup(int(f.Fd()))
			if err != nil {
				return nil, err
			}
			syscall.CloseOnExec(fd)
			return os.NewFile(uintptr(fd), f.Name()), nil
		},
	})
	if err != nil {
		return 0, nil, fmt.Errorf("bbolt could not open it: %w", err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if rev, err = revision(tx); err != nil {
			return err
		}
		members, err = membersOf(ctx, tx)
		return err
	})
	return rev, members, err
}

func revision(tx *bolt.Tx) (int64, error) {
	b := tx.Bucket([]byte("key"))
	if b == nil {
		return 0, errors.New("it has no key bucket: not an etcd v3 database")
	}
	key, _ := b.Cursor().Last()
	if key == nil {
		return 0, errors.New("its key bucket is empty: etcd writes a key the moment it starts")
	}
	if (len(key) != 17 && len(key) != 18) || key[8] != '_' {
		return 0, errors.New("the key bucket's last key is not an etcd revision")
	}
	rev := binary.BigEndian.Uint64(key)
	if rev > 1<<62 {
		return 0, errors.New("the key bucket's last revision is out of etcd's range")
	}
	return int64(rev), nil
}

func membersOf(ctx context.Context, tx *bolt.Tx) ([]Member, error) {
	b := tx.Bucket([]byte("members"))
	if b == nil {
		return nil, errors.New("it has no members bucket: not an etcd v3 database")
	}
	var out []Member
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			continue // a nested bucket: not a member
		}
		if len(out) == maxMembers {
			return nil, fmt.Errorf("its members bucket holds more than %d members", maxMembers)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var m Member
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, fmt.Errorf("member %d of its members bucket does not decode as etcd's JSON", len(out)+1)
		}
		out = append(out, m)
	}
	return out, nil
}
