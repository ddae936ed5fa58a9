package reconcile_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

// A thousand workers that drifted the same way are one change in the plan,
// with its diff once; the machines in sync are counted; a long list of
// machines not started is cut to a few names and a count (issue 17:
// apply --dry-run printed the same diff 1,000 times).
func TestPlanWriteScales(t *testing.T) {
	diff := talosapi.ConfigDiff{Text: "--- applied\n+++ desired\n@@ -1 +1 @@\n-a\n+b\n"}
	var plan reconcile.Plan
	for i := range 1000 {
		m := &inventory.Machine{Name: fmt.Sprintf("worker-%04d", i), Role: inventory.RoleWorker}
		switch {
		case i < 900:
			plan.Actions = append(plan.Actions, reconcile.Action{Machine: m, Kind: reconcile.KindApply, Mode: talosapi.ModeNoReboot, Diff: diff})
		case i == 900:
			odd := talosapi.ConfigDiff{Text: "--- applied\n+++ desired\n@@ -1 +1 @@\n-x\n+y\n"}
			plan.Actions = append(plan.Actions, reconcile.Action{Machine: m, Kind: reconcile.KindApply, Mode: talosapi.ModeNoReboot, Diff: odd})
		case i < 990:
			plan.Actions = append(plan.Actions, reconcile.Action{Machine: m, Kind: reconcile.KindNone})
		default:
			plan.Actions = append(plan.Actions, reconcile.Action{Machine: m, Kind: reconcile.KindSkip, Reason: "dial: connection refused"})
		}
	}
	var buf bytes.Buffer
	plan.Write(&buf)
	out := buf.String()
	if n := strings.Count(out, "+b"); n != 1 {
		t.Errorf("the shared diff is printed %d times, want once", n)
	}
	for _, want := range []string{
		"  worker-0000, worker-0001, worker-0002, worker-0003, worker-0004, worker-0005, worker-0006, worker-0007, worker-0008, worker-0009 and 890 more (900 machines) apply no-reboot",
		"  worker-0900          apply no-reboot",
		"(10 machines) skipped: dial: connection refused",
		"  89 of 1000 machines in sync\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines > 20 {
		t.Errorf("the plan of 1,000 machines is %d lines", lines)
	}

	var names []string
	for i := range 1000 {
		names = append(names, fmt.Sprintf("worker-%04d", i))
	}
	buf.Reset()
	(&reconcile.RolloutResult{Converged: names[:3], Untouched: names[3:]}).Write(&buf)
	if want := "converged: worker-0000, worker-0001, worker-0002\nnot started: worker-0003, worker-0004, worker-0005, worker-0006, worker-0007, worker-0008, worker-0009, worker-0010, worker-0011, worker-0012 and 987 more\n"; buf.String() != want {
		t.Errorf("outcome:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// A change lists its paths under "changes:" before the unified diff.
func TestPlanWriteListsChangesBeforeTheDiff(t *testing.T) {
	diff := talosapi.ConfigDiff{
		Text:    "--- applied\n+++ desired\n@@ -1 +1 @@\n-    hostname: a\n+    hostname: b\n",
		Changes: []string{`machine.network.hostname: "a" → "b"`},
	}
	plan := reconcile.Plan{Actions: []reconcile.Action{{
		Machine: &inventory.Machine{Name: "cp-1", Role: inventory.RoleControlPlane}, Kind: reconcile.KindApply, Mode: talosapi.ModeNoReboot, Diff: diff,
	}}}
	var buf bytes.Buffer
	plan.Write(&buf)
	want := "      changes:\n" +
		"        machine.network.hostname: \"a\" → \"b\"\n" +
		"      --- applied\n"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("plan lacks\n%s\nin\n%s", want, buf.String())
	}
	// no paths, no block
	plan.Actions[0].Diff.Changes = nil
	buf.Reset()
	plan.Write(&buf)
	if strings.Contains(buf.String(), "changes:") {
		t.Errorf("a diff without paths prints a changes block:\n%s", buf.String())
	}
}
