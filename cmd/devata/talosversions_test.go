package main

import (
	"context"
	"strings"
	"testing"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// A fleet half-way through a Talos 1.13 → 1.14 upgrade, described by the
// 1.14 inventory (examples/homelab-v1.14, on Kubernetes 1.36): cp-1 and
// cp-2 run v1.14.1, the others v1.13.9. Each machine's config is compared with its config for the
// Talos it runs, so drift finds every config in sync and only the
// versions drifted; a config edited on a 1.13 worker is put back by apply
// with its 1.13 config, which that Talos takes (the simulated 1.13 refuses
// 1.14 documents, as Talos 1.13's configloader does).
func TestAFleetHalfWayThroughAnUpgrade(t *testing.T) {
	// Kubernetes 1.36, which both run (Talos 1.13 runs up to 1.36)
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.13.9",
		TalosVersions: map[string]string{"cp-1": "v1.14.1", "cp-2": "v1.14.1"}, DesiredKubernetesVersion: "v1.36.3"})
	r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "config")
	if r.code != 0 {
		t.Fatalf("config drift on a fleet half-way through an upgrade: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, "--checks", "talos-version")
	if r.code != 1 || !strings.Contains(r.stdout, "v1.13.9") {
		t.Errorf("talos-version: exit %d, want 1 naming v1.13.9\n%s", r.code, r.stdout)
	}

	started := string(sf.Started["worker-1"])
	if !strings.Contains(started, "time.cloudflare.com") || strings.Contains(started, "kind: KubeletConfig") {
		t.Fatalf("worker-1 on v1.13.9 did not start with its 1.13 config:\n%s", started)
	}
	w := sf.Sim.Machine("worker-1")
	w.SetFaults(sim.Faults{DriftedConfig: []byte(strings.Replace(started, "time.cloudflare.com", "pool.ntp.org", 1))})
	if r = devata(t, nil, "drift", "--config", sf.settings, "--checks", "config"); r.code != 1 || !strings.Contains(r.stdout, "worker-1") {
		t.Fatalf("an edited config on worker-1: exit %d\n%s", r.code, r.stdout)
	}
	r = devata(t, nil, "apply", "--config", sf.settings, "--dry-run")
	if r.code != 1 || !strings.Contains(r.stdout, "its config is written for Talos 1.13, the release it runs, until it runs v1.14.1") {
		t.Errorf("apply --dry-run does not say which release worker-1's config is for: exit %d\n%s", r.code, r.stdout)
	}
	applies := w.Calls("ApplyConfiguration")
	if r = devata(t, nil, "apply", "--config", sf.settings, "--yes"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if w.Calls("ApplyConfiguration") == applies {
		t.Error("apply sent worker-1 nothing")
	}
	if r = devata(t, nil, "drift", "--config", sf.settings, "--checks", "config"); r.code != 0 {
		t.Errorf("after apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// The upgrade of issue 30's acceptance: a 3+2 fleet on Talos v1.12.4 (the
// 1.14 homelab, on Kubernetes 1.35, which 1.12 to 1.14 all run) upgraded to
// v1.14.1 by devata upgrade, one minor per hop (v1.13.9 first), from the
// inventory's default installer, Image Factory's, whose repository the
// hop keeps; never two control planes down at once (polled); through
// MachineService.Upgrade on the 1.12 machines and LifecycleService (pull,
// install, reboot) on the 1.13 ones, as the sim records; interrupted
// (SIGTERM) after the first control plane's first hop, and resumed by a
// second run.
func TestUpgradeFrom112To114HopByHop(t *testing.T) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.12.4", DesiredKubernetesVersion: "v1.35.2"})
	const factory = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	watch := watchControlPlanes(sf.Sim)

	r := devata(t, nil, "upgrade", "--config", sf.settings, "--dry-run")
	lacks(t, "upgrade --dry-run", r.stdout,
		"cp-1, cp-2, cp-3, worker-1, worker-2 (5 machines) upgrade Talos v1.12.4 → v1.13.9 (REBOOTS): "+factory+":v1.13.9",
		"one minor release at a time: this hop to v1.13.9, then on to v1.14.1")
	if r.code != 1 {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &simtest.Output{On: "cp-1: runs Talos v1.13.9", Then: cancel}
	r = devataCtx(t, ctx, out, "upgrade", "--config", sf.settings, "--yes", "--wait", "1m")
	if !out.Fired() || r.code == 0 {
		t.Fatalf("the interrupted run: fired %t, exit %d\n%s%s", out.Fired(), r.code, r.stdout, r.err)
	}
	if v := sf.Sim.Machine("worker-2").Observe().TalosVersion; v != "v1.12.4" {
		t.Fatalf("worker-2 runs %s after the interrupted run; want it not yet upgraded", v)
	}

	r = devata(t, nil, "upgrade", "--config", sf.settings, "--yes", "--wait", "1m")
	if r.code != 0 {
		t.Fatalf("the resumed run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	show(t, r)
	lacks(t, "the resumed run", r.stdout, "through LifecycleService.Upgrade", "plan, round 2")
	watch.finish()
	if o := watch.overlaps(); len(o) > 0 {
		t.Errorf("two control planes were down at once: %s", strings.Join(o, "; "))
	}
	for _, m := range sf.Sim.Machines() {
		o := m.Observe()
		legacy, lifecycle, pulls := m.Calls("MachineService.Upgrade"), m.Calls("LifecycleService.Upgrade"), m.Calls("ImageService.Pull")
		if o.TalosVersion != "v1.14.1" || o.InstallImage != factory+":v1.14.1" {
			t.Errorf("%s runs %s from %s; want v1.14.1 from %s:v1.14.1", m.Name(), o.TalosVersion, o.InstallImage, factory)
		}
		if legacy != 1 || lifecycle != 1 || pulls < 1 {
			t.Errorf("%s: %d MachineService.Upgrade, %d LifecycleService.Upgrade, %d ImageService.Pull; want 1 (the 1.12 → 1.13 hop), 1 (1.13 → 1.14) and its pull", m.Name(), legacy, lifecycle, pulls)
		}
	}
	if r := devata(t, nil, "upgrade", "--config", sf.settings, "--yes"); r.code != 0 || !strings.Contains(r.stdout, "nothing to upgrade: 5 of 5 machines run Talos v1.14.1") {
		t.Errorf("a third run: exit %d\n%s", r.code, r.stdout)
	}
}
