// Package snapshottest builds etcd snapshot files that bbolt would never
// write, page by page, for the tests that prove devata refuses them. It
// writes bbolt's layout (go.etcd.io/bbolt v1.5.0 internal/common) with
// 4 KiB pages; nothing outside tests imports it.
package snapshottest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"
)

// PageSize is the page size of every file built here.
const PageSize = 4096

// Page flags and the bucket flag of a leaf element, as bbolt has them.
const (
	Branch = 0x01
	Leaf   = 0x02
	Meta   = 0x04
	Free   = 0x10
)

// El is one element of a page: a leaf's key and value (Bucket: the value
// is a bucket header), or a branch's key and child page.
type El struct {
	Bucket     bool
	Key, Value []byte
	Child      uint64
}

// Page is page id with flags and the elements, their keys and values
// after the element array.
func Page(id uint64, flags uint16, els ...El) []byte {
	p := make([]byte, PageSize)
	binary.LittleEndian.PutUint64(p, id)
	binary.LittleEndian.PutUint16(p[8:], flags)
	binary.LittleEndian.PutUint16(p[10:], uint16(len(els))) //nolint:gosec // tests' pages are small
	off := 16 + 16*len(els)
	for i, e := range els {
		at := 16 + 16*i
		if flags == Leaf {
			if e.Bucket {
				binary.LittleEndian.PutUint32(p[at:], 0x01)
			}
			binary.LittleEndian.PutUint32(p[at+4:], uint32(off-at))        //nolint:gosec // inside a page
			binary.LittleEndian.PutUint32(p[at+8:], uint32(len(e.Key)))    //nolint:gosec // idem
			binary.LittleEndian.PutUint32(p[at+12:], uint32(len(e.Value))) //nolint:gosec // idem
		} else {
			binary.LittleEndian.PutUint32(p[at:], uint32(off-at))       //nolint:gosec // idem
			binary.LittleEndian.PutUint32(p[at+4:], uint32(len(e.Key))) //nolint:gosec // idem
			binary.LittleEndian.PutUint64(p[at+8:], e.Child)
		}
		off += copy(p[off:], e.Key)
		off += copy(p[off:], e.Value)
	}
	return p
}

// MetaPage is meta page id of a database of pages pages whose root bucket
// is page root, with a valid checksum.
func MetaPage(id, root, pages uint64) []byte {
	p := make([]byte, PageSize)
	binary.LittleEndian.PutUint64(p, id)
	binary.LittleEndian.PutUint16(p[8:], Meta)
	m := p[16:]
	binary.LittleEndian.PutUint32(m, 0xED0CDAED)
	binary.LittleEndian.PutUint32(m[4:], 2)
	binary.LittleEndian.PutUint32(m[8:], PageSize)
	binary.LittleEndian.PutUint64(m[16:], root)
	binary.LittleEndian.PutUint64(m[32:], 0xffffffffffffffff) // no freelist
	binary.LittleEndian.PutUint64(m[40:], pages)
	binary.LittleEndian.PutUint64(m[48:], 10+id)
	h := fnv.New64a()
	h.Write(m[:56]) //nolint:errcheck // hashes never fail
	binary.LittleEndian.PutUint64(m[56:], h.Sum64())
	return p
}

// BucketHeader is a bucket's value: its root page (0: inline, the page follows).
func BucketHeader(root uint64) []byte {
	return binary.LittleEndian.AppendUint64(make([]byte, 0, 16), root)[:16]
}

// File is an etcd snapshot of pages 2.. after two meta pages whose root
// bucket is page 2, with etcd's sha256 appended.
func File(pages ...[]byte) []byte {
	n := uint64(len(pages) + 2)
	db := bytes.Join(append([][]byte{MetaPage(0, 2, n), MetaPage(1, 2, n)}, pages...), nil)
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// RevKey is mvcc.RevToBytes: main revision, '_', sub revision.
func RevKey(main uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, main)
	b = append(b, '_')
	return binary.BigEndian.AppendUint64(b, 0)
}

// Root is the root bucket's page 2: key on page 3, members on page 4.
func Root() []byte {
	return Page(2, Leaf,
		El{Bucket: true, Key: []byte("key"), Value: BucketHeader(3)},
		El{Bucket: true, Key: []byte("members"), Value: BucketHeader(4)})
}

// Keys is the key bucket's page 3, at revision 7.
func Keys() []byte { return Page(3, Leaf, El{Key: RevKey(7), Value: []byte("v")}) }

// Member is a members bucket element for cp-1.
var Member = El{Key: []byte("1"), Value: []byte(`{"id":1,"name":"cp-1"}`)}

// Fanout is the snapshot of issue 31's probe 2: its members bucket fans
// out two ways over levels levels, each branch's two children the same
// page, so that a walk that does not remember pages visits 2^levels
// leaves. Its sha256 is right.
func Fanout(levels int) []byte {
	pages := [][]byte{Root(), Keys()}
	last := uint64(4 + levels) //nolint:gosec // small
	for id := uint64(4); id < last; id++ {
		pages = append(pages, Page(id, Branch, El{Key: []byte("1"), Child: id + 1}, El{Key: []byte("2"), Child: id + 1}))
	}
	return File(append(pages, Page(last, Leaf, Member))...)
}
