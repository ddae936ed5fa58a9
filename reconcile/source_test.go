package reconcile_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
)

func TestInvalidInventoryEditKeepsTheLastValidOne(t *testing.T) {
	h := newLoop(t, nil)
	h.start(t)
	good, err := os.ReadFile(h.f.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(good), "machines:", "machnes:", 1)
	if err := os.WriteFile(h.f.Inventory.Path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, 5*time.Second, "the invalid edit to be reported", func() bool {
		return strings.Contains(h.logs.String(), "inventory is invalid: the last valid one stays in force")
	})
	if v := h.metric(t, "devata_reconcile_inventory_valid"); v != 0 {
		t.Errorf("devata_reconcile_inventory_valid %v, want 0", v)
	}
	if !strings.Contains(h.logs.String(), "machnes") {
		t.Errorf("the log does not say what is wrong:\n%s", h.logs)
	}
	if err := h.loop.Ready(); err != nil {
		t.Errorf("not ready on the last valid inventory: %v", err)
	}
	// Still reconciling, on the last valid inventory.
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.waitFor(t, 10*time.Second, "worker-1 to converge on the last valid inventory", func() bool { return h.inSync(t, "worker-1") })

	if err := os.WriteFile(h.f.Inventory.Path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, 5*time.Second, "the fixed inventory to be taken", func() bool {
		return h.metric(t, "devata_reconcile_inventory_valid") == 1
	})
}

// Past bootstrap.LeanAbove machines the spec holds no configs: the pass renders each
// where it observes or changes it, and converges all the same.
func TestLeanDesiredConverges(t *testing.T) {
	before := bootstrap.LeanAbove
	bootstrap.LeanAbove = 0
	defer func() { bootstrap.LeanAbove = before }()
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	m := f.Sim.Machine("worker-1")
	h := newLoop(t, f)
	res := h.loop.Once(context.Background())
	if res.ExitCode() != 0 || res.Outcomes["worker-1"] != reconcile.OutcomeConverged || writes(m) != 1 {
		t.Fatalf("lean once: exit %d, outcomes %v, %d writes\n%s", res.ExitCode(), res.Outcomes, writes(m), h.logs)
	}
	res = h.loop.Once(context.Background())
	if res.ExitCode() != 0 || len(res.Queued) != 0 || writes(m) != 1 {
		t.Errorf("second lean pass: exit %d, queued %v, %d writes", res.ExitCode(), res.Queued, writes(m))
	}
}
