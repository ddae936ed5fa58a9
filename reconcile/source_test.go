package reconcile_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/render"
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
	if err := h.loop().Ready(); err != nil {
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
	before := render.LeanAbove
	render.LeanAbove = 0
	defer func() { render.LeanAbove = before }()
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	m := f.Sim.Machine("worker-1")
	h := newLoop(t, f)
	res := h.loop().Once(context.Background())
	if res.ExitCode() != 0 || res.Outcomes["worker-1"] != reconcile.OutcomeConverged || writes(m) != 1 {
		t.Fatalf("lean once: exit %d, outcomes %v, %d writes\n%s", res.ExitCode(), res.Outcomes, writes(m), h.logs)
	}
	res = h.loop().Once(context.Background())
	if res.ExitCode() != 0 || len(res.Queued) != 0 || writes(m) != 1 {
		t.Errorf("second lean pass: exit %d, queued %v, %d writes", res.ExitCode(), res.Queued, writes(m))
	}
}

// A pass's report and devata_inventory_info name the inventory in force:
// its sha256 without Git, its commit and dirt once it is committed.
func TestPassNamesTheInventory(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is not installed (%v): this test needs it; install git", err)
	}
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(f.Dir))
	h := newLoop(t, f)
	data, err := os.ReadFile(f.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])

	res := h.loop().Once(context.Background())
	if pv := res.Report.Provenance; pv.InventorySHA256 != sha || pv.InGit() {
		t.Errorf("outside Git the report's provenance is %+v, want the sha256 %s alone", pv, sha)
	}
	if v := h.metric(t, "devata_inventory_info", `commit=""`, `dirty=""`, `sha256="`+sha+`"`); v != 1 {
		t.Errorf("devata_inventory_info without Git = %v, want 1", v)
	}

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(git, append([]string{"-C", f.Dir, "-c", "user.name=devata test", "-c", "user.email=test@devata.invalid",
			"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q")
	run("add", ".")
	run("commit", "-q", "-m", "inventory")
	head := run("rev-parse", "HEAD")
	res = h.loop().Once(context.Background())
	if pv := res.Report.Provenance; pv.Commit != head || pv.Dirty || pv.RepoPath != "inventory.yaml" {
		t.Errorf("committed: the report's provenance is %+v, want commit %s, clean", pv, head)
	}
	if v := h.metric(t, "devata_inventory_info", `commit="`+head+`"`, `dirty="false"`); v != 1 {
		t.Errorf("devata_inventory_info at %s, clean = %v, want 1", head, v)
	}
	// A change made from it says so in the audit log.
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	if res := h.loop().Once(context.Background()); res.Outcomes["worker-1"] != reconcile.OutcomeConverged {
		t.Fatalf("worker-1 not converged: %v\n%s", res.Outcomes, h.logs)
	}
	if n := strings.Count(h.audit.String(), `"inventoryCommit":"`+head+`","inventorySha256":"`+sha+`"`); n != 2 {
		t.Errorf("%d audit records name commit %s and the sha256, want 2 (started, converged):\n%s", n, head, h.audit)
	}

	if err := os.WriteFile(filepath.Join(f.Dir, "patches", "new.yaml"), []byte("machine: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.loop().Once(context.Background())
	if v := h.metric(t, "devata_inventory_info", `dirty="true"`); v != 1 {
		t.Errorf("devata_inventory_info with an untracked patch: dirty=\"true\" %v, want 1", v)
	}
	if v := h.metric(t, "devata_inventory_info"); v != 1 {
		t.Errorf("%v devata_inventory_info series, want one: the last inventory's replaces the one before", v)
	}
}
