package machines

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"os"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/inventory"
)

// SnapshotInfo is what EtcdSnapshot learned of the snapshot it streamed.
type SnapshotInfo struct {
	// Machine is the control plane it came from; TalosVersion what that
	// machine reports.
	Machine      string
	TalosVersion string
	// Size counts every byte written, etcd's trailing sha256 included;
	// SHA256 is the hex sha256 of them all, what `sha256sum FILE` prints.
	Size   int64
	SHA256 string
}

// ErrSnapshotInvalid is wrapped by EtcdSnapshot when the stream ended but
// is not a whole etcd snapshot: cut short, or its hash does not match.
var ErrSnapshotInvalid = errors.New("not a whole etcd snapshot")

// EtcdSnapshot streams an etcd snapshot from the control plane m over c into
// w and verifies it as etcdutl's restore does (etcdutl/snapshot/
// v3_snapshot.go): etcd appends the sha256 of its database, so the size must
// be a multiple of 512 plus 32 and those last 32 bytes the hash of the rest.
//
// It reads the raw MachineService stream rather than client.EtcdSnapshot:
// the client's reader ends quietly on DeadlineExceeded or Canceled, and
// machined's own chunker ends a stream with status OK when its read from
// etcd breaks off (pkg/chunker/stream), so only the size and the hash tell
// a whole snapshot from a part. w holds what arrived even when it fails; the
// caller throws it away.
func EtcdSnapshot(ctx context.Context, c *client.Client, m *inventory.Machine, w io.Writer) (SnapshotInfo, error) {
	info := SnapshotInfo{Machine: m.Name}
	fail := func(format string, args ...any) (SnapshotInfo, error) {
		return info, fmt.Errorf("etcd snapshot from %s: "+format, append([]any{m.Name}, args...)...)
	}
	if !m.IsControlPlane() {
		return fail("%s is a worker: etcd runs on control planes only; back up from one of them", m.Name)
	}
	if v, err := c.Version(ctx); err == nil && len(v.GetMessages()) > 0 {
		info.TalosVersion = v.GetMessages()[0].GetVersion().GetTag()
	} else if err != nil {
		return fail("%w%s", PlainError(err), snapshotHint(err))
	}
	stream, err := c.MachineClient.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		return fail("%w%s", PlainError(err), snapshotHint(err))
	}
	v := newSnapshotVerifier()
	out := io.MultiWriter(w, v)
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			info.Size = v.size
			return fail("after %d bytes: %w%s", v.size, PlainError(err), snapshotHint(err))
		}
		if md := msg.GetMetadata(); md.GetError() != "" {
			return fail("after %d bytes: %s", v.size, md.GetError())
		}
		if _, err := out.Write(msg.GetBytes()); err != nil {
			info.Size = v.size
			return fail("write: %w", err)
		}
	}
	info.Size, info.SHA256 = v.size, hex.EncodeToString(v.all.Sum(nil))
	if err := v.verify(); err != nil {
		return fail("%w: %w; etcd itself may well be fine: take the snapshot again", ErrSnapshotInvalid, err)
	}
	return info, nil
}

// snapshotHint says what to do about a refused snapshot, by its gRPC code
// as machined and its etcd client answer.
func snapshotHint(err error) string {
	switch client.StatusCode(err) {
	case codes.Unimplemented:
		return " (etcd snapshots are served by control planes only, and not in maintenance mode)"
	case codes.PermissionDenied:
		return " (the talosconfig's role may not take etcd snapshots: use one with os:admin, os:operator or os:etcd:backup)"
	case codes.DeadlineExceeded, codes.Unknown:
		// machined's etcd client waits for a local etcd that does not run,
		// or has no certificate yet right after a boot
		return " (etcd on this control plane does not answer: see devata drift --checks etcd, or try another control plane)"
	case codes.Unavailable:
		return " (the machine did not answer: is it up, and its address right?)"
	}
	return ""
}

// snapshotVerifier hashes everything it is given, and separately all but the
// last sha256.Size bytes: at the end those are etcd's hash of the rest.
type snapshotVerifier struct {
	all, db hash.Hash
	tail    []byte
	size    int64
}

func newSnapshotVerifier() *snapshotVerifier {
	return &snapshotVerifier{all: sha256.New(), db: sha256.New(), tail: make([]byte, 0, 2*sha256.Size)}
}

