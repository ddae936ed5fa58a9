package main

import (
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
