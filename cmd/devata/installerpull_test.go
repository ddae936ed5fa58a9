package main

import (
	"strings"
	"testing"
	"time"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// slowInstallerPull is how long worker-1's installer pull takes below:
// longer than --timeout 1s, shorter than --pull-timeout 5s, longer than
// --pull-timeout 1s.
const slowInstallerPull = 2 * time.Second

// notStartedWithin is how soon a pull that ran out of --pull-timeout 1s
// must be reported, against a --wait of two minutes: "at once" with room
// for a loaded machine.
const notStartedWithin = time.Minute

// upgradeNotStarted runs devata upgrade of worker-1 with --pull-timeout
// 1s against a pull of slowInstallerPull: it must fail at once, saying the
// upgrade did not start and what to do, never waiting out --wait.
func upgradeNotStarted(t *testing.T, sf *simFleet, wants ...string) result {
	t.Helper()
	began := time.Now()
	r := devata(t, nil, "upgrade", "--config", sf.settings, "--machines", "worker-1", "--yes",
		"--timeout", "1s", "--pull-timeout", "1s", "--wait", "2m")
	took := time.Since(began)
	show(t, r)
	if r.code != 1 || took > notStartedWithin {
		t.Fatalf("upgrade with --pull-timeout 1s against a %s pull: exit %d after %s; want 1 at once (not after --wait 2m)\n%s%s", slowInstallerPull, r.code, took, r.stdout, r.err)
	}
	lacks(t, "the upgrade whose pull ran out", r.stdout+r.err, append([]string{
		"worker-1: upgrade not started:",
		"not started: Talos did not ", "within --pull-timeout 1s",
		"and nothing was installed", "machine.registries.mirrors", "or give a longer --pull-timeout",
	}, wants...)...)
	if strings.Contains(r.stdout, "waiting to see whether it upgrades") || strings.Contains(r.stdout, "waiting for it to return") {
		t.Errorf("the upgrade whose pull ran out waited for the machine:\n%s", r.stdout)
	}
	return r
}

// Talos pulls the installer inside MachineService.Upgrade (a Talos 1.12
// machine): the call gets --pull-timeout, not --timeout. A pull longer
// than --pull-timeout is reported not started at once, and the machine
// stays as it was; one longer than --timeout but within --pull-timeout
// succeeds, here on both hops of 1.12.4 → 1.13.9 → 1.14.1, the second
// through ImageService.Pull and LifecycleService.Upgrade.
func TestUpgradeSlowInstallerPullLegacy(t *testing.T) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.12.4", DesiredKubernetesVersion: "v1.35.2"})
	w := sf.Sim.Machine("worker-1")
	w.SetFaults(sim.Faults{InstallerPullDelay: slowInstallerPull})

	r := upgradeNotStarted(t, sf, "Talos did not answer the upgrade call within --pull-timeout 1s: it pulls factory.talos.dev/metal-installer/", "inside MachineService.Upgrade, then checks etcd on a control plane", "still runs v1.12.4")
	if strings.Contains(r.stdout+r.err, "image pull --namespace system") {
		t.Errorf("the advice for a Talos 1.12 machine offers a pull beforehand, which MachineService.Upgrade never finds:\n%s%s", r.stdout, r.err)
	}
	if o := w.Observe(); o.TalosVersion != "v1.12.4" || o.Upgrading || o.NextVersion != "" || w.Calls("MachineService.Upgrade") != 1 {
		t.Fatalf("worker-1 after the pull ran out: %+v, %d MachineService.Upgrade calls; want one call and nothing started", o, w.Calls("MachineService.Upgrade"))
	}

	r = devata(t, nil, "upgrade", "--config", sf.settings, "--machines", "worker-1", "--yes",
		"--timeout", "1s", "--pull-timeout", "5s", "--wait", "1m")
	show(t, r)
	if r.code != 0 {
		t.Fatalf("upgrade with --pull-timeout 5s against a %s pull: exit %d\n%s%s", slowInstallerPull, r.code, r.stdout, r.err)
	}
	lacks(t, "the upgrade within --pull-timeout", r.stdout, "worker-1: upgrade accepted", "worker-1: runs Talos v1.13.9", "worker-1: installer done", "worker-1: runs Talos v1.14.1")
	if o := w.Observe(); o.TalosVersion != "v1.14.1" || w.Calls("MachineService.Upgrade") != 2 || w.Calls("LifecycleService.Upgrade") != 1 {
		t.Errorf("worker-1: runs %s after %d MachineService.Upgrade and %d LifecycleService.Upgrade calls; want v1.14.1 after 2 (one ran out) and 1",
			o.TalosVersion, w.Calls("MachineService.Upgrade"), w.Calls("LifecycleService.Upgrade"))
	}
}

