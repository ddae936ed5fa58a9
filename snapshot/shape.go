package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// bbolt trusts its file: its cursors and its own consistency check
// (Tx.Check, whose forEachPage recurses into every child with no record
// of pages seen) follow whatever page ids a branch names. A branch that
// names an ancestor sends a cursor down forever, its stack growing; two
// branches that share a child make a walk exponential (a 278 KB file
// with a two-way fan-out over 63 levels never finishes); a page id or
// overflow past the end of the file makes bbolt read past its mapping.
// So before bbolt opens a snapshot, checkShape reads the page graph of
// every bucket once, from the file as bbolt lays it out (go.etcd.io/bbolt
// v1.5.0 internal/common: page.go, meta.go, inlinebucket.go), and admits
// the file only if it is a tree inside the file: each page reached once,
// of the kind its parent expects, its elements inside it. That bounds
// everything bbolt does after by the number of pages. It reads no key or
// value except the bucket headers, and holds one page's header and
// element array at a time, however large the page says it is.

// bbolt's layout (internal/common/types.go, page.go, meta.go).
const (
	pageHeaderSize = 16 // id uint64, flags uint16, count uint16, overflow uint32
	elementSize    = 16 // branch: pos, ksize, pgid; leaf: flags, pos, ksize, vsize
	metaSize       = 64
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	branchPage     = 0x01
	leafPage       = 0x02
	bucketLeaf     = 0x01 // a leaf element that is a bucket
	inBucketSize   = 16   // root pgid uint64, sequence uint64
	maxBucketDepth = 16   // nested buckets: etcd has none
)

type shape struct {
	r        io.ReaderAt
	pageSize int64
	pages    uint64   // the high-water mark: every page id is below it
	seen     []uint64 // a bit per page
	n        int      // pages read, to look at the context now and then
}

// checkShape admits the bbolt database in the first size bytes of r only
// if its meta pages are valid and say it fills exactly size bytes (as
// bbolt's Tx.WriteTo, which etcd's snapshot is, writes it), and the pages
// under every valid meta's root bucket form a tree inside the file.
func checkShape(ctx context.Context, r io.ReaderAt, size int64) error {
	s := &shape{r: r}
	var roots []uint64
	for i := range int64(2) {
		m, err := s.meta(i)
		if err != nil {
			return fmt.Errorf("meta page %d: %w", i, err)
		}
		if len(roots) == 0 || roots[0] != m.root {
			roots = append(roots, m.root)
		}
		if s.pages*uint64(s.pageSize) != uint64(size) { //nolint:gosec // both positive
			return fmt.Errorf("its meta page says %d pages of %d bytes where the file holds %d bytes", s.pages, s.pageSize, size)
		}
	}
	s.seen = make([]uint64, (s.pages+63)/64)
	for _, root := range roots {
		// the root bucket's root page; under it, the buckets
		if err := s.tree(ctx, root, 0); err != nil {
			return err
		}
		clear(s.seen) // the other meta's tree may well share its pages
	}
	return nil
}

type meta struct{ root uint64 }

// meta reads and checks meta page i as bbolt's Meta.Validate does (magic,
// version, fnv-64a checksum of the first 56 bytes), with a page size bbolt
// could have written and the same on both pages.
func (s *shape) meta(i int64) (meta, error) {
	buf := make([]byte, pageHeaderSize+metaSize)
	if _, err := s.r.ReadAt(buf, i*s.pageSize); err != nil {
		return meta{}, err
	}
	m := buf[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:56]) //nolint:errcheck // hashes never fail
	pageSize := int64(binary.LittleEndian.Uint32(m[8:]))
	switch {
	case binary.LittleEndian.Uint32(m) != boltMagic:
		return meta{}, errors.New("not a bbolt database")
	case binary.LittleEndian.Uint32(m[4:]) != boltVersion:
		return meta{}, fmt.Errorf("bbolt format %d, not %d", binary.LittleEndian.Uint32(m[4:]), boltVersion)
	case binary.LittleEndian.Uint64(m[56:]) != h.Sum64():
		return meta{}, errors.New("its checksum does not match")
	case pageSize < 512 || pageSize > 1<<16 || pageSize&(pageSize-1) != 0:
		return meta{}, fmt.Errorf("page size %d", pageSize)
	case i == 1 && pageSize != s.pageSize:
		return meta{}, fmt.Errorf("page size %d where meta page 0 says %d", pageSize, s.pageSize)
	}
	s.pageSize = pageSize
	pages := binary.LittleEndian.Uint64(m[40:])
	if i == 1 && pages != s.pages {
		return meta{}, fmt.Errorf("%d pages where meta page 0 says %d", pages, s.pages)
	}
	s.pages = pages
	return meta{root: binary.LittleEndian.Uint64(m[16:])}, nil
}

