package sim_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

func snapshotOf(t *testing.T, c *client.Client) []byte {
	t.Helper()

	r, err := c.EtcdSnapshot(ctxTimeout(t, 5*time.Second), &machine.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatalf("etcd snapshot: %v", err)
	}
	defer r.Close()

	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		t.Fatalf("read snapshot: %v", err)
	}

	return buf.Bytes()
}

// wipeAll resets every control plane without leaving etcd and brings each
// back configured from maintenance mode: every member lost its data.
func wipeAll(t *testing.T, f *sim.Fleet, cfg []byte, names ...string) {
	t.Helper()

	for _, n := range names {
		m := f.Machine(n)
		if err := admin(t, m.Addr()).ResetGeneric(ctxTimeout(t, time.Second), &machine.ResetRequest{Reboot: true, Mode: machine.ResetRequest_SYSTEM_DISK}); err != nil {
			t.Fatalf("reset %s: %v", n, err)
		}
	}

	for _, n := range names {
		m := f.Machine(n)
		until(t, n+" in maintenance mode", func() (bool, error) { return !m.Observe().Down && !m.Configured(), nil })

		if _, err := insecure(t, m.Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
			t.Fatalf("apply %s: %v", n, err)
		}

		until(t, n+" configured", func() (bool, error) { return !m.Observe().Down && m.Configured(), nil })
	}
}

func recoverFrom(t *testing.T, c *client.Client, snapshot []byte, skipHash bool) {
	t.Helper()

	ctx := ctxTimeout(t, 5*time.Second)
	eventually(t, "the recovery upload", func() error {
		_, err := c.EtcdRecover(ctx, bytes.NewReader(snapshot))
		return err
	})

	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true, RecoverSkipHashCheck: skipHash}); err != nil {
		t.Fatalf("bootstrap --recover-from: %v", err)
	}
}

// A recovery as Talos v1.11.0 does it (v1alpha1_server.go EtcdRecover and
// Bootstrap, services/etcd.go recoverFromSnapshot): the snapshot uploaded
// to one control plane, Bootstrap with recover_etcd, and a new cluster
// holding the snapshot's key space, which the other control planes join.
// An upload that is missing fails the etcd service and writes nothing; a
// corrupt or hashless one fails it after etcdutl wrote the data directory
// (etcdutl v3.6.4 v3_snapshot.go copyAndVerifyDB): the node holds data,
// and only a wipe of EPHEMERAL lets it recover.
func TestEtcdRecover(t *testing.T) {
	t.Parallel()

	cp, _ := oldFleetConfigs(t)
	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 50 * time.Millisecond, RebootDelay: 100 * time.Millisecond})
	joined(t, f, 3)

	c1 := admin(t, f.Machine("cp-1").Addr())
	snapshot := snapshotOf(t, c1)
	before := f.EtcdClusters()[0].Revision
	oldIDs := memberIDs(t, c1)

	_, err := admin(t, f.Machine("w-1").Addr()).EtcdRecover(ctxTimeout(t, time.Second), bytes.NewReader(snapshot))
	wantCode(t, "recover on a worker", err, codes.Unimplemented, "etcd recover is only available on control plane nodes")

	wipeAll(t, f, cp, "cp-1", "cp-2", "cp-3")

	if cs := f.EtcdClusters(); len(cs) != 0 {
		t.Fatalf("etcd after every member was wiped: %+v, want none", cs)
	}

	c1 = admin(t, f.Machine("cp-1").Addr())

	// no upload: the bootstrap is taken, etcd fails
	eventually(t, "bootstrap without an upload", func() error {
		return c1.Bootstrap(ctxTimeout(t, 5*time.Second), &machine.BootstrapRequest{RecoverEtcd: true})
	})

	until(t, "etcd fails without a snapshot", func() (bool, error) { return serviceState(t, c1, "etcd") == "Failed", nil })

	// nothing was written: the node can still be bootstrapped
	if err := c1.Bootstrap(ctxTimeout(t, time.Second), &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("bootstrap after a recovery with no upload: %v, want it taken (the data directory is empty)", err)
	}

	until(t, "etcd fails again without a snapshot", func() (bool, error) { return serviceState(t, c1, "etcd") == "Failed", nil })

	// a corrupt upload: etcdutl writes the database, then its hash check
	// refuses it, and the data directory is no longer empty
	bad := bytes.Clone(snapshot)
	bad[len(bad)/2] ^= 0xff
	leftBehind(t, f, c1, bad, "expected sha256")

	// a snapshot without etcd's hash, the check not skipped: the same
	wipeEphemeral(t, f, "cp-1")
	c1 = admin(t, f.Machine("cp-1").Addr())
	leftBehind(t, f, c1, snapshot[:len(snapshot)-32], "snapshot missing hash but --skip-hash-check=false")

	wipeEphemeral(t, f, "cp-1")
	c1 = admin(t, f.Machine("cp-1").Addr())

	recoverFrom(t, c1, snapshot, false)
	joined(t, f, 3)

	cs := f.EtcdClusters()
	if len(cs) != 1 || cs[0].Revision < before {
		t.Errorf("etcd after the recovery: %+v, want one cluster at revision %d or later", cs, before)
	}

	for name, id := range memberIDs(t, c1) {
		if id == oldIDs[name] {
			t.Errorf("%s kept its member ID %x: a restored cluster has new members", name, id)
		}
	}

	// the recovered data is there: a snapshot now holds the old one's keys
	now := snapshotOf(t, c1)
	for _, key := range []string{"/devata-sim/members/cp-1", "/devata-sim/members/cp-2", "/devata-sim/members/cp-3"} {
		if bytes.Count(now, []byte(key)) < bytes.Count(snapshot, []byte(key)) {
			t.Errorf("key %s: fewer revisions after the recovery than in the snapshot", key)
		}
	}

	// a second Bootstrap is refused: the node holds data
	err = c1.Bootstrap(context.Background(), &machine.BootstrapRequest{RecoverEtcd: true})
	if err == nil || !strings.Contains(err.Error(), "etcd data directory is not empty") {
		t.Errorf("second recovery: %v", err)
	}
}

