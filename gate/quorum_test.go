package gate_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// Two control planes of three down: the one left runs etcd without a
// leader (Talos' EtcdMemberList fails "etcdserver: no leader"). The view
// says etcd has no quorum, names the member that runs and those down, and
// counts nothing healthy; MayTakeDown and the gate refuse saying so, and
// the etcd calls alone (os:etcd:backup) see the same. With one back, etcd
// has quorum again.
func TestEtcdViewWithoutQuorum(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	ctx := context.Background()
	f.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	f.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})

	crt, err := f.Bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.EtcdBackup))
	if err != nil {
		t.Fatal(err)
	}
	backupDialer, err := talosapi.NewDialer(clientconfig.NewConfig("backup", nil, f.Bundle.Certs.OS.Crt, crt), f.Overrides)
	if err != nil {
		t.Fatal(err)
	}

	for name, v := range map[string]gate.EtcdView{
		"ObserveEtcd":                      gate.ObserveEtcd(ctx, f.Inventory, f.Dialer, 2*time.Second),
		"ObserveEtcdOnly (os:etcd:backup)": gate.ObserveEtcdOnly(ctx, f.Inventory, backupDialer, 2*time.Second),
	} {
		if !v.NoQuorum() || !slices.Equal(v.NoLeader, []string{"cp-1"}) || !slices.Equal(v.Down, []string{"cp-2", "cp-3"}) || len(v.Healthy) != 0 || v.Members != nil {
			t.Errorf("%s: %+v; want no quorum, cp-1 without a leader, cp-2 and cp-3 down, nothing healthy", name, v)
		}
		err := v.Err()
		for _, w := range []string{"etcd has no quorum: no member has a leader (cp-1 runs without one; cp-2, cp-3 are down)", "cp-1: etcd runs but has no leader (etcdserver: no leader)"} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", name, err, w)
			}
		}
		var qe *gate.QuorumError
		if err := gate.MayTakeDown(v, "cp-1"); !errors.As(err, &qe) || qe.Loss || !strings.Contains(qe.Why, "etcd has no quorum") || !strings.Contains(qe.Next, "bring back the control planes that are down") {
			t.Errorf("%s: MayTakeDown(cp-1) = %v; want a refusal for no quorum, to wait on", name, err)
		}
	}

	var out said
	err = etcdGate(f, &out, 300*time.Millisecond).Pass(ctx, "before cp-1", f.Inventory.Machine("cp-1"))
	if !errors.Is(err, gate.ErrFailed) || !strings.Contains(err.Error(), "etcd has no quorum") {
		t.Errorf("gate without quorum: %v\n%s", err, &out)
	}

	f.Sim.Machine("cp-3").SetFaults(sim.Faults{})
	v := gate.ObserveEtcd(ctx, f.Inventory, f.Dialer, 2*time.Second)
	if v.NoQuorum() || len(v.NoLeader) != 0 || !slices.Equal(v.Healthy, []string{"cp-1", "cp-3"}) || !slices.Equal(v.Down, []string{"cp-2"}) {
		t.Errorf("with cp-3 back: %+v; want cp-1 and cp-3 healthy, cp-2 down", v)
	}
}
