package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/render"
)

// pointAt rewrites sf's settings so that machine name is dialled at the
// address of machine at, as an inventory with a wrong address would.
func pointAt(t *testing.T, sf *simFleet, name, at string) {
	t.Helper()
	raw, err := os.ReadFile(sf.settings)
	if err != nil {
		t.Fatal(err)
	}
	from, to := name+": "+sf.Overrides[name], name+": "+sf.Overrides[at]
	edited := strings.Replace(string(raw), from, to, 1)
	if edited == string(raw) {
		t.Fatalf("the settings have no %q", from)
	}
	if err := os.WriteFile(sf.settings, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
}

// applies counts the ApplyConfiguration calls (dry runs included) the
// fleet's machines received.
func applies(sf *simFleet) map[string]int {
	out := map[string]int{}
	for _, m := range sf.Sim.Machines() {
		out[m.Name()] = m.Calls("ApplyConfiguration")
	}
	return out
}

// worker-1's address in the inventory points at cp-1: apply, reconcile
// and upgrade refuse worker-1, naming what answered, and send cp-1 nothing
// of worker-1's (not even a dry run); drift reports the machine at that
// address as another machine, not as a config diff to apply.
func TestWrongAddressIsRefusedBeforeAnyWrite(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6"})
	pointAt(t, sf, "worker-1", "cp-1")

	r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "config")
	lacks(t, "drift", r.stdout, "another machine answers at", "machine.type controlplane, not worker", "hostname cp-1, not worker-1 (it is the inventory's cp-1)", "check worker-1's address in the inventory")
	if r.code != 1 || strings.Contains(r.stdout, "devata apply --machines worker-1") {
		t.Errorf("drift: exit %d, want 1 and no apply advised\n%s", r.code, r.stdout)
	}

	r = devata(t, nil, "apply", "--config", sf.settings, "--yes", "--wait", "20s")
	lacks(t, "apply", r.stdout+r.err, "refused: the machine at", "is not worker-1 (machine.type controlplane, not worker; hostname cp-1, not worker-1 (it is the inventory's cp-1))")
	if r.code == 0 {
		t.Errorf("apply: exit 0 with worker-1 refused\n%s%s", r.stdout, r.err)
	}
	r = devata(t, nil, "reconcile", "--once", "--config", sf.settings, "--wait", "20s")
	lacks(t, "reconcile", r.stdout+r.err, "is not worker-1")
	if r.code == 0 {
		t.Errorf("reconcile --once: exit 0 with worker-1 refused\n%s%s", r.stdout, r.err)
	}
	if got := applies(sf); got["cp-1"] != 0 || got["worker-1"] != 0 {
		t.Errorf("ApplyConfiguration calls %v: cp-1 was sent worker-1's config (or a dry run of it)", got)
	}

	r = devata(t, nil, "upgrade", "--config", sf.settings, "--yes", "--wait", "1m")
	lacks(t, "upgrade", r.stdout+r.err, "is not worker-1")
	if r.code == 0 {
		t.Errorf("upgrade: exit 0 with worker-1 refused\n%s%s", r.stdout, r.err)
	}
	for _, m := range sf.Sim.Machines() {
		want := 1
		if m.Name() == "worker-1" {
			want = 0 // refused: its address is cp-1's
		}
		if n := m.Calls("Upgrade"); n != want {
			t.Errorf("%s: %d Upgrade calls, want %d", m.Name(), n, want)
		}
	}
}

// A secrets bundle that is not the cluster's (replaced by a new one):
// apply refuses the whole plan, sends no machine anything, not even a dry
// run, and says how to recover the bundle; a talosconfig of another
// cluster reads as that, not as an outage.
func TestAnotherBundleIsRefusedBeforeAnyWrite(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	path := filepath.Join(sf.Dir, "secrets.yaml")
	b, err := render.NewSecrets(sf.Inventory.Cluster.TalosVersion)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := render.WriteSecrets(path, b, false); err != nil {
		t.Fatal(err)
	}

	r := devata(t, nil, "apply", "--config", sf.settings, "--yes")
	lacks(t, "apply", r.stdout+r.err, "the machines run another secrets bundle's configs: nothing was written to any machine: cp-1, cp-2, cp-3, worker-1, worker-2",
		"machine.ca (OS CA) sha256", "devata gen secrets --from-controlplane-config", "talosctl rotate-ca")
	if r.code != 2 {
		t.Errorf("apply with another bundle: exit %d, want 2\n%s%s", r.code, r.stdout, r.err)
	}
	if got := applies(sf); len(got) != 5 || got["cp-1"]+got["cp-2"]+got["cp-3"]+got["worker-1"]+got["worker-2"] != 0 {
		t.Errorf("ApplyConfiguration calls %v, want none", got)
	}

	// the talosconfig of another cluster: every machine answers, with a
	// certificate it does not trust
	tcPath := filepath.Join(t.TempDir(), "talosconfig")
	r0, err := render.NewRenderer(sf.Inventory, b)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := r0.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tcPath, tc, 0o600); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, "--talosconfig", tcPath, "--checks", "config")
	lacks(t, "drift with another cluster's talosconfig", r.stdout, "cp-1 answered with a certificate the talosconfig's CA did not sign: the talosconfig is not this cluster's", "use this cluster's talosconfig")
	if r.code != 2 || strings.Contains(r.stdout, "check that cp-1 is up") {
		t.Errorf("drift with another cluster's talosconfig: exit %d\n%s", r.code, r.stdout)
	}
}
