package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// rememberGiven records the bytes a control plane streamed in place of
// its cluster's snapshot (Faults.EtcdSnapshotData: a real etcd's snapshot
// a test hands the sim) as a snapshot the fleet served, so that a
// recovery from it restores, as Talos' would, at the revision it holds:
// the main revision of the newest key of its key bucket, read with
// go.etcd.io/bbolt as etcdutl's snapshot status reads it
// (etcdutl/snapshot/v3_snapshot.go Status). The key space restored is the
// sim's own (empty, then a key per member that starts), not the file's
// keys: the sim does not model Kubernetes' keys. Bytes bbolt cannot read
// are not remembered, and a recovery from them fails as one from a
// snapshot the sim did not stream.
func (f *Fleet) rememberGiven(data []byte) {
	if len(data)%512 != sha256.Size {
		return
	}
	db := data[:len(data)-sha256.Size]
	rev, err := boltRevision(db)
	if err != nil {
		f.log.Warn("sim: streamed snapshot bytes bbolt cannot read; a recovery from them will fail", "error", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.served == nil {
		f.served = map[[32]byte]servedSnapshot{}
	}
	f.served[sha256.Sum256(db)] = servedSnapshot{revision: rev}
}

// boltRevision is the revision of the etcd database db.
func boltRevision(db []byte) (int64, error) {
	tmp, err := os.CreateTemp("", "sim-snapshot-*.db")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(db); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	b, err := bolt.Open(tmp.Name(), 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	var rev int64
	err = b.View(func(tx *bolt.Tx) error {
		keys := tx.Bucket([]byte("key"))
		if keys == nil {
			return errors.New("no key bucket")
		}
		k, _ := keys.Cursor().Last()
		if len(k) < 17 || k[8] != '_' {
			return errors.New("the key bucket's last key is not a revision")
		}
		rev = int64(binary.BigEndian.Uint64(k)) //nolint:gosec // etcd's revisions fit
		return nil
	})
	return rev, err
}
