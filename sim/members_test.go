package sim_test

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"

	"devata.dev/devata/sim"
)

// Cluster discovery (member.go MemberController): every configured machine
// of the cluster with discovery on is a Member on each of them; a machine
// in maintenance mode is not, until it is configured; a config with
// discovery off has no Members at all.
func TestMembersFollowDiscovery(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)
	noDiscovery := patch(t, wk, `cluster: {discovery: {enabled: false}}`)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "w-1", Config: wk},
		sim.MachineSpec{Name: "w-2"},
		sim.MachineSpec{Name: "w-3", Config: noDiscovery},
	)
	members := func(node string) map[string]*cluster.Member {
		t.Helper()
		list, err := safe.StateListAll[*cluster.Member](t.Context(), admin(t, f.Machine(node).Addr()).COSI)
		if err != nil {
			t.Fatalf("list members on %s: %v", node, err)
		}
		out := map[string]*cluster.Member{}
		for m := range list.All() {
			out[m.Metadata().ID()] = m
		}
		return out
	}

	got := members("cp-1")
	if len(got) != 2 || got["cp-1"] == nil || got["w-1"] == nil {
		t.Fatalf("members on cp-1: %v, want cp-1 and w-1", slices.Sorted(maps.Keys(got)))
	}
	c := got["cp-1"].TypedSpec()
	if c.MachineType != machinetype.TypeControlPlane || c.ControlPlane == nil || c.ControlPlane.APIServerPort != 6443 || len(c.Addresses) != 1 || c.Addresses[0].String() != "127.0.0.1" || c.OperatingSystem != "Talos (v1.11.0)" {
		t.Errorf("cp-1 member: %+v", c)
	}
	if w := got["w-1"].TypedSpec(); w.MachineType != machinetype.TypeWorker || w.ControlPlane != nil {
		t.Errorf("w-1 member: %+v", w)
	}
	if n := len(members("w-3")); n != 0 {
		t.Errorf("w-3 has discovery off but %d members", n)
	}

	if _, err := insecure(t, f.Machine("w-2").Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: wk, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "w-2 a member once configured", func() error {
		if members("cp-1")["w-2"] == nil {
			return errors.New("not a member yet")
		}
		return nil
	})
}
