package sim

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// etcd snapshots as Talos v1.11.0 streams them. machined's EtcdSnapshot
// (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go)
// refuses a worker (checkControlplane: Unimplemented "etcd snapshot is only
// available on control plane nodes"), opens a client to the local etcd
// (internal/pkg/etcd/etcd.go NewLocalClient) and copies clientv3's
// Maintenance.Snapshot reader into common.Data messages through
// pkg/chunker/stream's Chunker, 1024 bytes a read. What etcd sends
// (server/etcdserver/api/v3rpc/maintenance.go Snapshot) is its bbolt
// database file followed by the sha256 of those bytes, and that file is the
// snapshot: etcdutl's snapshot restore (etcdutl/snapshot/v3_snapshot.go
// saveDB) takes `size % 512 == sha256.Size` as the sign that the hash is
// there and checks it. The Chunker ends its loop on any read error, so a
// snapshot whose etcd stream broke off ends as a short stream with status
// OK: only the size and the hash tell.
//
// The sim's database is a real bbolt file (go.etcd.io/bbolt v1.4 layout,
// 4 KiB pages, little-endian) holding etcd v3.6's buckets: the members
// (membership.Member JSON by hex ID), meta (consistent_index, term,
// confState, storageVersion), cluster (clusterVersion) and the key bucket
// (revision → mvccpb.KeyValue), so that etcdutl's snapshot status, which
// talosctl runs on the file it saved, reads its revision and keys.

// snapshotChunk is the Chunker's default read size (stream.NewChunker).
const snapshotChunk = 1024

// etcdRaftIndex and etcdRaftTerm are what every member reports
// (EtcdStatus) and stores as its consistent index and term.
const (
	etcdRaftIndex = 4242
	etcdRaftTerm  = 2
)

// etcdKV is one revision of one key, as etcd's key bucket holds it.
type etcdKV struct {
	key, value           []byte
	create, mod, version int64
}

// memberKey is the sim's key for a member whose etcd started: the sim's
// key space is its own, one key per start, so that the revision moves as
// the cluster does.
func memberKey(hostname string) string { return "/devata-sim/members/" + hostname }

// put writes key at the next revision; the caller holds the fleet's lock.
func (c *etcdCluster) put(key, value string) {
	c.revision++

	kv := etcdKV{key: []byte(key), value: []byte(value), create: c.revision, mod: c.revision, version: 1}

	for _, old := range slices.Backward(c.kvs) {
		if bytes.Equal(old.key, kv.key) {
			kv.create, kv.version = old.create, old.version+1

			break
		}
	}

	c.kvs = append(c.kvs, kv)
}

// EtcdSnapshot streams the node's etcd database as machined does; see the
// comment at the top of this file. The faults EtcdSnapshotCorrupt,
// EtcdSnapshotData and EtcdSnapshotCutAt bend the stream.
func (a *machineAPI) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	t, s := target(srv.Context())

	if err := onlyControlPlane(s, "etcd snapshot"); err != nil {
		return err
	}

	file, flip := a.fleet.etcdSnapshotOf(t)
	if file == nil {
		return snapshotRefused(a.fleet.etcdNotRunning(srv.Context(), s))
	}

	if s.faults.EtcdSnapshotCorrupt {
		file[flip] ^= 0x01
	}

	if s.faults.EtcdSnapshotData != nil {
		file = slices.Clone(s.faults.EtcdSnapshotData)
		a.fleet.rememberGiven(file)
	}

	if n := s.faults.EtcdSnapshotCutAt; n > 0 && n < len(file) {
		file = file[:n]
	}

	for len(file) > 0 {
		n := min(snapshotChunk, len(file))
		if err := srv.Send(&common.Data{Bytes: file[:n]}); err != nil {
			return err
		}

		file = file[n:]
	}

	return nil
}

// snapshotRefused words etcdNotRunning's answer as EtcdSnapshot does:
// NewLocalClient's failure wrapped "failed to create etcd client", and the
// snapshot call's wait "failed reading etcd snapshot". gRPC keeps the code
// of a wrapped context error (status.FromContextError).
func snapshotRefused(err error) error {
	st := status.Convert(err)
	if st.Code() == codes.Unknown {
		return status.Error(codes.Unknown, "failed to create etcd client: "+st.Message())
	}

	return status.Error(st.Code(), "failed reading etcd snapshot: "+st.Message())
}

// EtcdSnapshotFile is the snapshot the named machine's etcd would stream
// now, without faults, and the cluster's revision; nil while its etcd does
// not run. Tests compare what clients saved against it.
func (f *Fleet) EtcdSnapshotFile(name string) (file []byte, revision int64) {
	m := f.Machine(name)
	if m == nil {
		return nil, 0
	}

	file, _ = f.etcdSnapshotOf(m)
	if file == nil {
		return nil, 0
	}

	f.mu.Lock()
	defer f.mu.Unlock()

	m.mu.Lock()
	c := m.etcdCluster
	m.mu.Unlock()

	return file, c.revision
}

