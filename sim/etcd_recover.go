package sim

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// servedSnapshot is what one snapshot the fleet streamed holds: the key
// space at its revision.
type servedSnapshot struct {
	revision int64
	kvs      []etcdKV
}

// remember records a snapshot the fleet streams, by its database's
// sha256; the caller holds the fleet's lock.
func (f *Fleet) remember(db []byte, c *etcdCluster) {
	if f.served == nil {
		f.served = map[[32]byte]servedSnapshot{}
	}

	f.served[sha256.Sum256(db)] = servedSnapshot{revision: c.revision, kvs: slices.Clone(c.kvs)}
}

// recoverySnapshotPath is where EtcdRecover writes the upload
// (constants.EtcdRecoverySnapshotPath).
const recoverySnapshotPath = "/var/lib/etcd.snapshot"

// EtcdRecover takes a snapshot upload as machined does
// (v1alpha1_server.go EtcdRecover): FailedPrecondition "etcd service is
// not ready for recovery yet" until /var is mounted (CRIStartDelay after a
// boot), Unimplemented on a worker, then every message's bytes written to
// the recovery file, which a broken stream leaves absent; the reply once
// the client closed its side. In maintenance mode it is not served (the
// maintenance service has no EtcdRecover). Faults.EtcdRecoverCorrupt
// damages what is written.
func (a *machineAPI) EtcdRecover(srv grpc.ClientStreamingServer[common.Data, machine.EtcdRecoverResponse]) error {
	t, s := target(srv.Context())

	if time.Since(s.booted) < a.fleet.criDelay {
		return status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
	}

	if err := onlyControlPlane(s, "etcd recover"); err != nil {
		return err
	}

	var buf bytes.Buffer

	for {
		msg, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.setRecovery(nil)

			return err
		}

		buf.Write(msg.GetBytes())
	}

	data := buf.Bytes()
	if s.faults.EtcdRecoverCorrupt && len(data) > 2*sha256.Size {
		data[(len(data)-sha256.Size)/2] ^= 0x10 // in the database, not its hash
	}

	t.setRecovery(data)
	a.fleet.log.Info("sim: etcd recovery snapshot uploaded", "machine", t.name, "bytes", buf.Len())

	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{}}})
}

func (m *Machine) setRecovery(data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.recovery = data
}

// recoverEtcd is the etcd service started by Bootstrap with recover_etcd
// (services/etcd.go BootstrapEtcd, recoverFromSnapshot): the uploaded
// snapshot's status, then etcdutl's restore, which checks the sha256 etcd
// appended unless the hash check is skipped; on success the snapshot file
// is removed and the node runs a new single-member cluster holding the
// snapshot's key space, which the other control planes join. On failure
// the PreFunc fails and the etcd service goes Failed with the error, not
// restarted (system.go Start: "Failed to run pre stage: …"). What the
// failure leaves follows etcdutl v3.6.4 and v3.7.1 (snapshot/v3_snapshot.go
// Restore, copyAndVerifyDB): a snapshot its status cannot read (none
// uploaded, or one the sim did not stream) fails before anything is
// written; a hash that does not match, or a missing one without
// --skip-hash-check, fails after member/snap/db was written, so the data
// directory is no longer empty (see dataLeft). The sim restores only
// snapshots it streamed itself.
func (m *Machine) recoverEtcd(skipHash bool) {
	f := m.fleet

	m.mu.Lock()
	data := m.recovery
	m.mu.Unlock()

	from, wrote, err := f.restorable(data, skipHash)
	if err != nil {
		m.mu.Lock()
		m.etcdFailed, m.etcdFailure = time.Now(), "Failed to run pre stage: "+err.Error()
		if wrote {
			m.etcdDataLeft = err.Error()
		}
		m.mu.Unlock()

		f.log.Warn("sim: etcd recovery failed", "machine", m.name, "error", err, "data_left", wrote)
		m.sync()

		return
	}

	m.mu.Lock()
	m.recovery, m.etcdFailed, m.etcdFailure = nil, time.Time{}, ""
	m.mu.Unlock()

	if f.bootstrapEtcdFrom(m, &from) {
		f.log.Info("sim: etcd recovered from a snapshot", "machine", m.name, "revision", from.revision)
	}
}

// replaceEtcdService is BootstrapEtcd's swap of the etcd service before
// Bootstrap replies (services/etcd.go BootstrapEtcd: Stop, Unload, Load,
// Start): the new service has none of the old one's events, so a failure
// of an earlier recovery no longer shows; it is Preparing until the
// restore ends.
func (m *Machine) replaceEtcdService() {
	m.mu.Lock()
	m.etcdFailed, m.etcdFailure = time.Time{}, ""
	m.mu.Unlock()

	m.sync()
}

// restorable checks an uploaded snapshot as Talos' recovery does and
// returns what it holds; wrote reports a failure that came after
// etcdutl's restore wrote the database into the data directory.
func (f *Fleet) restorable(data []byte, skipHash bool) (s servedSnapshot, wrote bool, err error) {
	const prefix = "error recovering from the snapshot: "

	if data == nil {
		return servedSnapshot{}, false, fmt.Errorf("error verifying snapshot: open %s: no such file or directory", recoverySnapshotPath)
	}

	db := data
	hasHash := len(data)%512 == sha256.Size

	if hasHash {
		db = data[:len(data)-sha256.Size]
	}

	f.mu.Lock()
	s, ok := f.served[sha256.Sum256(db)]
	f.mu.Unlock()

	if hasHash && !skipHash {
		// etcdutl prints both as byte slices (fmt %v)
		if sum := sha256.Sum256(db); !bytes.Equal(sum[:], data[len(db):]) {
			return servedSnapshot{}, true, fmt.Errorf(prefix+"expected sha256 %v, got %v", data[len(db):], sum[:])
		}
	}

	if !hasHash && !skipHash {
		return servedSnapshot{}, true, errors.New(prefix + "snapshot missing hash but --skip-hash-check=false")
	}

	if !ok {
		return servedSnapshot{}, false, errors.New("error verifying snapshot: not a snapshot this simulated fleet streamed (the sim restores only its own)")
	}

	return s, false, nil
}

// forgetDeadClusters drops the clusters no member holds data for any
// more: every member was wiped, and the cluster is gone. The caller does
// not hold the fleet's lock.
func (f *Fleet) forgetDeadClusters() {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.etcd = slices.DeleteFunc(f.etcd, func(c *etcdCluster) bool {
		for _, mem := range c.members {
			mem.m.mu.Lock()
			holds := mem.m.etcdCluster == c && mem.m.etcdID == mem.id
			mem.m.mu.Unlock()

			if holds {
				return false
			}
		}

		f.log.Info("sim: an etcd cluster lost the data of every member: it is gone", "members", len(c.members))

		return true
	})
}