// On Talos 1.13 and later devata pulls the installer first
// (ImageService.Pull), under --pull-timeout, with its progress in the
// heartbeat: a pull longer than --pull-timeout is reported not started at
// once, with the pull beforehand among what to do, and no installer runs;
// reconcile --upgrade says the same of every machine and upgrades none; a
// pull longer than --timeout but within --pull-timeout succeeds.
func TestUpgradeSlowInstallerPullLifecycle(t *testing.T) {
	old := heartbeat.Every
	heartbeat.Every = 300 * time.Millisecond
	t.Cleanup(func() { heartbeat.Every = old })

	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.13.9", DesiredKubernetesVersion: "v1.36.3"})
	w := sf.Sim.Machine("worker-1")
	w.SetFaults(sim.Faults{InstallerPullDelay: slowInstallerPull})

	upgradeNotStarted(t, sf, "Talos did not finish pulling factory.talos.dev/metal-installer/", "ImageService.Pull stops at the call's deadline", "still runs v1.13.9", "image pull --namespace system factory.talos.dev/metal-installer/",
		"waiting for worker-1 to pull factory.talos.dev/metal-installer/", "MiB of 96 MiB downloaded, 0 of 2 layers extracted")
	if o := w.Observe(); o.TalosVersion != "v1.13.9" || o.NextVersion != "" || w.Calls("ImageService.Pull") != 1 || w.Calls("LifecycleService.Upgrade") != 0 {
		t.Fatalf("worker-1 after the pull ran out: %+v, %d pulls, %d LifecycleService.Upgrade calls; want one pull and no installer", o, w.Calls("ImageService.Pull"), w.Calls("LifecycleService.Upgrade"))
	}

	// every machine's pull runs out: nothing is upgraded, each is said
	for _, m := range sf.Sim.Machines() {
		m.SetFaults(sim.Faults{InstallerPullDelay: slowInstallerPull})
	}
	r := devata(t, nil, "reconcile", "--once", "--upgrade", "--config", sf.settings, loopChecks, "--timeout", "1s", "--pull-timeout", "1s", "--wait", "2m")
	show(t, r)
	if r.code == 0 || !strings.Contains(r.err, "cp-1: upgrade to v1.14.1 not started: Talos did not finish pulling") {
		t.Errorf("reconcile --once --upgrade --pull-timeout 1s: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, m := range sf.Sim.Machines() {
		if o := m.Observe(); o.TalosVersion != "v1.13.9" || o.NextVersion != "" || m.Calls("LifecycleService.Upgrade") != 0 {
			t.Errorf("%s after reconcile's pulls ran out: %+v, %d LifecycleService.Upgrade calls; want nothing installed", m.Name(), o, m.Calls("LifecycleService.Upgrade"))
		}
	}

	r = devata(t, nil, "upgrade", "--config", sf.settings, "--machines", "worker-1", "--yes",
		"--timeout", "1s", "--pull-timeout", "5s", "--wait", "1m")
	show(t, r)
	if r.code != 0 {
		t.Fatalf("upgrade with --pull-timeout 5s against a %s pull: exit %d\n%s%s", slowInstallerPull, r.code, r.stdout, r.err)
	}
	lacks(t, "the upgrade within --pull-timeout", r.stdout, "worker-1: installer done", "worker-1: runs Talos v1.14.1")
	if o := w.Observe(); o.TalosVersion != "v1.14.1" || w.Calls("LifecycleService.Upgrade") != 1 {
		t.Errorf("worker-1: runs %s after %d LifecycleService.Upgrade calls; want v1.14.1 after one", o.TalosVersion, w.Calls("LifecycleService.Upgrade"))
	}
}

// --pull-timeout is an upgrade's: given without --upgrade, or not
// positive, it is a usage error.
func TestPullTimeoutUsage(t *testing.T) {
	for _, args := range [][]string{
		{"apply", "--pull-timeout", "1m"},
		{"reconcile", "--once", "--pull-timeout", "1m"},
		{"upgrade", "--pull-timeout", "0s"},
		{"apply", "--upgrade", "--pull-timeout", "-1s"},
	} {
		r := devata(t, nil, append(args, "-i", homelab(t))...)
		if r.code != 64 || !strings.Contains(r.err, "--pull-timeout") {
			t.Errorf("devata %s: exit %d, want 64 naming --pull-timeout\n%s", strings.Join(args, " "), r.code, r.err)
		}
	}
}
