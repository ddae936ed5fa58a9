package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/backup"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/lock"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=devata", "-c", "user.email=devata@example.com", "-c", "init.defaultBranch=main"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v (the test needs git): %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A drift report names the inventory it came from (issue 18): its sha256
// always, and in Git the commit and whether the work tree is dirty; the
// table says so in its header.
func TestDriftReportNamesTheInventoryCommit(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	report := func() drift.Report {
		t.Helper()
		r := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json")
		if r.code != 0 {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
		}
		var rep drift.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if p := report().Provenance; p.Commit != "" || len(p.InventorySHA256) != 64 {
		t.Errorf("outside Git: %+v, want a sha256 and no commit", p)
	}
	git(t, sf.Dir, "init", "-q")
	if err := os.WriteFile(filepath.Join(sf.Dir, ".gitignore"), []byte("sim/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	git(t, sf.Dir, "add", "-A")
	git(t, sf.Dir, "commit", "-q", "-m", "inventory")
	head := git(t, sf.Dir, "rev-parse", "HEAD")
	if p := report().Provenance; p.Commit != head || p.Dirty {
		t.Errorf("committed: %+v, want commit %s, clean", p, head)
	}
	if err := os.WriteFile(filepath.Join(sf.Dir, "notes.txt"), []byte("wip\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p := report().Provenance; p.Commit != head || !p.Dirty {
		t.Errorf("an untracked file: %+v, want commit %s, dirty", p, head)
	}
	// A backup's sidecar tells a dirty tree from an edited inventory
	// (issue 33: it said inventoryModified for an unchanged inventory).
	sidecar := func(name string) backup.Sidecar {
		t.Helper()
		out := filepath.Join(t.TempDir(), name)
		// -o, the spelling before --to, still works with a notice (issue 33)
		r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "-o", out)
		if r.code != 0 {
			t.Fatalf("backup etcd: exit %d\n%s%s", r.code, r.stdout, r.err)
		}
		if !strings.Contains(r.err, "Flag --output has been deprecated, use --to") {
			t.Errorf("backup etcd -o: no deprecation notice naming --to:\n%s", r.err)
		}
		raw, err := os.ReadFile(out + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var sc backup.Sidecar
		if err := json.Unmarshal(raw, &sc); err != nil {
			t.Fatal(err)
		}
		return sc
	}
	if sc := sidecar("tree.db"); sc.InventoryCommit != head || sc.InventoryModified || !sc.WorkTreeModified {
		t.Errorf("an untracked file beside a committed inventory: sidecar commit %q, inventoryModified %t, workTreeModified %t; want %s, false, true",
			sc.InventoryCommit, sc.InventoryModified, sc.WorkTreeModified, head)
	}
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks)
	if want := "@ " + head[:12] + " (dirty)"; !strings.Contains(r.stdout, want) {
		t.Errorf("the table does not name the commit (%s):\n%s", want, r.stdout)
	}
	// Plans too: the text plan's header and the markdown runbook.
	for _, out := range []string{"text", "markdown"} {
		r := devata(t, nil, "plan", "--config", sf.settings, "-o", out)
		if r.code > 1 {
			t.Fatalf("plan -o %s: exit %d\n%s%s", out, r.code, r.stdout, r.err)
		}
		if want := head[:12] + " (dirty)"; !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "sha256") {
			t.Errorf("plan -o %s does not name the commit (%s) and sha256:\n%s", out, want, r.stdout)
		}
	}
	r = devata(t, nil, "apply", "--config", sf.settings, "--dry-run")
	if want := "@ " + head[:12] + " (dirty)"; !strings.Contains(r.stdout+r.err, want) {
		t.Errorf("apply --dry-run does not name the commit (%s): exit %d\n%s%s", want, r.code, r.stdout, r.err)
	}
	f, err := os.OpenFile(filepath.Join(sf.Dir, "inventory.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("# edited after the commit\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if sc := sidecar("edited.db"); !sc.InventoryModified || !sc.WorkTreeModified {
		t.Errorf("an edited inventory: sidecar inventoryModified %t, workTreeModified %t; want both", sc.InventoryModified, sc.WorkTreeModified)
	}
}

// A write leaves devata's lock next to the inventory (lock.Path); the
// reports after it still call a committed tree clean (issue 33: every
// report after the first write said the tree was dirty).
func TestReportAfterAWriteIsNotDirtiedByTheLock(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	git(t, sf.Dir, "init", "-q")
	if err := os.WriteFile(filepath.Join(sf.Dir, ".gitignore"), []byte("sim/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	git(t, sf.Dir, "add", "-A")
	git(t, sf.Dir, "commit", "-q", "-m", "inventory")
	head := git(t, sf.Dir, "rev-parse", "HEAD")
	if r := devata(t, nil, "apply", "--config", sf.settings, "--yes", "--no-lease"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	path, err := lock.Path(sf.Inventory.Path, sf.Inventory.Cluster.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the write left no lock file to test with: %v", err)
	}
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks)
	if want := "@ " + head[:12] + ","; !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "(dirty)") {
		t.Errorf("after a write, with %s in the tree, the report says:\n%s", filepath.Base(path), r.stdout)
	}
}
