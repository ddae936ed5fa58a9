package main

import (
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/lock"
	"devata.dev/devata/sim"
)

// Probe 1 of issue 15: two writers rebooted two control planes at once.
// Every writing command takes the cluster's lock before it plans: while
// another writer holds it, apply, reconcile --once and bootstrap are
// refused at once (exit 2, naming the holder) and send nothing; with
// --wait-lock they run once it is released. Read-only runs (dry runs,
// drift) take no lock.
func TestWritersExcludeEachOther(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("worker-1").SetFaults(sim.Faults{DriftedConfig: []byte(strings.Replace(string(sf.Desired["worker-1"]), "time.cloudflare.com", "pool.ntp.org", 1))})
	path := lock.Path(sf.Inventory.Path, sf.Inventory.Cluster.Name)
	held, err := lock.Acquire(t.Context(), path, lock.Holder{Host: "ops-laptop", PID: 4242, Command: "devata apply --machines cp-2", Since: time.Now()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	applies := func() int { return sf.Sim.Machine("worker-1").Calls("ApplyConfiguration") }
	before := applies()

	for _, args := range [][]string{
		{"apply", "--yes"},
		{"reconcile", "--once"},
		{"bootstrap", "--skip-nodes", "--yes"},
	} {
		r := devata(t, nil, append(args, "--config", sf.settings)...)
		if r.code != 2 || !strings.Contains(r.err, "another writer holds the cluster's lock") || !strings.Contains(r.err, `"devata apply --machines cp-2" (pid 4242 on ops-laptop`) {
			t.Errorf("%v while the lock is held: exit %d\n%s", args, r.code, r.err)
		}
	}
	if n := applies() - before; n != 0 {
		t.Fatalf("%d ApplyConfiguration calls reached worker-1 while another writer held the lock", n)
	}
	// read-only runs are not writers
	if r := devata(t, nil, "apply", "--dry-run", "--config", sf.settings); r.code != 1 {
		t.Errorf("apply --dry-run while the lock is held: exit %d, want 1 (a change is pending)\n%s", r.code, r.err)
	}

	go func() {
		time.Sleep(500 * time.Millisecond)
		held.Release()
	}()
	r := devata(t, nil, "apply", "--yes", "--wait-lock", "30s", "--config", sf.settings)
	if r.code != 0 {
		t.Fatalf("apply --wait-lock after the holder let go: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if applies() == before {
		t.Error("apply --wait-lock ran but changed nothing")
	}
}
