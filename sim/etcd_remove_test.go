package sim_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/sim"
)

func removeByID(t *testing.T, c *client.Client, id uint64) error {
	t.Helper()

	return c.EtcdRemoveMemberByID(ctxTimeout(t, 5*time.Second), &machine.EtcdRemoveMemberByIDRequest{MemberId: id})
}

func wantCode(t *testing.T, what string, err error, code codes.Code, text string) {
	t.Helper()

	if st, _ := status.FromError(err); err == nil || st.Code() != code || !strings.Contains(st.Message(), text) {
		t.Errorf("%s: %v, want %s with %q", what, err, code, text)
	}
}

func serviceState(t *testing.T, c *client.Client, id string) string {
	t.Helper()

	resp, err := c.ServiceList(ctxTimeout(t, time.Second))
	if client.StatusCode(err) == codes.Unavailable {
		// a machine just back from a reboot may reset a connection made
		// before its API listens again: no state yet, ask again
		t.Logf("service list: %v", err)
		return ""
	}
	if err != nil {
		t.Fatalf("service list: %v", err)
	}

	for _, svc := range resp.Messages[0].Services {
		if svc.Id == id {
			return svc.State
		}
	}

	return ""
}

// etcd's strict reconfiguration check behind EtcdRemoveMemberByID
// (etcd server.go mayRemoveMember, cluster.go IsReadyToRemoveVotingMember;
// Talos v1.11.0 v1alpha1_server.go EtcdRemoveMemberByID): a healthy member
// is not removed while another is down, a down member is, the last member
// never is, an unknown ID is NotFound and a worker has no such API.
func TestEtcdRemoveMemberByID(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 50 * time.Millisecond})
	joined(t, f, 3)

	c1 := admin(t, f.Machine("cp-1").Addr())
	ids := memberIDs(t, c1)

	wantCode(t, "unknown member", removeByID(t, c1, 42), codes.NotFound, "failed to remove member 42: etcdserver: member not found")
	wantCode(t, "on a worker", removeByID(t, admin(t, f.Machine("w-1").Addr()), ids["cp-2"]), codes.Unimplemented, "etcd remove member is only available on control plane nodes")

	f.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	wantCode(t, "a healthy member while cp-3 is down", removeByID(t, c1, ids["cp-2"]), codes.Unknown, "etcdserver: unhealthy cluster")

	if err := removeByID(t, c1, ids["cp-3"]); err != nil {
		t.Fatalf("remove the member that is down: %v", err)
	}

	if got := memberIDs(t, c1); len(got) != 2 || got["cp-3"] != 0 {
		t.Errorf("members after removing cp-3: %v", got)
	}

	// cp-3 holds its data but is no member: its etcd fails for ever, and
	// it does not join again
	f.Machine("cp-3").SetFaults(sim.Faults{})
	c3 := admin(t, f.Machine("cp-3").Addr())
	if st := serviceState(t, c3, "etcd"); st != "Failed" {
		t.Errorf("cp-3's etcd service after its member was removed: %q, want Failed", st)
	}

	// two healthy members: one may go, then the last may not
	if err := removeByID(t, c1, ids["cp-2"]); err != nil {
		t.Fatalf("remove cp-2 of two healthy members: %v", err)
	}

	wantCode(t, "the last member", removeByID(t, c1, ids["cp-1"]), codes.Unknown, "not enough started members")

	if cs := f.EtcdClusters(); len(cs) != 1 || !slices.Equal(cs[0].Members, []string{"cp-1"}) {
		t.Errorf("etcd clusters: %+v, want cp-1 alone", cs)
	}
}

// EtcdLeaveCluster (etcd.go Client.LeaveCluster): the node removes its
// own member, stops its etcd and deletes its data; until a reboot its etcd
// stays stopped and EtcdMemberList on it never answers; after one it joins
// again as a new member, as a control plane without data does.
func TestEtcdLeaveCluster(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 50 * time.Millisecond, RebootDelay: 100 * time.Millisecond, EtcdClientWait: 200 * time.Millisecond})
	joined(t, f, 3)

	c1, c3 := admin(t, f.Machine("cp-1").Addr()), admin(t, f.Machine("cp-3").Addr())
	before := memberIDs(t, c1)

	if err := c3.EtcdLeaveCluster(ctxTimeout(t, 5*time.Second), &machine.EtcdLeaveClusterRequest{}); err != nil {
		t.Fatalf("etcd leave: %v", err)
	}

	if got := memberIDs(t, c1); len(got) != 2 || got["cp-3"] != 0 {
		t.Errorf("members after cp-3 left: %v", got)
	}

	if st := serviceState(t, c3, "etcd"); st != "Finished" {
		t.Errorf("cp-3's etcd service after leaving: %q, want Finished", st)
	}

	_, err := c3.EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{})
	wantCode(t, "member list on the node that left", err, codes.DeadlineExceeded, "")

	wk := admin(t, f.Machine("w-1").Addr())
	wantCode(t, "on a worker", wk.EtcdLeaveCluster(ctxTimeout(t, time.Second), &machine.EtcdLeaveClusterRequest{}), codes.Unimplemented, "etcd leave is only available on control plane nodes")

	// two members left, both healthy: cp-2 may leave, then cp-1 may not
	f.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	err = c1.EtcdLeaveCluster(ctxTimeout(t, 3*time.Second), &machine.EtcdLeaveClusterRequest{})
	wantCode(t, "cp-1 leaving while cp-2 is down", err, codes.Unknown, "etcdserver: no leader")
	f.Machine("cp-2").SetFaults(sim.Faults{})

	f.Machine("cp-3").Crash()
	joined(t, f, 3)

	if after := memberIDs(t, c1); after["cp-3"] == 0 || after["cp-3"] == before["cp-3"] {
		t.Errorf("cp-3 after its reboot: member %x, want a new member (it was %x)", after["cp-3"], before["cp-3"])
	}
}