// leftBehind recovers from a snapshot etcdutl's restore refuses after it
// wrote the data directory (v3_snapshot.go copyAndVerifyDB): the etcd
// service fails with why, a later Bootstrap answers AlreadyExists, and
// after a reboot etcd fails again, restarting for ever, and Bootstrap
// still answers AlreadyExists; no cluster is made.
func leftBehind(t *testing.T, f *sim.Fleet, c *client.Client, snapshot []byte, why string) {
	t.Helper()

	recoverFrom(t, c, snapshot, false)
	// the service may be Failed already, from an earlier recovery: wait
	// for this one's event
	until(t, "etcd fails on the snapshot", func() (bool, error) {
		return serviceState(t, c, "etcd") == "Failed" && strings.Contains(lastEvent(t, c, "etcd"), why), nil
	})

	if ev := lastEvent(t, c, "etcd"); !strings.HasPrefix(ev, "Failed to run pre stage: error recovering from the snapshot: ") {
		t.Errorf("etcd's event after the failed restore: %q, want the restore's error", ev)
	}

	err := c.Bootstrap(ctxTimeout(t, time.Second), &machine.BootstrapRequest{RecoverEtcd: true})
	wantCode(t, "bootstrap after a failed restore", err, codes.AlreadyExists, "etcd data directory is not empty")

	m := f.Machine("cp-1")
	if err := c.Reboot(ctxTimeout(t, time.Second)); err != nil {
		t.Fatalf("reboot: %v", err)
	}

	until(t, "cp-1 down for its reboot", func() (bool, error) { return m.Observe().Down, nil })
	until(t, "cp-1 back", func() (bool, error) { return !m.Observe().Down, nil })

	c = admin(t, m.Addr())
	until(t, "etcd crash-loops after the reboot", func() (bool, error) {
		return serviceState(t, c, "etcd") == "Failed" && strings.Contains(lastEvent(t, c, "etcd"), "going to restart forever"), nil
	})

	until(t, "bootstrap after the reboot is refused: data", func() (bool, error) {
		err := c.Bootstrap(ctxTimeout(t, time.Second), &machine.BootstrapRequest{RecoverEtcd: true})
		if client.StatusCode(err) == codes.FailedPrecondition {
			return false, nil // CRI not up yet after the boot
		}

		wantCode(t, "bootstrap after the reboot", err, codes.AlreadyExists, "etcd data directory is not empty")

		return true, nil
	})

	if cs := f.EtcdClusters(); len(cs) != 0 {
		t.Fatalf("etcd after a failed restore: %+v, want none", cs)
	}
}

// wipeEphemeral resets a machine as talosctl reset
// --system-labels-to-wipe EPHEMERAL --reboot --graceful=false does, and
// waits until it is back, configured.
func wipeEphemeral(t *testing.T, f *sim.Fleet, name string) {
	t.Helper()

	m := f.Machine(name)
	err := admin(t, m.Addr()).ResetGeneric(ctxTimeout(t, time.Second), &machine.ResetRequest{
		Reboot:                 true,
		Graceful:               false,
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}},
	})
	if err != nil {
		t.Fatalf("reset %s: %v", name, err)
	}

	until(t, name+" down for its reset", func() (bool, error) { return m.Observe().Down, nil })
	until(t, name+" back configured", func() (bool, error) { return !m.Observe().Down && m.Configured(), nil })
}

func lastEvent(t *testing.T, c *client.Client, id string) string {
	t.Helper()

	resp, err := c.ServiceInfo(ctxTimeout(t, time.Second), id)
	if client.StatusCode(err) == codes.Unavailable {
		t.Logf("service %s: %v", id, err) // just back from a reboot: ask again
		return ""
	}
	if err != nil || len(resp) == 0 {
		t.Fatalf("service %s: %v", id, err)
	}

	evs := resp[0].Service.GetEvents().GetEvents()
	if len(evs) == 0 {
		return ""
	}

	return evs[len(evs)-1].GetMsg()
}
