package reconcile_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

func TestFailedGateStopsChangesAndIsReportedEveryPassUntilItClears(t *testing.T) {
	h := newLoop(t, nil)
	h.opts.Changes.Wait = 300 * time.Millisecond
	h.start(t)
	cp3 := h.f.Sim.Machine("cp-3")
	cp3.SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"EtcdStatus": codes.Unavailable, "EtcdMemberList": codes.Unavailable}})
	h.f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	h.waitFor(t, 10*time.Second, "the gate to block", func() bool { return h.metric(t, "devata_reconcile_gate_blocked") == 1 })
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	before := writes(h.f.Sim.Machine("worker-1"))
	h.waitFor(t, 10*time.Second, "three passes reporting the gate", func() bool {
		return strings.Count(h.logs.String(), "rollout stopped by a failed gate") >= 3
	})
	if writes(h.f.Sim.Machine("worker-1")) != before || writes(h.f.Sim.Machine("cp-2")) != 0 {
		t.Fatal("a machine was changed while the gate failed")
	}
	cp3.SetFaults(sim.Faults{})
	h.waitFor(t, 15*time.Second, "cp-2 and worker-1 to converge after the gate cleared", func() bool {
		return h.inSync(t, "cp-2") && h.inSync(t, "worker-1")
	})
	if v := h.metric(t, "devata_reconcile_gate_blocked"); v != 0 {
		t.Errorf("gate still reported blocked: %v", v)
	}
	var blocked bool
	for _, r := range h.audit.records(t) {
		blocked = blocked || r.Machine == "cp-2" && r.Result == reconcile.ResultBlocked && strings.Contains(r.Error, "gate failed")
	}
	if !blocked {
		t.Errorf("the blocked change is not in the audit log:\n%s", h.audit)
	}
}

