package reconcile_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/reconcile"
)

// orderedWorkers gives the fleet's workers a group whose rollout.order
// names worker-2 before worker-1 (the reverse of the inventory's order),
// drifts both, and slows worker-2 down, so that without the order
// worker-1 would be written first, or beside it.
func orderedWorkers(t *testing.T, f *simtest.Fleet) {
	t.Helper()
	editInventory(t, f, "\nmachines:\n", "\ngroups:\n  - name: workers\n    selector: {role: worker}\n    rollout: {maxUnavailable: 2, order: [worker-2, worker-1]}\nmachines:\n")
	inv, err := inventory.Load(f.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	f.Inventory = inv
	for _, m := range []string{"worker-1", "worker-2"} {
		f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	faults := f.Sim.Machine("worker-2").Faults()
	faults.Latency = 100 * time.Millisecond
	f.Sim.Machine("worker-2").SetFaults(faults)
}

// watchFirstWrite polls worker-1's configuration writes until stop and
// reports whether the first one came while done() was still false.
func watchFirstWrite(f *simtest.Fleet, done func() bool) (early func() bool, stop func()) {
	var (
		mu  sync.Mutex
		bad bool
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			before := done() // read first: done may turn true only after the write
			if writes(f.Sim.Machine("worker-1")) > 0 {
				mu.Lock()
				bad = !before && !done()
				mu.Unlock()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	return func() bool { mu.Lock(); defer mu.Unlock(); return bad }, func() { cancel(); wg.Wait() }
}

// A group's rollout.order is a stage barrier in the loop (issue 36): its
// workers are queued and admitted in the order's stages, so worker-1,
// named after worker-2, is not written until worker-2's change is done
// (its final audit record), even with room for both at once (the group's
// maxUnavailable 2, four queue workers).
func TestLoopFollowsTheRolloutOrder(t *testing.T) {
	h := newLoop(t, nil)
	orderedWorkers(t, h.f)
	h.opts.Workers, h.opts.Changes.MaxUnavailable = 4, 2
	w2Done := func() bool {
		for _, r := range h.audit.records(t) {
			if r.Machine == "worker-2" && r.Result != reconcile.ResultStarted {
				return true
			}
		}
		return false
	}
	early, stop := watchFirstWrite(h.f, w2Done)
	res := h.loop().Once(context.Background())
	stop()
	for _, m := range []string{"worker-1", "worker-2"} {
		if res.Outcomes[m] != reconcile.OutcomeConverged {
			t.Fatalf("%s: %q, want converged\n%s", m, res.Outcomes[m], h.logs.String())
		}
	}
	if early() {
		t.Errorf("worker-1 was written before worker-2's change was done\n%s", h.audit.String())
	}
	var w2End, w1Start time.Time
	for _, r := range h.audit.records(t) {
		switch {
		case r.Machine == "worker-2" && r.Result != reconcile.ResultStarted:
			w2End = r.Time
		case r.Machine == "worker-1" && r.Result == reconcile.ResultStarted:
			w1Start = r.Time
		}
	}
	if w1Start.Before(w2End) {
		t.Errorf("worker-1 started at %s, before worker-2 was done at %s", w1Start.Format(time.StampMicro), w2End.Format(time.StampMicro))
	}
	if i, j := strings.Index(strings.Join(res.Queued, ","), "worker-2"), strings.Index(strings.Join(res.Queued, ","), "worker-1"); i > j {
		t.Errorf("queued %v: want worker-2 before worker-1", res.Queued)
	}
}

// devata apply's rollout honours the same order: with two workers allowed
// at once, worker-1 waits in a later batch until worker-2 runs its config.
func TestRolloutFollowsTheRolloutOrder(t *testing.T) {
	h := newHarness(t)
	orderedWorkers(t, h.f)
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var w2Done sync.Once
	doneCh := make(chan struct{})
	r := h.rollout(func(line string) {
		if strings.HasPrefix(line, "    worker-2: runs the desired config") {
			w2Done.Do(func() { close(doneCh) })
		}
	})
	r.MaxUnavailable = 2
	early, stop := watchFirstWrite(h.f, func() bool {
		select {
		case <-doneCh:
			return true
		default:
			return false
		}
	})
	out := r.Run(context.Background(), plan)
	stop()
	if !out.Done() || len(out.Converged) != 2 {
		t.Fatalf("rollout: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
	if early() {
		t.Errorf("worker-1 was written before worker-2 ran its config:\n%s", strings.Join(h.lines, "\n"))
	}
}