// tree checks the bucket whose root page is id, and every bucket in it,
// depth buckets down; an explicit stack, so that no file can exhaust the
// goroutine's.
func (s *shape) tree(ctx context.Context, id uint64, depth int) error {
	if depth > maxBucketDepth {
		return fmt.Errorf("buckets nested more than %d deep", maxBucketDepth)
	}
	stack := []uint64{id}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s.n++; s.n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		children, buckets, err := s.page(id)
		if err != nil {
			return err
		}
		stack = append(stack, children...)
		for _, b := range buckets {
			if err := s.tree(ctx, b, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// page claims page id (and its overflow pages) and checks it: a branch
// page's children are returned to be checked, a leaf page's buckets too
// (their root pages; an inline bucket is checked here).
func (s *shape) page(id uint64) (children, buckets []uint64, err error) {
	if id < 2 || id >= s.pages {
		return nil, nil, fmt.Errorf("a branch or bucket names page %d, outside pages 2 to %d", id, s.pages-1)
	}
	head := make([]byte, pageHeaderSize)
	if _, err := s.r.ReadAt(head, int64(id)*s.pageSize); err != nil { //nolint:gosec // id < s.pages
		return nil, nil, err
	}
	overflow := uint64(binary.LittleEndian.Uint32(head[12:]))
	flags, count := binary.LittleEndian.Uint16(head[8:]), int(binary.LittleEndian.Uint16(head[10:]))
	switch {
	case binary.LittleEndian.Uint64(head) != id:
		return nil, nil, fmt.Errorf("page %d says it is page %d", id, binary.LittleEndian.Uint64(head))
	case id+overflow >= s.pages:
		return nil, nil, fmt.Errorf("page %d runs %d pages past the end of the database", id, id+overflow-s.pages+1)
	case flags != branchPage && flags != leafPage:
		return nil, nil, fmt.Errorf("page %d is reached from a bucket but is not a branch or leaf page (flags %#x)", id, flags)
	case flags == branchPage && count == 0:
		return nil, nil, fmt.Errorf("branch page %d has no children", id)
	}
	for p := id; p <= id+overflow; p++ {
		if s.seen[p/64]&(1<<(p%64)) != 0 {
			return nil, nil, fmt.Errorf("page %d is reached twice: bbolt's pages form a tree, and a page shared or pointing back up would send any reader round forever", p)
		}
		s.seen[p/64] |= 1 << (p % 64)
	}
	length := int64(overflow+1) * s.pageSize //nolint:gosec // < the file's size
	if pageHeaderSize+int64(count)*elementSize > length {
		return nil, nil, fmt.Errorf("page %d: %d elements do not fit in it", id, count)
	}
	els := make([]byte, count*elementSize)
	if _, err := s.r.ReadAt(els, int64(id)*s.pageSize+pageHeaderSize); err != nil { //nolint:gosec // idem
		return nil, nil, err
	}
	for i := range count {
		e := els[i*elementSize:]
		at := int64(pageHeaderSize + i*elementSize) // positions count from the element
		if flags == branchPage {
			// branchPageElement: pos, ksize, pgid
			if at+int64(binary.LittleEndian.Uint32(e))+int64(binary.LittleEndian.Uint32(e[4:])) > length {
				return nil, nil, fmt.Errorf("page %d: element %d's key lies outside the page", id, i)
			}
			children = append(children, binary.LittleEndian.Uint64(e[8:]))
			continue
		}
		// leafPageElement: flags, pos, ksize, vsize
		pos, ks, vs := int64(binary.LittleEndian.Uint32(e[4:])), int64(binary.LittleEndian.Uint32(e[8:])), int64(binary.LittleEndian.Uint32(e[12:]))
		if at+pos+ks+vs > length {
			return nil, nil, fmt.Errorf("page %d: element %d's key or value lies outside the page", id, i)
		}
		if binary.LittleEndian.Uint32(e)&bucketLeaf == 0 {
			continue
		}
		root, err := s.bucket(int64(id)*s.pageSize+at+pos+ks, vs) //nolint:gosec // idem
		if err != nil {
			return nil, nil, fmt.Errorf("page %d: element %d: %w", id, i, err)
		}
		if root != 0 {
			buckets = append(buckets, root)
		}
	}
	return children, buckets, nil
}

// bucket reads the bucket header at off, vs bytes of value: its root page,
// or 0 for an inline bucket, whose page (a leaf of plain keys, bbolt's
// Bucket.inlineable) follows the header inside the value and is checked
// here.
func (s *shape) bucket(off, vs int64) (uint64, error) {
	if vs < inBucketSize {
		return 0, errors.New("a bucket's header is cut short")
	}
	if vs > inBucketSize+s.pageSize {
		return 0, fmt.Errorf("a bucket's header is %d bytes long", vs)
	}
	v := make([]byte, vs)
	if _, err := s.r.ReadAt(v, off); err != nil {
		return 0, err
	}
	if root := binary.LittleEndian.Uint64(v); root != 0 {
		return root, nil
	}
	p := v[inBucketSize:]
	if len(p) < pageHeaderSize {
		return 0, errors.New("an inline bucket's page is cut short")
	}
	count := int(binary.LittleEndian.Uint16(p[10:]))
	if binary.LittleEndian.Uint16(p[8:]) != leafPage || pageHeaderSize+count*elementSize > len(p) {
		return 0, errors.New("an inline bucket is not a leaf page that fits in its value")
	}
	for i := range count {
		e := p[pageHeaderSize+i*elementSize:]
		at := int64(pageHeaderSize + i*elementSize)
		if binary.LittleEndian.Uint32(e)&bucketLeaf != 0 {
			return 0, errors.New("an inline bucket holds a bucket, which bbolt never inlines")
		}
		pos, ks, vs := int64(binary.LittleEndian.Uint32(e[4:])), int64(binary.LittleEndian.Uint32(e[8:])), int64(binary.LittleEndian.Uint32(e[12:]))
		if at+pos+ks+vs > int64(len(p)) {
			return 0, fmt.Errorf("an inline bucket's element %d lies outside it", i)
		}
	}
	return 0, nil
}
