package machines

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"
	"strings"
	"testing"
)

// machined's chunks come as the pipe from etcd's client hands them over,
// of any size: the verifier's answer must not depend on where they split.
func TestSnapshotVerifierChunking(t *testing.T) {
	db := bytes.Repeat([]byte("etcd"), 1024) // 4096 bytes
	sum := sha256.Sum256(db)
	file := append(bytes.Clone(db), sum[:]...)
	bad := bytes.Clone(file)
	bad[100] ^= 1
	for _, chunk := range []int{1, 7, 31, 32, 33, 1000, 1024, len(file)} {
		for _, tc := range []struct {
			data []byte
			want string
		}{
			{file, ""},
			{bad, "does not match"},
			{file[:len(file)-1], "ended early"},
			{nil, "empty"},
		} {
			v := newSnapshotVerifier()
			for p := tc.data; len(p) > 0; p = p[min(chunk, len(p)):] {
				v.Write(p[:min(chunk, len(p))]) //nolint:errcheck // never fails
			}
			err := v.verify()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("chunks of %d, %d bytes: %v, want %q", chunk, len(tc.data), err, tc.want)
			}
		}
	}
}

// SnapshotRevision walks bbolt's tree as bbolt lays out a large etcd: the
// key bucket on its own pages, a branch page over leaves, other buckets
// before it (one inline); and a small one, whose key bucket is inline.
func TestSnapshotRevision(t *testing.T) {
	const ps = 4096
	rev := func(n uint64) []byte {
		b := binary.BigEndian.AppendUint64(nil, n)
		b = append(b, '_')
		return binary.BigEndian.AppendUint64(b, 0)
	}
	type el struct {
		flags      uint32
		key, value []byte
		child      uint64
	}
	page := func(id uint64, flags uint16, els []el) []byte {
		p := make([]byte, ps)
		binary.LittleEndian.PutUint64(p, id)
		binary.LittleEndian.PutUint16(p[8:], flags)
		binary.LittleEndian.PutUint16(p[10:], uint16(len(els)))
		off := 16 + 16*len(els)
		for i, e := range els {
			at := 16 + 16*i
			if flags == boltLeafPage {
				binary.LittleEndian.PutUint32(p[at:], e.flags)
				binary.LittleEndian.PutUint32(p[at+4:], uint32(off-at))
				binary.LittleEndian.PutUint32(p[at+8:], uint32(len(e.key)))
				binary.LittleEndian.PutUint32(p[at+12:], uint32(len(e.value)))
			} else {
				binary.LittleEndian.PutUint32(p[at:], uint32(off-at))
				binary.LittleEndian.PutUint32(p[at+4:], uint32(len(e.key)))
				binary.LittleEndian.PutUint64(p[at+8:], e.child)
			}
			off += copy(p[off:], e.key)
			off += copy(p[off:], e.value)
		}
		return p
	}
	meta := func(id, txid uint64) []byte {
		p := make([]byte, ps)
		binary.LittleEndian.PutUint64(p, id)
		binary.LittleEndian.PutUint16(p[8:], 0x04)
		m := p[16:]
		binary.LittleEndian.PutUint32(m, boltMagic)
		binary.LittleEndian.PutUint32(m[4:], 2)
		binary.LittleEndian.PutUint32(m[8:], ps)
		binary.LittleEndian.PutUint64(m[16:], 3)
		binary.LittleEndian.PutUint64(m[32:], 2)
		binary.LittleEndian.PutUint64(m[48:], txid)
		h := fnv.New64a()
		h.Write(m[:56])
		binary.LittleEndian.PutUint64(m[56:], h.Sum64())
		return p
	}
	inBucket := func(root uint64, inline []byte) []byte {
		return append(binary.LittleEndian.AppendUint64(make([]byte, 0, 16), root), append(make([]byte, 8), inline...)...)
	}
	file := func(pages ...[]byte) []byte {
		db := bytes.Join(pages, nil)
		sum := sha256.Sum256(db)
		return append(db, sum[:]...)
	}
	inlineLeaf := func(els []el) []byte { return page(0, boltLeafPage, els)[:256] }

	large := file(
		meta(0, 6), meta(1, 7), page(2, 0x10, nil),
		page(3, boltLeafPage, []el{
			{flags: boltBucketLeaf, key: []byte("alarm"), value: inBucket(0, inlineLeaf(nil))},
			{flags: boltBucketLeaf, key: []byte("key"), value: inBucket(4, nil)},
			{flags: boltBucketLeaf, key: []byte("meta"), value: inBucket(7, nil)},
		}),
		page(4, boltBranchPage, []el{{key: rev(2), child: 5}, {key: rev(40), child: 6}}),
		page(5, boltLeafPage, []el{{key: rev(2), value: []byte("a")}, {key: rev(3), value: []byte("b")}}),
		page(6, boltLeafPage, []el{{key: rev(40), value: []byte("c")}, {key: rev(41), value: []byte("d")}}),
		page(7, boltLeafPage, []el{{key: []byte("term"), value: rev(2)[:8]}}),
	)
	small := file(
		meta(0, 2), meta(1, 1), page(2, 0x10, nil),
		page(3, boltLeafPage, []el{
			{flags: boltBucketLeaf, key: []byte("key"), value: inBucket(0, inlineLeaf([]el{{key: rev(2), value: []byte("a")}, {key: rev(7), value: []byte("b")}}))},
		}),
	)
	for _, tc := range []struct {
		name string
		file []byte
		want int64
		err  string
	}{
		{"branch over leaves", large, 41, ""},
		{"inline key bucket", small, 7, ""},
		{"not bbolt", file(make([]byte, 2*ps)), 0, "no valid meta page"},
	} {
		got, err := SnapshotRevision(bytes.NewReader(tc.file), int64(len(tc.file)))
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %d, %v; want %d %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}