// An operator's `talosctl apply-config --mode try` is pending on worker-1.
// Any ApplyConfiguration but TRY, dry runs included, cancels its rollback
// (Talos v1.11.0 internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// ApplyConfiguration: CancelConfigRollbackTimeout), so reconcile leaves the
// machine alone, says why, and the try still rolls back on its own.
func TestOnceLeavesAPendingTryAlone(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	m := f.Sim.Machine("worker-1")
	tried := []byte(strings.Replace(string(f.Desired["worker-1"]), "time.cloudflare.com", "pool.ntp.org", 1))
	c, err := f.Dialer.Client(context.Background(), f.Inventory.Machine("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := talosapi.Apply(context.Background(), c, tried, talosapi.ModeTry, 3*time.Second); err != nil {
		t.Fatalf("try: %v", err)
	}
	before := m.Calls("ApplyConfiguration")

	h := newLoop(t, f)
	res := h.loop().Once(context.Background())
	if res.ExitCode() != 1 || res.Outcomes["worker-1"] != reconcile.OutcomeHeld {
		t.Errorf("once: exit %d, outcomes %v, want worker-1 held\n%s", res.ExitCode(), res.Outcomes, h.logs)
	}
	if n := m.Calls("ApplyConfiguration") - before; n != 0 {
		t.Errorf("%d ApplyConfiguration calls (dry runs included) reached worker-1 with a try pending", n)
	}
	if !strings.Contains(h.logs.String(), "a `--mode try` waiting for its rollback") {
		t.Errorf("the log does not say why worker-1 was left alone:\n%s", h.logs)
	}
	// the try was not made permanent: it rolls back, then reconcile has nothing to do there
	h.waitFor(t, 10*time.Second, "the try's rollback", func() bool { return h.inSync(t, "worker-1") })
}

// Probe 1 of issue 15: a control plane's change was applied from a plan
// made before it took the change lock. cp-2 and cp-3 drift; while the
// first of them is being changed, the other (planned, waiting for the
// lock) is put back to its desired config behind the loop's back. Once its
// change holds the lock it plans again, finds it in sync and sends nothing.
func TestAControlPlaneIsPlannedAgainOnceItHoldsTheChangeLock(t *testing.T) {
	h := newLoop(t, nil)
	f := h.f
	writes := func(m string) int {
		return f.Sim.Machine(m).Calls("ApplyConfiguration") - f.Sim.Machine(m).Calls("ApplyConfiguration(dry-run)")
	}
	dryRuns := func(m string) int { return f.Sim.Machine(m).Calls("ApplyConfiguration(dry-run)") }
	f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	f.Drift(t, "cp-3", "time.cloudflare.com", "pool.ntp.org")
	base := map[string]int{"cp-2": writes("cp-2"), "cp-3": writes("cp-3")}
	first, other := "", ""
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if dryRuns("cp-2") > 0 && dryRuns("cp-3") > 0 {
				for _, pair := range [][2]string{{"cp-2", "cp-3"}, {"cp-3", "cp-2"}} {
					if writes(pair[0]) > base[pair[0]] && writes(pair[1]) == base[pair[1]] {
						first, other = pair[0], pair[1]
						faults := f.Sim.Machine(other).Faults()
						faults.DriftedConfig = f.Desired[other]
						f.Sim.Machine(other).SetFaults(faults)
						return
					}
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	h.start(t)
	<-done
	if first == "" {
		t.Fatal("never saw one control plane changed while the other waited, planned")
	}
	for _, m := range []string{"cp-2", "cp-3"} {
		h.waitFor(t, 10*time.Second, m+" in sync", func() bool { return h.inSync(t, m) })
	}
	if n := writes(other) - base[other]; n != 0 {
		t.Errorf("%s was written %d times from a plan made before it held the change lock", other, n)
	}
	if n := writes(first) - base[first]; n != 1 {
		t.Errorf("%s written %d times, want 1", first, n)
	}
}

// failAfter accepts n writes, then fails every one, as a disk that fills.
type failAfter struct {
	mu sync.Mutex
	n  int
}

func (w *failAfter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		return 0, errors.New("no space left on device")
	}
	w.n--
	return len(p), nil
}

// The audit log fails closed after a change too: when a change's final
// record cannot be written, the pass makes no further change and says why.
func TestAChangeWhoseFinalRecordIsLostStopsThePass(t *testing.T) {
	h := newLoop(t, nil)
	h.opts.Workers, h.opts.Changes.Concurrency = 1, 1
	h.opts.Audit = reconcile.NewAuditLog(&failAfter{n: 1}, "test", reconcile.Shard{})
	for _, m := range []string{"worker-1", "worker-2"} {
		h.f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	res := h.loop().Once(context.Background())
	changed := 0
	for _, m := range []string{"worker-1", "worker-2"} {
		if res.Outcomes[m] == reconcile.OutcomeConverged {
			changed++
			if !strings.Contains(res.Errors[m], "audit record could not be written") {
				t.Errorf("%s converged without its record and says %q", m, res.Errors[m])
			}
		}
	}
	if changed != 1 || !strings.Contains(res.Blocked, "could not be written") {
		t.Fatalf("%d workers changed, blocked %q: want one, then the pass stopped\n%v", changed, res.Blocked, res.Outcomes)
	}
	if res.ExitCode() == 0 {
		t.Error("a pass that lost an audit record exits 0")
	}
}

// A Reconciler needs no loop, no queue and no pass: called alone with a
// machine's name it plans that machine afresh, changes it, records the
// change and says how it ended; called again it finds it in sync and
// writes nothing. A held machine is left alone with the reason, a dry run
// writes nothing, and a name the inventory does not have is gone.
func TestReconcileWithoutALoop(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	for _, m := range []string{"worker-1", "worker-2", "cp-2"} {
		f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	editInventory(t, f, "  - name: worker-2\n    role: worker\n", "  - name: worker-2\n    role: worker\n    hold: {reason: \"disk replacement, OPS-123\"}\n")
	d, err := reconcile.FileSource(f.Inventory.Path)(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	audit := &syncBuffer{}
	changes := reconcile.Changes{Dialer: f.Dialer, Timeout: 5 * time.Second, Wait: 5 * time.Second, Poll: 20 * time.Millisecond}
	r := &reconcile.Reconciler{
		Spec: func() *reconcile.Desired { return d }, Changes: changes,
		Audit: reconcile.NewAuditLog(audit, "test", reconcile.Shard{}),
	}
	w1, w2, cp2 := f.Sim.Machine("worker-1"), f.Sim.Machine("worker-2"), f.Sim.Machine("cp-2")

	res, err := r.Reconcile(t.Context(), "worker-1")
	if err != nil || res.Outcome != reconcile.OutcomeConverged || writes(w1) != 1 {
		t.Fatalf("worker-1: %+v, %v, %d writes; want converged with one write", res, err, writes(w1))
	}
	var results []string
	for _, rec := range audit.records(t) {
		results = append(results, rec.Machine+" "+rec.Result)
	}
	if want := []string{"worker-1 started", "worker-1 converged"}; !slices.Equal(results, want) {
		t.Errorf("audit %v, want %v", results, want)
	}
	if res, err = r.Reconcile(t.Context(), "worker-1"); err != nil || res.Outcome != reconcile.OutcomeInSync || writes(w1) != 1 {
		t.Errorf("worker-1 again: %+v, %v, %d writes; want in sync and no further write", res, err, writes(w1))
	}

	res, err = r.Reconcile(t.Context(), "worker-2")
	if err != nil || res.Outcome != reconcile.OutcomeHeld || !strings.Contains(res.Held, "held by the inventory (disk replacement, OPS-123)") || w2.Calls("ApplyConfiguration") != 0 {
		t.Errorf("held worker-2: %+v, %v, %d ApplyConfiguration calls; want held with the reason and no call", res, err, w2.Calls("ApplyConfiguration"))
	}

	dry := &reconcile.Reconciler{Spec: r.Spec, Changes: changes, DryRun: true}
	if res, err = dry.Reconcile(t.Context(), "cp-2"); err != nil || res.Outcome != reconcile.OutcomeDryRun || writes(cp2) != 0 {
		t.Errorf("dry run of cp-2: %+v, %v, %d writes; want dry-run and none", res, err, writes(cp2))
	}
	if res, err = r.Reconcile(t.Context(), "worker-9"); err != nil || res.Outcome != reconcile.OutcomeGone {
		t.Errorf("worker-9, not in the inventory: %+v, %v; want gone", res, err)
	}
	if res, err = (&reconcile.Reconciler{Changes: changes}).Reconcile(t.Context(), "worker-1"); err == nil || res.Outcome != reconcile.OutcomeFailed {
		t.Errorf("no spec in force: %+v, %v; want failed with an error", res, err)
	}
}
