package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

type harness struct {
	f     *simtest.Fleet
	lines []string
	mu    sync.Mutex
}

func newHarness(t *testing.T) *harness {
	return &harness{f: simtest.Start(t, simtest.Options{Bootstrap: true})}
}

func (h *harness) planner() *reconcile.Planner {
	return &reconcile.Planner{Inventory: h.f.Inventory, Desired: h.f.Desired, Dialer: h.f.Dialer, Mode: talosapi.ModeAuto, Concurrency: 4, Timeout: 5 * time.Second}
}

func (h *harness) rollout(hook func(line string)) *reconcile.Rollout {
	return &reconcile.Rollout{
		Inventory: h.f.Inventory, Desired: h.f.Desired, Dialer: h.f.Dialer,
		MaxUnavailable: 1, Timeout: 5 * time.Second, Wait: 5 * time.Second, Poll: 20 * time.Millisecond,
		Say: func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			h.mu.Lock()
			h.lines = append(h.lines, line)
			h.mu.Unlock()
			if hook != nil {
				hook(line)
			}
		},
	}
}

func (h *harness) applyCalls() map[string]int {
	out := map[string]int{}
	for _, m := range h.f.Sim.Machines() {
		out[m.Name()] = m.Calls("ApplyConfiguration")
	}
	return out
}

func TestPlanInSyncFleetMakesNoApplyCalls(t *testing.T) {
	h := newHarness(t)
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(plan.Pending()); n != 0 {
		t.Errorf("%d actions pending on a fleet in sync", n)
	}
	for name, n := range h.applyCalls() {
		if n != 0 {
			t.Errorf("%s: %d ApplyConfiguration calls while planning an in-sync fleet", name, n)
		}
	}
}

func TestDriftedWorkerAndControlPlaneConverge(t *testing.T) {
	h := newHarness(t)
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pending := plan.Pending()
	if len(pending) != 2 || pending[0].Machine.Name != "cp-2" || pending[1].Machine.Name != "worker-1" {
		t.Fatalf("plan %v, want cp-2 then worker-1", plan.Actions)
	}
	if pending[0].Mode != talosapi.ModeNoReboot {
		t.Errorf("a time-server change resolved to %s, want no-reboot", pending[0].Mode)
	}
	out := h.rollout(nil).Run(context.Background(), plan)
	if !out.Done() || len(out.Converged) != 2 {
		t.Fatalf("rollout: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
	before := h.applyCalls()
	plan, err = h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Pending()) != 0 {
		t.Errorf("second plan still has %d actions", len(plan.Pending()))
	}
	after := h.applyCalls()
	for name := range after {
		if after[name] != before[name] {
			t.Errorf("%s: a second pass made %d ApplyConfiguration calls, want 0", name, after[name]-before[name])
		}
	}
}

func TestRebootingChangeWaitsForTheMachine(t *testing.T) {
	h := newHarness(t)
	// A machine feature outside Talos' live fields needs a reboot.
	h.f.Drift(t, "worker-2", "diskQuotaSupport: true", "diskQuotaSupport: false")
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Pending()
	if len(p) != 1 || !p[0].Reboots {
		t.Fatalf("want one rebooting action, got %+v", p)
	}
	out := h.rollout(nil).Run(context.Background(), plan)
	if !out.Done() {
		t.Fatalf("rollout: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
	if !strings.Contains(strings.Join(h.lines, "\n"), "rebooting, waiting for it to return") {
		t.Errorf("no reboot wait reported:\n%s", strings.Join(h.lines, "\n"))
	}
}

func TestFailingEtcdGateStopsBeforeTheNextControlPlane(t *testing.T) {
	h := newHarness(t)
	for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
		h.f.Drift(t, cp, "time.cloudflare.com", "pool.ntp.org")
	}
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ro := h.rollout(func(line string) {
		if strings.HasPrefix(line, "    cp-1: runs the desired config") {
			// cp-3's etcd stops answering right after cp-1 converged.
			m := h.f.Sim.Machine("cp-3")
			f := m.Faults()
			f.ErrorCodes = map[string]codes.Code{"EtcdStatus": codes.Unavailable, "EtcdMemberList": codes.Unavailable}
			m.SetFaults(f)
		}
	})
	ro.Wait = 300 * time.Millisecond
	before := h.applyCalls()
	out := ro.Run(context.Background(), plan)
	if out.Done() || !strings.Contains(out.Stopped, "after cp-1") || !strings.Contains(out.Stopped, "cp-3") {
		t.Fatalf("want a stop at the gate after cp-1 naming cp-3, got %+v", out)
	}
	if strings.Join(out.Converged, ",") != "cp-1" || strings.Join(out.Untouched, ",") != "cp-2,cp-3,worker-1" {
		t.Errorf("converged %v untouched %v", out.Converged, out.Untouched)
	}
	after := h.applyCalls()
	for _, name := range []string{"cp-2", "cp-3", "worker-1"} {
		if after[name] != before[name] {
			t.Errorf("%s was applied to after the gate failed", name)
		}
	}
}

func TestInterruptFinishesTheMachineInFlightAndTouchesNoOther(t *testing.T) {
	h := newHarness(t)
	h.f.Drift(t, "cp-1", "time.cloudflare.com", "pool.ntp.org")
	h.f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ro := h.rollout(func(line string) {
		if strings.HasPrefix(line, "==> cp-1: apply") {
			cancel() // SIGINT while cp-1 is being changed
		}
	})
	before := h.applyCalls()
	out := ro.Run(ctx, plan)
	if out.InFlight != "cp-1" || strings.Join(out.Converged, ",") != "cp-1" {
		t.Errorf("in flight %q converged %v; want cp-1 finished", out.InFlight, out.Converged)
	}
	if strings.Join(out.Untouched, ",") != "cp-2" || !strings.Contains(out.Stopped, "interrupted") {
		t.Errorf("untouched %v stopped %q", out.Untouched, out.Stopped)
	}
	if after := h.applyCalls(); after["cp-2"] != before["cp-2"] {
		t.Error("cp-2 was touched after the interrupt")
	}
	o := talosapi.Observe(context.Background(), h.f.Dialer, h.f.Inventory.Machine("cp-1"))
	if d, _ := talosapi.DiffConfigs(o.Active, h.f.Desired["cp-1"]); !d.Equal {
		t.Error("cp-1 was left half-done")
	}
}
