package sim_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// etcdStatus is the member's own status as EtcdStatus reports it.
func etcdStatus(t *testing.T, c *client.Client) *machine.EtcdMemberStatus {
	t.Helper()

	resp, err := c.EtcdStatus(ctxTimeout(t, time.Second))
	if err != nil {
		t.Fatalf("etcd status: %v", err)
	}

	return resp.GetMessages()[0].GetMemberStatus()
}

// etcd without quorum as Talos serves it (v1alpha1_server.go
// EtcdMemberList, EtcdStatus, EtcdSnapshot; etcd's v3rpc interceptor.go and
// maintenance.go Status and Snapshot; clientv3's retry interceptor): a
// leader that goes down is replaced and the others keep answering; with two
// of three members down the one that runs reports leader 0 and "etcdserver:
// no leader" in its status, its member list fails "etcdserver: no leader"
// (code Unknown) once the client's retries are spent, local or not, and
// still streams its snapshot, to an os:etcd:backup client too; when a
// member comes back the cluster has a leader again, and the leader elected
// meanwhile keeps its place when the old one returns.
func TestEtcdWithoutQuorum(t *testing.T) {
	t.Parallel()

	const noLeaderWait = 400 * time.Millisecond

	f := controlPlanes(t, 3, sim.Options{EtcdNoLeaderWait: noLeaderWait})
	joined(t, f, 3)

	addr := func(name string) string { return f.Machine(name).Addr() }
	c2, c3 := admin(t, addr("cp-2")), admin(t, addr("cp-3"))
	backup2 := dial(t, role.MakeSet(role.EtcdBackup), addr("cp-2"))
	ids := memberIDs(t, c2)

	for _, c := range []*client.Client{admin(t, addr("cp-1")), c2, c3} {
		if st := etcdStatus(t, c); st.Leader != ids["cp-1"] || len(st.Errors) != 0 {
			t.Errorf("member %x: leader %x, errors %v; want cp-1 (%x), none", st.MemberId, st.Leader, st.Errors, ids["cp-1"])
		}
	}

	// the leader goes: the two left are a quorum and elect cp-2
	f.Machine("cp-1").SetFaults(sim.Faults{Unreachable: true})

	for _, c := range []*client.Client{c2, c3} {
		if st := etcdStatus(t, c); st.Leader != ids["cp-2"] || len(st.Errors) != 0 {
			t.Errorf("member %x with cp-1 down: leader %x, errors %v; want cp-2 (%x)", st.MemberId, st.Leader, st.Errors, ids["cp-2"])
		}
	}

	if got := memberIDs(t, c3); len(got) != 3 {
		t.Errorf("member list with cp-1 down: %v, want all three", got)
	}

	// and cp-3: cp-2 alone is no quorum
	f.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})

	for _, c := range []*client.Client{c2, backup2} {
		if st := etcdStatus(t, c); st.MemberId != ids["cp-2"] || st.Leader != 0 || !slices.Equal(st.Errors, []string{"etcdserver: no leader"}) {
			t.Errorf("cp-2's status without quorum: member %x, leader %x, errors %q; want cp-2, leader 0, [etcdserver: no leader]", st.MemberId, st.Leader, st.Errors)
		}
	}

	for _, local := range []bool{true, false} {
		begin := time.Now()
		_, err := backup2.EtcdMemberList(ctxTimeout(t, 5*time.Second), &machine.EtcdMemberListRequest{QueryLocal: local})
		wantCode(t, "member list without quorum", err, codes.Unknown, "etcdserver: no leader")

		if took := time.Since(begin); took < noLeaderWait {
			t.Errorf("member list without quorum (local %v) failed after %s: the client retries for %s first", local, took, noLeaderWait)
		}
	}

	// a caller's deadline before the retries are spent ends the call
	_, err := c2.EtcdMemberList(ctxTimeout(t, noLeaderWait/4), &machine.EtcdMemberListRequest{QueryLocal: true})
	if client.StatusCode(err) != codes.DeadlineExceeded {
		t.Errorf("member list without quorum, a deadline before the retries end: %v, want DeadlineExceeded", err)
	}

	data, _, err := snapshot(t, backup2)
	if err != nil {
		t.Fatalf("snapshot from cp-2 without quorum: %v", err)
	}

	if want, _ := f.EtcdSnapshotFile("cp-2"); !bytes.Equal(data, want) || etcdShaped(data) != nil {
		t.Errorf("cp-2's snapshot without quorum: %d bytes (%v), want its database's %d", len(data), etcdShaped(data), len(want))
	}

	// cp-3 is back: a quorum again, cp-2 leads
	f.Machine("cp-3").SetFaults(sim.Faults{})

	if got := memberIDs(t, c2); len(got) != 3 {
		t.Errorf("member list with quorum back: %v, want all three", got)
	}

	f.Machine("cp-1").SetFaults(sim.Faults{})

	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		if st := etcdStatus(t, admin(t, addr(name))); st.Leader != ids["cp-2"] || len(st.Errors) != 0 {
			t.Errorf("%s with every member back: leader %x, errors %v; want cp-2 (%x) still", name, st.Leader, st.Errors, ids["cp-2"])
		}
	}
}
