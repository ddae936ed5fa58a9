package reconcile_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
)

// editInventory rewrites the fleet's inventory file: the loop reads it
// afresh every pass.
func editInventory(t *testing.T, f *simtest.Fleet, old, new string) {
	t.Helper()
	raw, err := os.ReadFile(f.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), old) {
		t.Fatalf("%q not in the inventory", old)
	}
	if err := os.WriteFile(f.Inventory.Path, []byte(strings.Replace(string(raw), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A machine the inventory holds (machines[].hold) is observed and
// reported, never written to: not even dry-run (issue 36).
func TestHeldMachineIsReportedAndNeverWritten(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	f.Drift(t, "worker-2", "time.cloudflare.com", "pool.ntp.org")
	editInventory(t, f, "  - name: worker-1\n    role: worker\n", "  - name: worker-1\n    role: worker\n    hold: {reason: \"disk replacement, OPS-123\"}\n")
	w1 := f.Sim.Machine("worker-1")

	h := newLoop(t, f)
	res := h.loop().Once(context.Background())
	if res.Outcomes["worker-1"] != reconcile.OutcomeHeld || res.Outcomes["worker-2"] != reconcile.OutcomeConverged || res.ExitCode() != 1 {
		t.Fatalf("outcomes %v, exit %d; want worker-1 held, worker-2 converged, exit 1\n%s", res.Outcomes, res.ExitCode(), h.logs)
	}
	if n := w1.Calls("ApplyConfiguration"); n != 0 {
		t.Errorf("the held worker-1 got %d ApplyConfiguration calls (dry runs included), want none", n)
	}
	why := res.Held["worker-1"]
	for _, want := range []string{"held by the inventory (disk replacement, OPS-123)", "it would apply: applied config differs", "devata apply --machines worker-1 --ignore-hold"} {
		if !strings.Contains(why, want) {
			t.Errorf("held reason %q lacks %q", why, want)
		}
	}
	if got := h.metric(t, "devata_reconcile_machine_held", `machine="worker-1"`, `by="hold"`); got != 1 {
		t.Errorf("devata_reconcile_machine_held{worker-1,hold} = %v, want 1", got)
	}
	if got := h.metric(t, "devata_reconcile_machine_held", `machine="worker-2"`); got != 0 {
		t.Errorf("devata_reconcile_machine_held{worker-2} = %v, want no series", got)
	}
}

// A change that reboots its machine waits for the machine's maintenance
// window, read on the loop's clock (never by sleeping); a change that does
// not reboot goes ahead at any time (issue 36).
func TestRebootingChangeWaitsForItsMaintenanceWindow(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")               // no reboot
	f.Drift(t, "worker-2", "diskQuotaSupport: true", "diskQuotaSupport: false") // a reboot
	editInventory(t, f, "  kubernetesVersion: v1.34.1\n", "  kubernetesVersion: v1.34.1\n  maintenanceWindows:\n    - {name: nightly, start: \"02:00\", duration: 1h}\n")
	w2 := f.Sim.Machine("worker-2")

	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC) // a Monday noon
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }

	h := newLoop(t, f)
	h.opts.Changes.Now = clock
	res := h.loop().Once(context.Background())
	if res.Outcomes["worker-1"] != reconcile.OutcomeConverged || res.Outcomes["worker-2"] != reconcile.OutcomeHeld {
		t.Fatalf("outside the window: outcomes %v; want worker-1 converged (no reboot), worker-2 held\n%s", res.Outcomes, h.logs)
	}
	if writes(w2) != 0 {
		t.Errorf("worker-2 was written to outside its window")
	}
	why := res.Held["worker-2"]
	for _, want := range []string{"waits for maintenance window nightly, which opens Tue 2026-12-08 02:00 UTC", "it would apply (disruptive: it reboots the machine)"} {
		if !strings.Contains(why, want) {
			t.Errorf("held reason %q lacks %q", why, want)
		}
	}
	if got := h.metric(t, "devata_reconcile_machine_held", `machine="worker-2"`, `by="window"`); got != 1 {
		t.Errorf("devata_reconcile_machine_held{worker-2,window} = %v, want 1", got)
	}

	mu.Lock()
	now = time.Date(2026, 12, 8, 2, 30, 0, 0, time.UTC)
	mu.Unlock()
	res = h.loop().Once(context.Background())
	if res.Outcomes["worker-2"] != reconcile.OutcomeConverged || writes(w2) != 1 {
		t.Fatalf("inside the window: outcomes %v, %d writes to worker-2; want converged, 1\n%s", res.Outcomes, writes(w2), h.logs)
	}
	if got := h.metric(t, "devata_reconcile_machine_held", `machine="worker-2"`); got != 0 {
		t.Errorf("devata_reconcile_machine_held{worker-2} = %v after it converged, want no series", got)
	}
}