func (v *snapshotVerifier) Write(p []byte) (int, error) {
	v.size += int64(len(p))
	v.all.Write(p) //nolint:errcheck // hashes never fail
	if len(p) >= sha256.Size {
		v.db.Write(v.tail)                 //nolint:errcheck // idem
		v.db.Write(p[:len(p)-sha256.Size]) //nolint:errcheck // idem
		v.tail = append(v.tail[:0], p[len(p)-sha256.Size:]...)
		return len(p), nil
	}
	v.tail = append(v.tail, p...)
	if n := len(v.tail) - sha256.Size; n > 0 {
		v.db.Write(v.tail[:n]) //nolint:errcheck // idem
		v.tail = append(v.tail[:0], v.tail[n:]...)
	}
	return len(p), nil
}

func (v *snapshotVerifier) verify() error {
	switch {
	case v.size == 0:
		return errors.New("the stream was empty")
	case v.size%512 != sha256.Size:
		return fmt.Errorf("%d bytes is not an etcd snapshot's size (a multiple of 512 plus etcd's 32-byte sha256): the stream ended early", v.size)
	case !bytes.Equal(v.db.Sum(nil), v.tail):
		return fmt.Errorf("the sha256 etcd appended does not match the %d bytes before it: the snapshot was corrupted on its way", v.size-sha256.Size)
	}
	return nil
}

// SnapshotRevision reads the etcd revision of a verified snapshot of size
// bytes: the main revision of the newest key in etcd's key bucket, as
// etcdutl's snapshot status reports it. The snapshot is a bbolt database
// (go.etcd.io/bbolt v1.4: two meta pages, a root bucket whose leaf
// elements are the buckets, B+tree pages of branch and leaf elements) with
// the hash appended; only what leads to the last key is read.
func SnapshotRevision(r io.ReaderAt, size int64) (int64, error) {
	db := boltReader{r: r, size: size - sha256.Size}
	if err := db.open(); err != nil {
		return 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	keyBucket, err := db.find(db.root, []byte("key"))
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot: bucket key: %w", err)
	}
	key, err := db.lastKey(keyBucket)
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot: bucket key: %w", err)
	}
	// mvcc.RevToBytes: 8 bytes main revision, '_', 8 bytes sub revision,
	// and 't' for a tombstone
	if (len(key) != 17 && len(key) != 18) || key[8] != '_' {
		return 0, fmt.Errorf("etcd snapshot: key bucket's last key %x is not a revision", key)
	}
	return int64(binary.BigEndian.Uint64(key)), nil //nolint:gosec // etcd's revisions are int64
}

const (
	boltMagic      = 0xED0CDAED
	boltBranchPage = 0x01
	boltLeafPage   = 0x02
	boltBucketLeaf = 0x01
	boltMaxDepth   = 64
)

type boltReader struct {
	r        io.ReaderAt
	size     int64
	pageSize int64
	root     []byte // the root bucket's InBucket
}

// open picks the newer valid meta page, as bbolt's DB.meta does.
func (b *boltReader) open() error {
	var best []byte
	var bestTx uint64
	for i := range int64(2) {
		head := make([]byte, 16+64)
		off := int64(0)
		if i == 1 {
			if b.pageSize == 0 {
				break
			}
			off = b.pageSize
		}
		if _, err := b.r.ReadAt(head, off); err != nil {
			continue
		}
		m := head[16:]
		h := fnv.New64a()
		h.Write(m[:56]) //nolint:errcheck // hashes never fail
		if binary.LittleEndian.Uint32(m) != boltMagic || binary.LittleEndian.Uint32(m[4:]) != 2 || binary.LittleEndian.Uint64(m[56:]) != h.Sum64() {
			continue
		}
		if i == 0 {
			b.pageSize = int64(binary.LittleEndian.Uint32(m[8:]))
		}
		if tx := binary.LittleEndian.Uint64(m[48:]); best == nil || tx > bestTx {
			best, bestTx = m, tx
		}
	}
	if best == nil || b.pageSize < 512 || b.pageSize > 1<<16 {
		return errors.New("not a bbolt database: no valid meta page")
	}
	b.root = best[16:32]
	return nil
}

