package membership_test

import (
	"bytes"
	"strings"
	"testing"

	"devata.dev/devata/membership"
	"devata.dev/devata/plan"
)

// A removal's plan is written with devata plan's step rows: the header
// counts what is pending, a pending step gives its command by hand, a step
// not needed says why and gives none.
func TestRemovePlanWritesPlanSteps(t *testing.T) {
	p := &membership.Plan{Name: "worker-2", Steps: []plan.Step{
		{Kind: membership.StepCordon, Machine: "worker-2", Status: plan.StatusPending, By: "remove", Summary: "mark Node worker-2 unschedulable", Reason: "its Node exists", Talosctl: []string{"kubectl cordon worker-2"}},
		{Kind: membership.StepReset, Machine: "worker-2", Status: plan.StatusDone, By: "remove", Summary: "reset the machine", Reason: "the machine does not answer", Talosctl: []string{"talosctl reset"}},
	}, Notes: []string{"a note"}}
	var out bytes.Buffer
	p.Write(&out)
	var rows bytes.Buffer
	if err := plan.WriteSteps(&rows, p.Steps, true); err != nil {
		t.Fatal(err)
	}
	want := "remove worker-2, a worker: 1 of 2 steps pending\n" + rows.String() + "note: a note\n"
	if out.String() != want {
		t.Errorf("Write printed\n%s\nwant\n%s", out.String(), want)
	}
	for _, line := range []string{
		"  1. pending  cordon worker-2          mark Node worker-2 unschedulable (by devata remove)\n",
		"by hand: kubectl cordon worker-2\n",
		"  2. done     reset worker-2           reset the machine (by devata remove)\n",
		"why: the machine does not answer\n",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("Write lacks %q:\n%s", line, out.String())
		}
	}
	if strings.Contains(out.String(), "talosctl reset") {
		t.Errorf("a step not needed gives a command by hand:\n%s", out.String())
	}
}
