package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
)

// holdInInventory gives machine a hold in the sim fleet's inventory file.
func holdInInventory(t *testing.T, sf *simFleet, machine, reason string) {
	t.Helper()
	raw, err := os.ReadFile(sf.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	entry := "  - name: " + machine + "\n"
	if !strings.Contains(string(raw), entry) {
		t.Fatalf("no %q in the inventory", entry)
	}
	edited := strings.Replace(string(raw), entry, entry+"    hold: {reason: \""+reason+"\"}\n", 1)
	if err := os.WriteFile(sf.Inventory.Path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A held machine (machines[].hold) is planned and reported, never written
// to by apply, not even dry-run; --ignore-hold with --machines changes it
// at the console (issue 36).
func TestApplyLeavesAHeldMachineAlone(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	sf.Drift(t, "worker-2", "time.cloudflare.com", "pool.ntp.org")
	holdInInventory(t, sf, "worker-1", "disk replacement, OPS-123")

	// drift observes it as any other and says it is held, advising
	// nothing that apply would not do
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json")
	var rep struct {
		Machines []struct{ Name, Held string }
		Results  []struct{ Machine, Check, Status, Next string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 {
		t.Fatalf("drift -o json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.err)
	}
	for _, m := range rep.Machines {
		if want := map[string]string{"worker-1": "disk replacement, OPS-123"}[m.Name]; m.Held != want {
			t.Errorf("drift: %s held %q, want %q", m.Name, m.Held, want)
		}
	}
	for _, res := range rep.Results {
		if res.Machine == "worker-1" && res.Check == "config" && !strings.HasPrefix(res.Next, "held by the inventory (disk replacement, OPS-123)") {
			t.Errorf("drift: worker-1's config next %q does not say it is held", res.Next)
		}
	}
	table := devata(t, nil, "drift", "--config", sf.settings, machineChecks)
	lacks(t, "drift table", table.stdout, "held by the inventory: disk replacement, OPS-123", ", held")

	r = devata(t, nil, "apply", "--config", sf.settings, "--dry-run", "-o", "json")
	var plan struct {
		Actions []struct{ Machine, Step, Status, Held string }
		Summary struct{ Pending, Skipped, Held, ExitCode int }
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("apply --dry-run -o json: %v\n%s%s", err, r.stdout, r.err)
	}
	if plan.Summary.Held != 1 || plan.Summary.Pending != 1 || plan.Summary.Skipped != 0 || r.code != 1 {
		t.Errorf("dry-run summary %+v, exit %d; want 1 held, 1 pending, exit 1", plan.Summary, r.code)
	}
	for _, a := range plan.Actions {
		if a.Machine == "worker-1" && (a.Step != "skip" || a.Status != "blocked" || a.Held != "hold") {
			t.Errorf("worker-1's step %+v, want skip, blocked, held by hold", a)
		}
	}

	r = devata(t, nil, "apply", "--config", sf.settings, "--yes", "--wait", "20s")
	lacks(t, "apply", r.stdout, "worker-1", "held: held by the inventory (disk replacement, OPS-123), not changed; it would apply: applied config differs", "--ignore-hold")
	if r.code != 0 {
		t.Errorf("apply with a held machine and the rest converged: exit %d, want 0\n%s%s", r.code, r.stdout, r.err)
	}
	if got := applies(sf); got["worker-1"] != 0 || got["worker-2"] == 0 {
		t.Errorf("ApplyConfiguration calls %v: want none to the held worker-1, some to worker-2", got)
	}

	for _, args := range [][]string{
		{"apply", "--ignore-hold"},
		{"apply", "--machines", "worker-2", "--ignore-hold"},
	} {
		if r := devata(t, nil, append(args, "--config", sf.settings, "--yes")...); r.code != exitUsage {
			t.Errorf("devata %v: exit %d, want 64\n%s", args, r.code, r.err)
		}
	}

	r = devata(t, nil, "apply", "--config", sf.settings, "--machines", "worker-1", "--ignore-hold", "--yes", "--wait", "20s")
	if r.code != 0 || applies(sf)["worker-1"] == 0 {
		t.Errorf("apply --machines worker-1 --ignore-hold: exit %d, %d calls to worker-1\n%s%s", r.code, applies(sf)["worker-1"], r.stdout, r.err)
	}
}