// page reads page id with its overflow pages.
func (b *boltReader) page(id uint64) ([]byte, error) {
	off := int64(id) * b.pageSize //nolint:gosec // bounded just below
	if id == 0 || off < 0 || off+b.pageSize > b.size {
		return nil, fmt.Errorf("page %d is outside the file", id)
	}
	p := make([]byte, b.pageSize)
	if _, err := b.r.ReadAt(p, off); err != nil {
		return nil, err
	}
	if overflow := int64(binary.LittleEndian.Uint32(p[12:])); overflow > 0 {
		if off+(overflow+1)*b.pageSize > b.size {
			return nil, fmt.Errorf("page %d overflows the file", id)
		}
		p = make([]byte, (overflow+1)*b.pageSize)
		if _, err := b.r.ReadAt(p, off); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// bucketRoot is a bucket's root page: its own page, or inline after the
// InBucket header.
func (b *boltReader) bucketRoot(in []byte) ([]byte, error) {
	if len(in) < 16 {
		return nil, errors.New("short bucket header")
	}
	if id := binary.LittleEndian.Uint64(in); id != 0 {
		return b.page(id)
	}
	return in[16:], nil
}

// element i of page p: its key, and its value (leaf) or child (branch).
func element(p []byte, i int) (flags uint32, key, value []byte, child uint64, err error) {
	e := 16 + 16*i
	if e+16 > len(p) {
		return 0, nil, nil, 0, errors.New("element outside its page")
	}
	if binary.LittleEndian.Uint16(p[8:]) == boltLeafPage {
		// leafPageElement: flags, pos, ksize, vsize; pos counts from the element
		flags = binary.LittleEndian.Uint32(p[e:])
		pos := e + int(binary.LittleEndian.Uint32(p[e+4:]))
		ks, vs := int(binary.LittleEndian.Uint32(p[e+8:])), int(binary.LittleEndian.Uint32(p[e+12:]))
		if pos < e || pos+ks+vs > len(p) {
			return 0, nil, nil, 0, errors.New("element data outside its page")
		}
		return flags, p[pos : pos+ks], p[pos+ks : pos+ks+vs], 0, nil
	}
	// branchPageElement: pos, ksize, child page id
	pos, ks := e+int(binary.LittleEndian.Uint32(p[e:])), int(binary.LittleEndian.Uint32(p[e+4:]))
	if pos < e || pos+ks > len(p) {
		return 0, nil, nil, 0, errors.New("element data outside its page")
	}
	return 0, p[pos : pos+ks], nil, binary.LittleEndian.Uint64(p[e+8:]), nil
}

// find returns the InBucket of bucket name inside the bucket in.
func (b *boltReader) find(in, name []byte) ([]byte, error) {
	p, err := b.bucketRoot(in)
	if err != nil {
		return nil, err
	}
	for range boltMaxDepth {
		if len(p) < 16 {
			return nil, errors.New("short page")
		}
		count := int(binary.LittleEndian.Uint16(p[10:]))
		switch binary.LittleEndian.Uint16(p[8:]) {
		case boltLeafPage:
			for i := range count {
				flags, key, value, _, err := element(p, i)
				if err != nil {
					return nil, err
				}
				if bytes.Equal(key, name) && flags&boltBucketLeaf != 0 {
					return value, nil
				}
			}
			return nil, errors.New("no such bucket")
		case boltBranchPage:
			// the last child whose first key is not above name
			var next uint64
			for i := range count {
				_, key, _, child, err := element(p, i)
				if err != nil {
					return nil, err
				}
				if i > 0 && bytes.Compare(key, name) > 0 {
					break
				}
				next = child
			}
			if p, err = b.page(next); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("page of unexpected type %#x", binary.LittleEndian.Uint16(p[8:]))
		}
	}
	return nil, errors.New("bucket tree too deep")
}

// lastKey is the bucket's greatest key: down the last child of every branch.
func (b *boltReader) lastKey(in []byte) ([]byte, error) {
	p, err := b.bucketRoot(in)
	if err != nil {
		return nil, err
	}
	for range boltMaxDepth {
		if len(p) < 16 {
			return nil, errors.New("short page")
		}
		count := int(binary.LittleEndian.Uint16(p[10:]))
		if count == 0 {
			return nil, errors.New("no keys")
		}
		_, key, _, child, err := element(p, count-1)
		if err != nil {
			return nil, err
		}
		switch binary.LittleEndian.Uint16(p[8:]) {
		case boltLeafPage:
			return key, nil
		case boltBranchPage:
			if p, err = b.page(child); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("page of unexpected type %#x", binary.LittleEndian.Uint16(p[8:]))
		}
	}
	return nil, errors.New("bucket tree too deep")
}

// SnapshotMember is one member of the etcd cluster a snapshot was taken
// of, as etcd's members bucket stores it (membership.Member's JSON).
type SnapshotMember struct {
	ID        uint64 `json:"id"`
	Name      string `json:"name,omitempty"`
	IsLearner bool   `json:"isLearner,omitempty"`
}

// maxSnapshotMembers bounds the members bucket read: etcd allows far fewer.
const maxSnapshotMembers = 1024

// SnapshotMembers reads the members bucket of a verified snapshot of size
// bytes: who the cluster was when it was taken. A member removed since
// sits in members_removed, not here.
func SnapshotMembers(r io.ReaderAt, size int64) ([]SnapshotMember, error) {
	db := boltReader{r: r, size: size - sha256.Size}
	if err := db.open(); err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}
	bucket, err := db.find(db.root, []byte("members"))
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot: bucket members: %w", err)
	}
	var out []SnapshotMember
	err = db.each(bucket, boltMaxDepth, func(key, value []byte) error {
		if len(out) == maxSnapshotMembers {
			return fmt.Errorf("more than %d members", maxSnapshotMembers)
		}
		var m SnapshotMember
		if err := json.Unmarshal(value, &m); err != nil {
			return fmt.Errorf("member %q does not decode", key)
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot: bucket members: %w", err)
	}
	return out, nil
}

// each calls fn on every key and value of the bucket in, in order.
func (b *boltReader) each(in []byte, depth int, fn func(key, value []byte) error) error {
	p, err := b.bucketRoot(in)
	if err != nil {
		return err
	}
	return b.walk(p, depth, fn)
}

func (b *boltReader) walk(p []byte, depth int, fn func(key, value []byte) error) error {
	if depth == 0 {
		return errors.New("bucket tree too deep")
	}
	if len(p) < 16 {
		return errors.New("short page")
	}
	count := int(binary.LittleEndian.Uint16(p[10:]))
	typ := binary.LittleEndian.Uint16(p[8:])
	for i := range count {
		flags, key, value, child, err := element(p, i)
		if err != nil {
			return err
		}
		switch typ {
		case boltLeafPage:
			if flags&boltBucketLeaf != 0 {
				continue // a nested bucket: not a member
			}
			if err := fn(key, value); err != nil {
				return err
			}
		case boltBranchPage:
			cp, err := b.page(child)
			if err != nil {
				return err
			}
			if err := b.walk(cp, depth-1, fn); err != nil {
				return err
			}
		default:
			return fmt.Errorf("page of unexpected type %#x", typ)
		}
	}
	return nil
}

// SnapshotFile is a verified etcd snapshot on disk.
type SnapshotFile struct {
	Path     string
	Size     int64
	SHA256   string
	Revision int64
	Members  []SnapshotMember
}

// VerifySnapshotFile checks an etcd snapshot file before it is sent
// anywhere: etcd's shape (the database then its sha256, size % 512 == 32,
// as etcdutl's restore tests it), the hash itself, and a members bucket
// and key bucket that read. Its errors quote no content.
func VerifySnapshotFile(path string) (*SnapshotFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot %s: %w", path, err)
	}
	size := st.Size()
	if !st.Mode().IsRegular() || size < 2*512+sha256.Size || size%512 != sha256.Size {
		return nil, fmt.Errorf("etcd snapshot %s: %d bytes is not an etcd snapshot's size (a database of 512-byte multiples and its sha256): take a new one with devata backup etcd", path, size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size-sha256.Size)); err != nil {
		return nil, fmt.Errorf("etcd snapshot %s: %w", path, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := f.ReadAt(want, size-sha256.Size); err != nil {
		return nil, fmt.Errorf("etcd snapshot %s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return nil, fmt.Errorf("etcd snapshot %s is damaged: its sha256 does not match the one etcd appended; restore it from another copy or take a new one", path)
	}
	rev, err := SnapshotRevision(f, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	members, err := SnapshotMembers(f, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &SnapshotFile{Path: path, Size: size, SHA256: hex.EncodeToString(want), Revision: rev, Members: members}, nil
}
