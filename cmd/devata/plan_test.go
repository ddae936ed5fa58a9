package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"devata.dev/devata/internal/golden"
	"devata.dev/devata/internal/simtest"
)

// The runbook for a fleet that is all in maintenance mode: every step, in
// order, with inventory addresses only, so the file does not depend on ports
// or temporary paths.
func TestPlanMarkdownOnMaintenanceFleet(t *testing.T) {
	sf := startSim(t, simtest.Options{Maintenance: allMachines})
	r := devata(t, nil, "plan", "--config", sf.settings, "-o", "markdown")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (actions pending)\n%s%s", r.code, r.stdout, r.err)
	}
	golden.Assert(t, filepath.Join("testdata", "plan-maintenance.md"), []byte(r.stdout))
	for _, leak := range []string{"127.0.0.1", sf.Dir} {
		if strings.Contains(r.stdout, leak) {
			t.Errorf("runbook contains %q: it must use inventory addresses and relative paths", leak)
		}
	}
	if applies, bootstraps := writes(sf.Sim); applies != 0 || bootstraps != 0 {
		t.Errorf("plan wrote: %d applies, %d bootstraps", applies, bootstraps)
	}
}

func TestPlanJSONAndText(t *testing.T) {
	sf := startSim(t, simtest.Options{Maintenance: []string{"worker-2"}, Bootstrap: true})
	sf.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	r := devata(t, nil, "plan", "--config", sf.settings, "-o", "json", "--skip-nodes")
	show(t, r)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	var plan struct {
		Kind    string `json:"kind"`
		Pending int    `json:"pending"`
		Actions []struct {
			Step, Machine, Status, By, Reason string
			Evidence                          []struct{ Rung, Observed string }
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	got := map[string]string{}
	for _, a := range plan.Actions {
		got[a.Step+" "+a.Machine] = a.Status + " by " + a.By
	}
	for key, want := range map[string]string{
		"configure worker-2":  "pending by apply", // maintenance and the cluster runs: apply joins it (bootstrap would too)
		"apply cp-2":          "pending by apply", // the cluster exists: apply's job
		"configure cp-1":      "done by bootstrap",
		"bootstrap-etcd cp-1": "done by bootstrap",
	} {
		if got[key] != want {
			t.Errorf("%s: %q, want %q (all: %v)", key, got[key], want, got)
		}
	}
	r = devata(t, nil, "plan", "--config", sf.settings, "--skip-nodes")
	show(t, r)
	if r.code != 1 || !strings.Contains(r.stdout, "evidence [reconciliation]: MachineConfig v1alpha1 sha256:") {
		t.Errorf("text plan: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "plan", "--config", sf.settings, "-o", "yaml"); r.code != exitUsage {
		t.Errorf("-o yaml: exit %d, want 64", r.code)
	}
}

// Without a bundle the plan says it would create one, and writes nothing.
func TestPlanWithoutSecrets(t *testing.T) {
	sf := startSim(t, simtest.Options{Maintenance: allMachines})
	if err := os.Remove(filepath.Join(sf.Dir, "secrets.yaml")); err != nil {
		t.Fatal(err)
	}
	r := devata(t, nil, "plan", "--config", sf.settings, "--skip-nodes")
	if r.code != 1 || !strings.Contains(r.stdout, "pending  secrets") || !strings.Contains(r.stdout, "throwaway") {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if _, err := os.Stat(filepath.Join(sf.Dir, "secrets.yaml")); !os.IsNotExist(err) {
		t.Errorf("plan wrote a secrets bundle")
	}
}

// A rebooting change devata apply would roll out: the plan says the drain
// before it and the uncordon after, in apply --dry-run's words, with the
// kubectl commands among those to run by hand; a change that does not
// reboot says nothing of a drain.
func TestPlanSaysTheDrainBeforeARebootingApply(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Drift(t, "worker-1", "diskQuotaSupport: true", "diskQuotaSupport: false") // applied by a reboot
	sf.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")                   // applied at once
	r := devata(t, nil, "plan", "--config", sf.settings, "--skip-nodes")
	show(t, r)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	// one block per action, each starting with its number
	var worker, cp []string
	for _, block := range regexp.MustCompile(`\n\s*\d+\. `).Split(r.stdout, -1) {
		switch {
		case strings.Contains(block, "apply worker-1 "):
			worker = append(worker, block)
		case strings.Contains(block, "apply cp-2 "):
			cp = append(cp, block)
		}
	}
	if len(worker) != 1 || len(cp) != 1 {
		t.Fatalf("%d apply actions for worker-1 and %d for cp-2, want one each:\n%s", len(worker), len(cp), r.stdout)
	}
	if !strings.Contains(strings.Join(worker, ""), "drain first: devata apply cordons its Node") {
		t.Errorf("the rebooting apply of worker-1 does not say the drain:\n%s", r.stdout)
	}
	if strings.Contains(strings.Join(cp, ""), "drain") {
		t.Errorf("the apply of cp-2, which does not reboot, speaks of a drain:\n%s", r.stdout)
	}

	r = devata(t, nil, "plan", "--config", sf.settings, "--skip-nodes", "-o", "markdown")
	if !strings.Contains(r.stdout, "- Drain first: devata apply cordons its Node") ||
		!strings.Contains(r.stdout, "kubectl drain worker-1 --ignore-daemonsets --delete-emptydir-data") ||
		!strings.Contains(r.stdout, "kubectl uncordon worker-1") {
		t.Errorf("the markdown runbook lacks the drain of worker-1 or its commands:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "kubectl drain cp-2") {
		t.Errorf("the runbook drains cp-2, whose change does not reboot:\n%s", r.stdout)
	}
}
