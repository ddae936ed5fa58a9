package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
)

// Machines in maintenance mode booted from a Talos v1.13.9 medium, an
// inventory for v1.14.1 (issue 30 item 2): each is configured for the
// release it boots, which it reports insecurely (the Version resource, or
// Version from 1.13), so that it is never sent a 1.14 document
// (KubeProxyConfig, UnattendedInstallConfig, …) its Talos refuses. The
// plan says so; the bootstrap builds the cluster; each machine then
// installs the inventory's release from its config's installer and runs the
// config of that release's contract.
func TestBootstrapMaintenanceOnOlderTalos(t *testing.T) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.13.9", DesiredKubernetesVersion: "v1.36.3", Maintenance: allMachines})

	r := devata(t, nil, "plan", "--config", sf.settings, "--skip-nodes")
	show(t, r)
	if !strings.Contains(r.stdout, "\ncontract: configs rendered for the Talos 1.13 config contract: the oldest release a machine runs (cp-1 runs v1.13.9 in maintenance mode,") {
		t.Errorf("the plan does not render for the release the machines boot:\n%s%s", r.stdout, r.err)
	}

	r = devata(t, nil, bootstrapArgs(sf, nil)...)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("bootstrap of v1.13.9 machines in maintenance mode for a v1.14.1 inventory: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, m := range allMachines {
		sm := sf.Sim.Machine(m)
		if got := sm.Observe().TalosVersion; got != "v1.14.1" {
			t.Errorf("%s runs %s after its install, want the inventory's v1.14.1", m, got)
		}
		// a connection lost mid-apply under load says so instead; the
		// machine then still runs the config sent, seen next
		if !strings.Contains(r.stdout, m+": config applied over the maintenance connection (mode auto), for the Talos 1.13 config contract (it boots v1.13.9)") &&
			!strings.Contains(r.stdout, m+": connection lost during the apply") {
			t.Errorf("bootstrap does not say %s was configured for the release it boots:\n%s", m, r.stdout)
		}
		if !strings.Contains(r.stdout, m+": runs Talos v1.14.1 now, installed from its config: applying the config of the Talos 1.14 config contract (mode auto)") {
			t.Errorf("bootstrap does not say %s was configured for the release it installed:\n%s", m, r.stdout)
		}
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks); r.code != 0 {
		t.Errorf("drift after the bootstrap: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// The rebuild of issue 30's report: a fleet on Talos v1.13.9 whose
// inventory already targets v1.14.1 loses its control planes' disks; they
// boot the v1.13.9 medium in maintenance mode, and bootstrap --recover-from
// configures them for the release they boot (never a 1.14 document, which
// v1.13.9 refuses), rebuilds etcd from the snapshot, and the drift report
// is clean.
func TestBootstrapRecoverMaintenanceOnOlderTalos(t *testing.T) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.13.9", DesiredKubernetesVersion: "v1.36.3"})
	snap := filepath.Join(t.TempDir(), "etcd.snapshot")
	if r := devata(t, nil, "backup", "etcd", "--to", snap, "--config", sf.settings); r.code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	ctx := context.Background()
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		c, err := sf.Dialer.Client(ctx, sf.Inventory.Machine(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ResetGeneric(ctx, &machine.ResetRequest{Reboot: true, Mode: machine.ResetRequest_SYSTEM_DISK}); err != nil {
			t.Fatalf("reset %s: %v", name, err)
		}
		c.Close()
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		m := sf.Sim.Machine(name)
		for deadline := time.Now().Add(20 * time.Second); m.Configured() || m.Observe().Down; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not back in maintenance mode", name)
			}
		}
		if v := m.Observe().TalosVersion; v != "v1.13.9" {
			t.Fatalf("%s boots %s in maintenance mode, want v1.13.9", name, v)
		}
	}

	// the workers still run v1.13.9, which the closing drift report says
	// (talos-version): the cluster is up, the report not clean
	r := devata(t, nil, bootstrapArgs(sf, nil, "--recover-from", snap)...)
	show(t, r)
	if r.code == exitTrouble || !strings.Contains(r.stdout, "recovered etcd on cp-1 from "+snap) {
		t.Fatalf("bootstrap --recover-from: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		if !strings.Contains(r.stdout, name+": config applied over the maintenance connection (mode auto), for the Talos 1.13 config contract (it boots v1.13.9)") {
			t.Errorf("%s was not configured for the release it boots:\n%s", name, r.stdout)
		}
	}
	if cs := sf.Sim.EtcdClusters(); len(cs) != 1 || len(cs[0].Members) != 3 {
		t.Errorf("etcd after the recovery: %+v, want one cluster of three", cs)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "--machines", "cp-1,cp-2,cp-3"); r.code != 0 {
		t.Errorf("drift of the rebuilt control planes: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		if v := sf.Sim.Machine(name).Observe().TalosVersion; v != "v1.14.1" {
			t.Errorf("%s runs %s after the rebuild, want v1.14.1, its config's installer", name, v)
		}
	}
}