// Reset (v1alpha1_server.go Reset, v1alpha1_sequencer.go Reset): the
// request is checked, acked with an actor ID, and then the sequence runs:
// a graceful reset of a control plane leaves etcd first; the system disk
// wiped, it reboots into maintenance mode, or halts until powered on.
func TestReset(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 50 * time.Millisecond, RebootDelay: 100 * time.Millisecond})
	joined(t, f, 3)

	c3 := admin(t, f.Machine("cp-3").Addr())

	_, err := c3.ResetGenericWithResponse(ctxTimeout(t, time.Second), &machine.ResetRequest{Mode: machine.ResetRequest_SYSTEM_DISK, UserDisksToWipe: []string{"/dev/sdb"}})
	wantCode(t, "user disks with SYSTEM_DISK", err, codes.Unknown, "wipe mode SYSTEM_DISK doesn't support UserDisksToWipe")

	_, err = c3.ResetGenericWithResponse(ctxTimeout(t, time.Second), &machine.ResetRequest{Mode: machine.ResetRequest_USER_DISKS, UserDisksToWipe: []string{"/dev/nvme9n1"}})
	wantCode(t, "an unknown disk", err, codes.Unknown, "device /dev/nvme9n1 wasn't found")

	resp, err := c3.ResetGenericWithResponse(ctxTimeout(t, time.Second), &machine.ResetRequest{Graceful: true, Reboot: true, Mode: machine.ResetRequest_SYSTEM_DISK})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}

	if len(resp.Messages) != 1 || !uuidV4.MatchString(resp.Messages[0].ActorId) {
		t.Errorf("reset reply = %v, want one message with a UUID actor ID", resp.Messages)
	}

	m3 := f.Machine("cp-3")
	until(t, "cp-3 is back in maintenance mode", func() (bool, error) {
		o := m3.Observe()

		return !o.Down && !m3.Configured(), nil
	})

	if cs := f.EtcdClusters(); len(cs) != 1 || !slices.Equal(cs[0].Members, []string{"cp-1", "cp-2"}) {
		t.Errorf("etcd after cp-3's graceful reset: %+v, want cp-1 and cp-2", cs)
	}

	// a reset without reboot halts the machine
	w := f.Machine("w-1")
	if err := admin(t, w.Addr()).ResetGeneric(ctxTimeout(t, time.Second), &machine.ResetRequest{Graceful: true, Mode: machine.ResetRequest_SYSTEM_DISK}); err != nil {
		t.Fatalf("reset w-1: %v", err)
	}

	until(t, "w-1 halts", func() (bool, error) { return w.Halted() && w.Observe().Down, nil })
	time.Sleep(300 * time.Millisecond) // three reboot delays: it stays down

	if !w.Observe().Down {
		t.Fatal("w-1 came back by itself after a reset without reboot")
	}

	w.PowerOn()
	until(t, "w-1 powers on into maintenance mode", func() (bool, error) { return !w.Observe().Down && !w.Configured(), nil })
}

// A graceful reset of a control plane whose etcd cannot let it go (no
// quorum without it): LeaveEtcd fails the sequence, machined logs it, and
// the machine stays as it was, configured and a member.
func TestResetStopsWhenEtcdCannotLetGo(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 50 * time.Millisecond, RebootDelay: 100 * time.Millisecond})
	joined(t, f, 3)

	f.Machine("cp-1").SetFaults(sim.Faults{Unreachable: true})
	f.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})

	m3 := f.Machine("cp-3")
	if err := admin(t, m3.Addr()).ResetGeneric(ctxTimeout(t, time.Second), &machine.ResetRequest{Graceful: true, Reboot: true, Mode: machine.ResetRequest_SYSTEM_DISK}); err != nil {
		t.Fatalf("reset: %v", err)
	}

	time.Sleep(1500 * time.Millisecond) // the no-leader answer takes etcd's election timeout

	if !m3.Configured() || m3.Observe().Reboots != 0 {
		t.Errorf("cp-3 after a reset etcd refused: configured %t, reboots %d; want configured, not rebooted", m3.Configured(), m3.Observe().Reboots)
	}

	if cs := f.EtcdClusters(); len(cs) != 1 || len(cs[0].Members) != 3 {
		t.Errorf("etcd after the failed reset: %+v, want three members", cs)
	}
}
