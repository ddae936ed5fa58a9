package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

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
	// a static pod restart that outlasts etcd's bootstrap: the 1.14 config
	// applied to the control planes once they run v1.14.1 turns on API
	// server settings the 1.13 config lacks, which restarts their static
	// pods (not the kubelet: its settings derive the same KubeletSpec in
	// either shape, sim restart.go), and bootstrap waits for their boot to
	// end before its drift report
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.13.9", DesiredKubernetesVersion: "v1.36.3", Maintenance: allMachines, RestartDelay: 4 * time.Second})

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
	if !regexp.MustCompile(`etcd healthy, members \[cp-1 cp-2 cp-3\]; [a-z0-9-, ]+ running \(`).MatchString(r.stdout) {
		t.Errorf("bootstrap does not say it waited for the machines it configured to run:\n%s", r.stdout)
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
	wipeControlPlanes(t, sf)
	for _, name := range fleetControlPlanes {
		if v := sf.Sim.Machine(name).Observe().TalosVersion; v != "v1.13.9" {
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

// A machine added to a v1.14.1 fleet boots a v1.13.9 medium in maintenance
// mode (issue 30): devata apply joins it with the config of the release it
// boots, which v1.13.9 parses (a 1.14 document it refuses), then, once it
// runs the v1.14.1 it installed from that config, applies the inventory's;
// drift is then clean and a second run has nothing to do.
func TestApplyJoinsAMachineBootedFromAnOlderMedium(t *testing.T) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.14.1", DesiredKubernetesVersion: "v1.36.3",
		TalosVersions: map[string]string{"worker-2": "v1.13.9"}, Maintenance: []string{"worker-2"}})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	r := devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{
		"worker-2: its config is written for Talos 1.13, the release it boots (it boots v1.13.9), until it runs v1.14.1",
		"worker-2: runs Talos v1.14.1 now, installed from its config: applying the inventory's config (mode auto)",
		"worker-2: joined: runs its desired config on Talos v1.14.1",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("apply does not say %q:\n%s", want, r.stdout)
		}
	}
	if got := sf.Sim.Machine("worker-2").Observe().TalosVersion; got != "v1.14.1" {
		t.Errorf("worker-2 runs %s after its join, want v1.14.1", got)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks); r.code != 0 {
		t.Errorf("drift after the join: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig); r.code != 0 || !strings.Contains(r.stdout, "nothing to apply") {
		t.Errorf("second run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}
