package talosapi_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
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
		o := talosapi.ObserveEtcd(ctx, roleDialer(t, f, roles), f.Inventory.Machine("cp-1"))
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
	o := talosapi.ObserveEtcd(ctx, roleDialer(t, f, role.MakeSet(role.EtcdBackup)), f.Inventory.Machine("cp-2"))
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
	for name, o := range map[string]*talosapi.Observation{
		"Observe":                      talosapi.Observe(ctx, f.Dialer, m),
		"ObserveEtcd":                  talosapi.ObserveEtcd(ctx, f.Dialer, m),
		"ObserveEtcd (os:etcd:backup)": talosapi.ObserveEtcd(ctx, roleDialer(t, f, role.MakeSet(role.EtcdBackup)), m),
	} {
		if o.Err != nil || o.Etcd != nil || !errors.Is(o.EtcdErr, talosapi.ErrEtcdNoLeader) {
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
