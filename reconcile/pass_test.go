package reconcile_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/storagecheck"
)

// Two shards between them observe and fix the whole fleet, each only its own
// machines, and only shard 0 touches control planes.
func TestShardsSplitTheFleet(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	for _, m := range []string{"cp-2", "worker-1", "worker-2"} {
		f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	seen := map[string]int{}
	for i := range 2 {
		h := newLoop(t, f)
		h.opts.Shard = reconcile.Shard{Index: i, Count: 2}
		res := h.loop().Once(context.Background())
		if res.ExitCode() != 0 {
			t.Errorf("shard %d: exit %d, outcomes %v\n%s", i, res.ExitCode(), res.Outcomes, h.logs)
		}
		for _, m := range res.Report.Machines {
			seen[m.Name]++
			if mm := f.Inventory.Machine(m.Name); !h.opts.Shard.Owns(mm) || mm.IsControlPlane() && i != 0 {
				t.Errorf("shard %d observed %s", i, m.Name)
			}
		}
		for _, r := range h.audit.records(t) {
			if !h.opts.Shard.Owns(f.Inventory.Machine(r.Machine)) {
				t.Errorf("shard %d acted on %s", i, r.Machine)
			}
		}
	}
	for _, m := range f.Inventory.Machines {
		if seen[m.Name] != 1 {
			t.Errorf("%s observed by %d shards", m.Name, seen[m.Name])
		}
		h := &loopHarness{f: f}
		if !h.inSync(t, m.Name) {
			t.Errorf("%s not converged", m.Name)
		}
	}
}

// The checks of the other families (storage, Cilium)
// are part of every pass's report when the Loop is given them.
func TestPassesCarryTheOtherFamilies(t *testing.T) {
	h := newLoop(t, nil)
	h.opts.Checks = append(slices.Clone(talosChecks), "storage-volumes")
	h.opts.Families = storagecheck.Checks()
	res := h.loop().Once(context.Background())
	n := 0
	for _, r := range res.Report.Results {
		if r.Check == "storage-volumes" && r.Status == drift.StatusInSync {
			n++
		}
	}
	if n != len(h.f.Inventory.Machines) || res.ExitCode() != 0 {
		t.Errorf("exit %d, %d storage-volumes results in sync, want %d", res.ExitCode(), n, len(h.f.Inventory.Machines))
	}
}

// A pass changes its control planes before any worker (docs/reconcile.md;
// issue 17 saw worker-1 applied before cp-2): with a control plane slow to
// plan, a worker queued after it still waits until it is done, gate
// included.
func TestAPassChangesControlPlanesBeforeWorkers(t *testing.T) {
	h := newLoop(t, nil)
	h.opts.Workers = 4
	for _, m := range []string{"cp-2", "worker-1", "worker-2"} {
		h.f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	faults := h.f.Sim.Machine("cp-2").Faults()
	faults.Latency = 150 * time.Millisecond
	h.f.Sim.Machine("cp-2").SetFaults(faults)
	res := h.loop().Once(context.Background())
	for _, m := range []string{"cp-2", "worker-1", "worker-2"} {
		if res.Outcomes[m] != reconcile.OutcomeConverged {
			t.Fatalf("%s: %q, want converged\n%s", m, res.Outcomes[m], h.logs.String())
		}
	}
	var cpDone time.Time
	for _, r := range h.audit.records(t) {
		if r.Machine == "cp-2" && r.Result != reconcile.ResultStarted {
			cpDone = r.Time
		}
	}
	for _, r := range h.audit.records(t) {
		if r.Machine != "cp-2" && r.Result == reconcile.ResultStarted && (cpDone.IsZero() || r.Time.Before(cpDone)) {
			t.Errorf("%s started at %s, before cp-2 was done (%s)", r.Machine, r.Time.Format(time.StampMicro), cpDone.Format(time.StampMicro))
		}
	}
}