// etcdSnapshotOf is m's etcd database as an etcd snapshot file, and the
// offset of a byte inside the value of its newest key (the byte the
// corrupt fault flips: bbolt and etcdutl's status do not notice it, the
// hash does); nil while m's etcd does not run.
func (f *Fleet) etcdSnapshotOf(m *Machine) (file []byte, flip int) {
	f.mu.Lock()
	defer f.mu.Unlock()

	if !m.snap().etcdRunning() {
		return nil, 0
	}

	m.mu.Lock()
	c := m.etcdCluster
	m.mu.Unlock()

	members := c.views()

	db, last := boltFile(etcdBuckets(c, members), uint64(c.revision))
	sum := sha256.Sum256(db)
	f.remember(db, c)

	return append(db, sum[:]...), last
}

// etcdBuckets are etcd v3.6's buckets (server/storage/schema/bucket.go)
// for the cluster, the key bucket last so that boltFile reports a byte of
// its newest value. The cluster version (cluster bucket) and the storage
// version (meta bucket) are those the cluster's members decide: the lowest
// major.minor of the etcd they run (etcdversion.go storageVersion), which
// etcd writes there (membership/cluster.go SetVersion,
// schema/version.go UnsafeSetStorageVersion): "3.7.0" for a cluster all
// on Talos 1.14's etcd 3.7.1, "3.6.0" for one on 1.11 to 1.13. The caller
// holds the fleet's lock.
func etcdBuckets(c *etcdCluster, members []memberView) []boltBucket {
	version := cmp.Or(c.storageVersion(), "3.6.0")
	be64 := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

	// membership.Member as schema.MustSaveMemberToBackend stores it
	type member struct {
		ID         uint64   `json:"id"`
		PeerURLs   []string `json:"peerURLs"`
		IsLearner  bool     `json:"isLearner,omitempty"`
		Name       string   `json:"name,omitempty"`
		ClientURLs []string `json:"clientURLs,omitempty"`
	}

	// raftpb.ConfState's JSON (schema.MustUnsafeSaveConfStateToBackend)
	var conf struct {
		Voters   []uint64 `json:"voters,omitempty"`
		Learners []uint64 `json:"learners,omitempty"`
	}

	mem := boltBucket{name: "members"}

	for _, v := range members {
		b, _ := json.Marshal(member{ //nolint:errcheck // plain values always marshal
			ID:         v.id,
			PeerURLs:   []string{fmt.Sprintf("https://%s", joinHostPort(v.host, 2380))},
			IsLearner:  v.learner,
			Name:       v.name,
			ClientURLs: clientURLs(v),
		})
		mem.kvs = append(mem.kvs, boltKV{[]byte(strconv.FormatUint(v.id, 16)), b})

		if v.learner {
			conf.Learners = append(conf.Learners, v.id)
		} else {
			conf.Voters = append(conf.Voters, v.id)
		}
	}

	confJSON, _ := json.Marshal(conf) //nolint:errcheck // plain values always marshal

	keys := boltBucket{name: "key"}

	for _, kv := range c.kvs {
		// mvcc.RevToBytes: main revision, '_', sub revision, big-endian
		rev := binary.BigEndian.AppendUint64(nil, uint64(kv.mod))
		rev = append(rev, '_')
		rev = binary.BigEndian.AppendUint64(rev, 0)

		keys.kvs = append(keys.kvs, boltKV{rev, keyValue(kv)})
	}

	return []boltBucket{
		{name: "alarm"},
		{name: "auth", kvs: []boltKV{{[]byte("authEnabled"), []byte{0}}, {[]byte("authRevision"), be64(1)}}},
		{name: "authRoles"},
		{name: "authUsers"},
		{name: "cluster", kvs: []boltKV{{[]byte("clusterVersion"), []byte(version)}}},
		{name: "lease"},
		mem,
		{name: "members_removed"},
		{name: "meta", kvs: []boltKV{
			{[]byte("confState"), confJSON},
			{[]byte("consistent_index"), be64(etcdRaftIndex)},
			{[]byte("storageVersion"), []byte(version)},
			{[]byte("term"), be64(etcdRaftTerm)},
		}},
		keys,
	}
}

// keyValue encodes mvccpb.KeyValue (api/mvccpb/kv.proto): key 1, create
// revision 2, mod revision 3, version 4, value 5.
func keyValue(kv etcdKV) []byte {
	var b []byte

	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, kv.key)

	for _, f := range []struct {
		num protowire.Number
		v   int64
	}{{2, kv.create}, {3, kv.mod}, {4, kv.version}} {
		b = protowire.AppendTag(b, f.num, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(f.v))
	}

	b = protowire.AppendTag(b, 5, protowire.BytesType)

	return protowire.AppendBytes(b, kv.value)
}

