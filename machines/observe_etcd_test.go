package machines_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/machines"
	"devata.dev/devata/sim"
)

// ObserveEtcd reads etcd with what os:etcd:backup may call and nothing
// else: with that role alone neither Version, ServiceList nor a resource
// is asked; with os:reader the etcd service is read besides. A machine
// that is down is Err, not an etcd error.
func TestObserveEtcdWithEachRole(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	ctx := context.Background()
	cp1 := f.Sim.Machine("cp-1")
	others := func() int {
		return cp1.Calls("Version") + cp1.Calls("ServiceList") + cp1.Calls("State.Get") + cp1.Calls("State.List")
	}
	for _, roles := range []role.Set{role.MakeSet(role.EtcdBackup), role.MakeSet(role.Reader), role.MakeSet(role.Operator), role.MakeSet(role.Admin)} {
		before := others()
		o := machines.ObserveEtcd(ctx, roleDialer(t, f, roles), f.Inventory.Machine("cp-1"))
		if o.Err != nil || o.EtcdErr != nil || o.Etcd == nil || o.Etcd.Leader == 0 || o.EtcdLocal == nil || o.EtcdLocal.MemberID == 0 {
			t.Fatalf("as %v: err %v, etcd %v, %+v, local %+v; want the members, a leader and the member's ID", roles.Strings(), o.Err, o.EtcdErr, o.Etcd, o.EtcdLocal)
		}
		if got := slices.Sorted(slices.Values(o.Etcd.Members)); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
			t.Errorf("as %v: members %v", roles.Strings(), got)
		}
		switch n := others() - before; {
		case roles.Includes(role.EtcdBackup) && n != 0:
			t.Errorf("as os:etcd:backup: %d calls besides etcd's (Version, ServiceList, COSI): the role may not make them", n)
		case !roles.Includes(role.EtcdBackup) && (o.EtcdService == nil || o.EtcdService.State != "Running"):
			t.Errorf("as %v: the etcd service %+v, want it read (Running)", roles.Strings(), o.EtcdService)
		}
	}

	f.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	o := machines.ObserveEtcd(ctx, roleDialer(t, f, role.MakeSet(role.EtcdBackup)), f.Inventory.Machine("cp-2"))
	if o.Err == nil || o.EtcdErr != nil || !strings.Contains(o.Err.Error(), "talos api "+f.Overrides["cp-2"]) {
		t.Errorf("cp-2 down: err %v, etcd %v; want it not answering, not an etcd error", o.Err, o.EtcdErr)
	}
}

// Two control planes of three down: the one left runs etcd without a
// leader. Observe and ObserveEtcd both say so (ErrEtcdNoLeader) with the
// member's own status, and no member list; the machine is not down.
func TestObserveEtcdWithoutQuorum(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	ctx := context.Background()
	f.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	f.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	m := f.Inventory.Machine("cp-1")
	for name, o := range map[string]*machines.Observation{
		"Observe":                      machines.Observe(ctx, f.Dialer, m),
		"ObserveEtcd":                  machines.ObserveEtcd(ctx, f.Dialer, m),
		"ObserveEtcd (os:etcd:backup)": machines.ObserveEtcd(ctx, roleDialer(t, f, role.MakeSet(role.EtcdBackup)), m),
	} {
		if o.Err != nil || o.Etcd != nil || !errors.Is(o.EtcdErr, machines.ErrEtcdNoLeader) {
			t.Errorf("%s: err %v, etcd %+v, %v; want no member list and ErrEtcdNoLeader", name, o.Err, o.Etcd, o.EtcdErr)
			continue
		}
		if !strings.Contains(o.EtcdErr.Error(), "etcdserver: no leader") || !strings.Contains(o.EtcdErr.Error(), "no quorum") {
			t.Errorf("%s: %v, want etcd's words and no quorum", name, o.EtcdErr)
		}
		if !o.EtcdLocal.NoLeader() || o.EtcdLocal.MemberID == 0 {
			t.Errorf("%s: the member's status %+v, want its ID and no leader", name, o.EtcdLocal)
		}
	}
}

// The etcd check on the control plane left without quorum says what it
// sees, Drifted: etcd runs there without a leader, with no quorum, and
// what to do; the two that are down are Unknown, as any machine that does
// not answer.
func TestEtcdCheckWithoutQuorum(t *testing.T) {
	tf := startFleet(t)
	tf.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	tf.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	rep := tf.drift(t, machines.CheckEtcd)
	r := statusOf(rep, "cp-1", machines.CheckEtcd)
	if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, "etcd runs on cp-1 but has no leader: etcd has no quorum") ||
		!strings.Contains(r.Next, "bring back the control planes") || !slices.ContainsFunc(r.Evidence, func(e string) bool { return strings.Contains(e, "etcdserver: no leader") }) {
		t.Errorf("cp-1 without quorum: %s %q, evidence %q, next %q", r.Status, r.Reason, r.Evidence, r.Next)
	}
	for _, name := range []string{"cp-2", "cp-3"} {
		if s := statusOf(rep, name, machines.CheckEtcd).Status; s != drift.StatusUnknown {
			t.Errorf("%s down: %s, want Unknown", name, s)
		}
	}
}
