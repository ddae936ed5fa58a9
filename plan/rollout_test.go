package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"devata.dev/devata/drift"
)

// The folded text plan writes a step shared by machines once, whatever
// their role, evidence and commands; never folds done steps and counts
// them past 50; and writes what a step would do only under a pending one.
func TestWriteFolded(t *testing.T) {
	apply := func(name, role, addr string) Step {
		return Step{Kind: "apply", Machine: name, Role: role, Status: StatusPending, Summary: "apply no-reboot (no reboot): +1 -1 lines",
			Evidence: []Evidence{{Rung: drift.RungReconciliation, Observed: "MachineConfig of " + name}},
			Talosctl: []string{"talosctl apply-config --nodes " + addr}, Notes: []string{"note"},
			Changes: []string{"a: 1 → 2"}, Diff: "--- applied\n+++ desired\n-a: 1\n+a: 2\n", Warnings: []string{"careful"}, Drain: "drain first"}
	}
	held := Step{Kind: "skip", Machine: "worker-9", Status: StatusBlocked, Summary: "held: held by the inventory", Held: "hold",
		Changes: []string{"b: 1 → 2"}, Diff: "-b: 1\n+b: 2\n"}
	steps := []Step{apply("cp-1", "controlplane", "10.0.0.1"), apply("worker-1", "worker", "10.0.0.2"), held,
		{Kind: "none", Machine: "cp-2", Status: StatusDone, Summary: "in sync"}, {Kind: "none", Machine: "cp-3", Status: StatusDone, Summary: "in sync"}}
	var b bytes.Buffer
	if err := WriteFolded(&b, steps); err != nil {
		t.Fatal(err)
	}
	want := "plan:\n" +
		"  cp-1, worker-1 (2 machines) apply no-reboot (no reboot): +1 -1 lines\n" +
		"      note\n" +
		"      changes:\n" +
		"        a: 1 → 2\n" +
		"      --- applied\n      +++ desired\n      -a: 1\n      +a: 2\n" +
		"      warning: careful\n" +
		"      drain first\n" +
		"  worker-9             held: held by the inventory\n" +
		"  cp-2                 in sync\n" +
		"  cp-3                 in sync\n"
	if b.String() != want {
		t.Errorf("folded plan:\n%s\nwant:\n%s", b.String(), want)
	}

	// a step that differs in what is written is its own row
	other := apply("worker-2", "worker", "10.0.0.3")
	other.Warnings = []string{"another"}
	b.Reset()
	_ = WriteFolded(&b, []Step{apply("cp-1", "controlplane", "10.0.0.1"), other})
	if strings.Count(b.String(), "apply no-reboot") != 2 {
		t.Errorf("steps with different warnings folded:\n%s", b.String())
	}

	// past 50 steps, the done ones are counted
	var many []Step
	for i := range 60 {
		many = append(many, Step{Kind: "none", Machine: fmt.Sprintf("w-%02d", i), Status: StatusDone, Summary: "in sync"})
	}
	many = append(many, apply("cp-1", "controlplane", "10.0.0.1"))
	b.Reset()
	_ = WriteFolded(&b, many)
	if strings.Contains(b.String(), "w-00") || !strings.HasSuffix(b.String(), "  60 of 61 machines in sync\n") {
		t.Errorf("61 steps, 60 done:\n%s", b.String())
	}
}

// WriteRollout writes the ApplyPlan document: its apiVersion and kind, its
// steps in devata plan's shape, an empty list as [].
func TestWriteRollout(t *testing.T) {
	var b bytes.Buffer
	if err := WriteRollout(&b, Rollout{Command: "upgrade", Cluster: "c", Inventory: "inventory.yaml"}); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["apiVersion"] != "devata.dev/v1alpha2" || doc["kind"] != "ApplyPlan" || doc["command"] != "upgrade" {
		t.Errorf("header %v", doc)
	}
	if a, ok := doc["actions"].([]any); !ok || len(a) != 0 {
		t.Errorf("actions %v, want []", doc["actions"])
	}
	b.Reset()
	up := Step{Kind: "upgrade", Machine: "cp-1", Role: "controlplane", Status: StatusPending, By: "upgrade",
		Upgrade: &Upgrade{From: "v1.13.9", To: "v1.14.1", Image: "factory.talos.dev/metal-installer/x:v1.14.1"}}
	if err := WriteRollout(&b, Rollout{Steps: []Step{up}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"step": "upgrade"`, `"role": "controlplane"`, `"status": "pending"`, `"from": "v1.13.9"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}
}

// The numbered text plan and the runbook write a step's notes and
// warnings under it, as the folded plan does.
func TestWritersShowNotesAndWarnings(t *testing.T) {
	p := &Plan{Cluster: "c", Inventory: "inventory.yaml", Steps: []Step{{Kind: "upgrade", Machine: "cp-1", Status: StatusPending, By: "upgrade",
		Summary: "upgrade Talos", Reason: "behind", Notes: []string{"one minor release at a time"}, Warnings: []string{"it loses an extension"}}}}
	for format, want := range map[string][]string{
		FormatText:     {"one minor release at a time\n", "warning: it loses an extension\n"},
		FormatMarkdown: {"- One minor release at a time.\n", "- Warning: it loses an extension.\n"},
	} {
		var b bytes.Buffer
		if err := Write(&b, format, p, false); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s lacks %q:\n%s", format, w, b.String())
			}
		}
	}
}