// A bbolt database, as go.etcd.io/bbolt v1.4 lays it out
// (internal/common/page.go, meta.go, bucket.go; db.go init): two meta
// pages, a freelist page, the root bucket's leaf page, whose elements are
// the buckets, and a leaf page (with overflow pages when it is larger) for
// each bucket. bbolt writes small buckets inline; a page of their own is
// as valid, and what bbolt's Check walks.
const (
	boltPageSize   = 4096
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltLeafPage   = 0x02
	boltMetaPage   = 0x04
	boltFreePage   = 0x10
	boltBucketLeaf = 0x01
	boltHeader     = 16 // page: id, flags, count, overflow
	boltElement    = 16 // leafPageElement: flags, pos, ksize, vsize
)

type boltKV struct{ key, value []byte }

type boltBucket struct {
	name string
	kvs  []boltKV
}

// boltFile lays out the buckets, each sorted by key, with txid as the
// newest transaction. last is the file offset of a byte inside the last
// bucket's last value, or 0.
func boltFile(buckets []boltBucket, txid uint64) (file []byte, last int) {
	slices.SortFunc(buckets, func(a, b boltBucket) int { return bytes.Compare([]byte(a.name), []byte(b.name)) })

	var (
		pages [][]byte
		root  []boltKV
		next  = uint64(4) // 0, 1 meta; 2 freelist; 3 the root bucket
	)

	for _, b := range buckets {
		kvs := slices.Clone(b.kvs)
		slices.SortFunc(kvs, func(x, y boltKV) int { return bytes.Compare(x.key, y.key) })

		p := boltLeaf(next, kvs, 0)
		if len(kvs) > 0 {
			lv := kvs[len(kvs)-1].value
			last = int(next)*boltPageSize + boltLeafDataEnd(kvs) - len(lv)/2 - 1
		}

		// InBucket: the bucket's root page, its sequence
		in := binary.LittleEndian.AppendUint64(nil, next)
		in = binary.LittleEndian.AppendUint64(in, 0)
		root = append(root, boltKV{[]byte(b.name), in})

		pages = append(pages, p)
		next += uint64(len(p) / boltPageSize)
	}

	file = slices.Concat(
		boltMeta(0, next, txid&^1),
		boltMeta(1, next, txid|1),
		boltPage(2, boltFreePage, 0, 0),
		boltLeaf(3, root, boltBucketLeaf),
		slices.Concat(pages...),
	)

	return file, last
}

// boltLeafDataEnd is where a leaf page's data ends, from the page's start.
func boltLeafDataEnd(kvs []boltKV) int {
	n := boltHeader + boltElement*len(kvs)

	for _, kv := range kvs {
		n += len(kv.key) + len(kv.value)
	}

	return n
}

func boltPage(id uint64, flags uint16, count int, overflow int) []byte {
	p := make([]byte, (overflow+1)*boltPageSize)
	binary.LittleEndian.PutUint64(p[0:], id)
	binary.LittleEndian.PutUint16(p[8:], flags)
	binary.LittleEndian.PutUint16(p[10:], uint16(count))    //nolint:gosec // the sim's buckets are small
	binary.LittleEndian.PutUint32(p[12:], uint32(overflow)) //nolint:gosec // idem

	return p
}

// boltLeaf is a leaf page (and its overflow pages) holding kvs, sorted,
// every element with flags.
func boltLeaf(id uint64, kvs []boltKV, flags uint32) []byte {
	size := boltLeafDataEnd(kvs)
	p := boltPage(id, boltLeafPage, len(kvs), (size-1)/boltPageSize)
	off := boltHeader + boltElement*len(kvs)

	for i, kv := range kvs {
		e := boltHeader + boltElement*i
		binary.LittleEndian.PutUint32(p[e:], flags)
		binary.LittleEndian.PutUint32(p[e+4:], uint32(off-e))          //nolint:gosec // within a page
		binary.LittleEndian.PutUint32(p[e+8:], uint32(len(kv.key)))    //nolint:gosec // idem
		binary.LittleEndian.PutUint32(p[e+12:], uint32(len(kv.value))) //nolint:gosec // idem
		off += copy(p[off:], kv.key)
		off += copy(p[off:], kv.value)
	}

	return p
}

// boltMeta is a meta page: the root bucket on page 3, the freelist on 2,
// hwm pages in all, and its checksum (FNV-64a of the fields before it).
func boltMeta(id, hwm, txid uint64) []byte {
	p := boltPage(id, boltMetaPage, 0, 0)
	m := p[boltHeader:]
	binary.LittleEndian.PutUint32(m[0:], boltMagic)
	binary.LittleEndian.PutUint32(m[4:], boltVersion)
	binary.LittleEndian.PutUint32(m[8:], boltPageSize)
	binary.LittleEndian.PutUint64(m[16:], 3) // root bucket: page 3, sequence 0
	binary.LittleEndian.PutUint64(m[32:], 2) // freelist
	binary.LittleEndian.PutUint64(m[40:], hwm)
	binary.LittleEndian.PutUint64(m[48:], txid)

	h := fnv.New64a()
	_, _ = h.Write(m[:56]) //nolint:errcheck // hashes never fail
	binary.LittleEndian.PutUint64(m[56:], h.Sum64())

	return p
}
