package main

import (
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/machines"
)

// devata upgrade on a 3+2 fleet on v1.10.6, the inventory saying v1.11.0:
// the dry run shows the five upgrades and sends none; without a terminal
// and --yes it refuses; with --yes every machine comes back on v1.11.0,
// talos-version is in sync, and a second run has nothing to do.
func TestUpgradeCommand(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6"})
	calls := func() int {
		n := 0
		for _, m := range sf.Sim.Machines() {
			n += m.Calls("Upgrade")
		}
		return n
	}
	r := devata(t, nil, "upgrade", "--config", sf.settings, "--dry-run")
	if r.code != 1 || strings.Count(r.stdout, "upgrade Talos v1.10.6 → v1.11.0 (REBOOTS): ghcr.io/siderolabs/installer:v1.11.0") != 1 ||
		!strings.Contains(r.stdout, "cp-1, cp-2, cp-3, worker-1, worker-2 (5 machines)") || !strings.Contains(r.stdout, "dry run: nothing was written") {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if n := calls(); n != 0 {
		t.Fatalf("the dry run sent %d Upgrade calls", n)
	}
	if r = devata(t, nil, "upgrade", "--config", sf.settings); r.code != 2 || !strings.Contains(r.err, "rerun with --yes") {
		t.Fatalf("without a terminal or --yes: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if n := calls(); n != 0 {
		t.Fatalf("an unconfirmed upgrade sent %d Upgrade calls", n)
	}
	r = devata(t, nil, "upgrade", "--config", sf.settings, "--yes", "--wait", "1m")
	if r.code != 0 || !strings.Contains(r.stdout, "cp-2: runs Talos v1.11.0") {
		t.Fatalf("upgrade: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "--checks", machines.CheckTalosVersion); r.code != 0 {
		t.Errorf("talos-version after the upgrade: exit %d\n%s", r.code, r.stdout)
	}
	r = devata(t, nil, "upgrade", "--config", sf.settings, "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to upgrade: 5 of 5 machines run Talos v1.11.0") || calls() != 5 {
		t.Errorf("second run: exit %d, %d Upgrade calls in all\n%s%s", r.code, calls(), r.stdout, r.err)
	}
}

// apply --upgrade: configs first; a machine in sync is upgraded in the
// same round, one whose config differed in a second round of the same run
// (issue 33: one run does the job).
func TestApplyUpgrade(t *testing.T) {
	// Kubernetes 1.33, which Talos 1.10 and 1.11 both run: a 1.10.6 machine
	// refuses a config for 1.34 (compatibility talos110)
	sf := startSim(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6", DesiredKubernetesVersion: "v1.33.4"})
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	r := devata(t, nil, "apply", "--config", sf.settings, "--upgrade", "--dry-run")
	if r.code != 1 || !strings.Contains(r.stdout, "its config goes first, its upgrade is planned once the config is applied") || !strings.Contains(r.stdout, "(4 machines)") {
		t.Fatalf("apply --upgrade --dry-run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "apply", "--config", sf.settings, "--dry-run"); strings.Contains(r.stdout, "upgrade Talos") {
		t.Errorf("apply without --upgrade plans upgrades:\n%s", r.stdout)
	}
	r = devata(t, nil, "apply", "--config", sf.settings, "--upgrade", "--yes", "--wait", "1m")
	if r.code != 0 || !strings.Contains(r.stdout, "planning again") || !strings.Contains(r.stdout, "worker-1: runs Talos v1.11.0") {
		t.Fatalf("apply --upgrade: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, m := range sf.Sim.Machines() {
		if v := m.Observe().TalosVersion; v != "v1.11.0" || m.Calls("Upgrade") != 1 {
			t.Errorf("%s runs %s after %d upgrades; want v1.11.0 after one, in one run", m.Name(), v, m.Calls("Upgrade"))
		}
	}
	if !inSync(sf, "worker-1") {
		t.Error("worker-1's config is not the desired one after apply --upgrade")
	}
}

// reconcile --once --upgrade upgrades the fleet and exits 0; without
// --upgrade it reports the drift (exit 1) and sends no Upgrade.
func TestReconcileOnceUpgrade(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6"})
	if r := devata(t, nil, "reconcile", "--once", "--config", sf.settings, loopChecks); r.code != 1 {
		t.Fatalf("without --upgrade: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "reconcile", "--once", "--upgrade", "--config", sf.settings, loopChecks); r.code != 0 {
		t.Fatalf("--upgrade: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, m := range sf.Sim.Machines() {
		if n, v := m.Calls("Upgrade"), m.Observe().TalosVersion; n != 1 || v != "v1.11.0" {
			t.Errorf("%s: %d Upgrade calls, runs %s", m.Name(), n, v)
		}
	}
}
