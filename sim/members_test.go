package sim_test

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
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

// Talos 1.14 renders discovery as documents, DiscoveryServiceConfig and
// DiscoveryIdentityConfig, with no v1alpha1 cluster.discovery; its
// ConfigController (controllers/cluster/config.go in v1.14.1) turns
// discovery on for any discovery service machinery's
// DiscoveryServiceConfigs yields, so such machines are Members too, and a
// config generated without discovery has none.
func TestMembersFromDiscoveryDocuments(t *testing.T) {
	t.Parallel()

	worker := func(discovery bool) []byte {
		t.Helper()
		in, err := generate.NewInput("sim", "https://10.20.0.10:6443", "1.37.0",
			generate.WithSecretsBundle(bundle), generate.WithVersionContract(config.TalosVersion1_14),
			generate.WithInstallDisk("/dev/sda"), generate.WithClusterDiscovery(discovery))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := in.Config(machinetype.TypeWorker)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(cfg.DiscoveryServiceConfigs()) > 0; got != discovery || cfg.Cluster().Discovery().Enabled() {
			t.Fatalf("generated 1.14 config: discovery service %v, v1alpha1 discovery %v", got, cfg.Cluster().Discovery().Enabled())
		}
		b, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	on, off := worker(true), worker(false)
	f := start(t,
		sim.MachineSpec{Name: "w-1", Config: on, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "w-2", Config: on, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "w-3", Config: off, TalosVersion: "v1.14.1"},
	)
	for node, want := range map[string][]string{"w-1": {"w-1", "w-2"}, "w-3": nil} {
		list, err := safe.StateListAll[*cluster.Member](t.Context(), admin(t, f.Machine(node).Addr()).COSI)
		if err != nil {
			t.Fatalf("list members on %s: %v", node, err)
		}
		var got []string
		for m := range list.All() {
			got = append(got, m.Metadata().ID())
			if os := m.TypedSpec().OperatingSystem; os != "Talos (v1.14.1)" {
				t.Errorf("member %s on %s: OS %q", m.Metadata().ID(), node, os)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("members on %s: %q, want %q", node, got, want)
		}
	}
}
