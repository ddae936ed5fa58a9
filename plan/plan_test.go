package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/drift"
)

func TestStepLine(t *testing.T) {
	for _, c := range []struct{ machine, what, want string }{
		{"", "render configs", "==> render configs"},
		{"cp-1", "apply (no-reboot): +1 -1 lines", "==> cp-1: apply (no-reboot): +1 -1 lines"},
	} {
		if got := StepLine(c.machine, c.what); got != c.want {
			t.Errorf("StepLine(%q, %q) = %q, want %q", c.machine, c.what, got, c.want)
		}
	}
	var formats, lines []string
	say := func(format string, args ...any) {
		formats, lines = append(formats, format), append(lines, fmt.Sprintf(format, args...))
	}
	Say(say, "worker-1", "drain %s (%d%%)", "Node worker-1", 50)
	// the line reaches say formatted once: a "%" in it is not read again
	if want := []string{"==> worker-1: drain Node worker-1 (50%)"}; !slices.Equal(lines, want) || !slices.Equal(formats, []string{"%s"}) {
		t.Errorf("Say printed %q with formats %q, want %q with %%s", lines, formats, want)
	}
}

func TestWhereAndStatus(t *testing.T) {
	p := &Plan{Steps: []Step{
		{Kind: "a", Status: StatusDone}, {Kind: "b", Status: StatusPending}, {Kind: "c", Status: StatusBlocked},
		{Kind: "d", Status: StatusPending}, {Kind: "e", Status: StatusCheck},
	}}
	kinds := func(ss []Step) (out []Kind) {
		for _, s := range ss {
			out = append(out, s.Kind)
		}
		return out
	}
	if got := kinds(p.Pending()); !slices.Equal(got, []Kind{"b", "d"}) {
		t.Errorf("Pending = %v, want [b d] in order", got)
	}
	if got := kinds(p.Blocked()); !slices.Equal(got, []Kind{"c"}) {
		t.Errorf("Blocked = %v, want [c]", got)
	}
	if got := Where([]int{1, 2, 3, 4}, func(i int) bool { return i%2 == 0 }); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("Where = %v, want [2 4]", got)
	}
}

// The three writers share one step: the text row and column, the runbook
// section, the JSON object; a Kubernetes change's steps before any
// component moves are written the same way as the plan's own.
func TestWriters(t *testing.T) {
	step := Step{Kind: "kubernetes-image-pull", Machine: "cp-1", Status: StatusPending, By: "apply",
		Summary: "pull kubelet:v1.34.1", Reason: "pulled first", Talosctl: []string{"talosctl --nodes 10.0.0.1 image pull --namespace system ghcr.io/siderolabs/kubelet:v1.34.1"},
		Evidence: []Evidence{{Rung: drift.RungResources, Observed: "seen"}}, Changes: []string{"a: `x` → ```y```"}}
	p := &Plan{Cluster: "c", Inventory: "inventory.yaml", Steps: []Step{step},
		Kubernetes: &KubernetesChange{From: "v1.33.5", To: "v1.34.1", Before: []Step{step}, Steps: []KubernetesStep{{Component: "kubelet", Machines: []string{"cp-1"}}}, Next: "kubelet on cp-1"}}

	var text bytes.Buffer
	if err := Write(&text, FormatText, p, false); err != nil {
		t.Fatal(err)
	}
	row := "pending  kubernetes-image-pull cp-1 pull kubelet:v1.34.1 (by devata apply)\n"
	if got := strings.Count(text.String(), row); got != 2 {
		t.Errorf("text has the step's row %d times, want 2 (the plan's and the Kubernetes change's):\n%s", got, text.String())
	}
	if !strings.Contains(text.String(), "  1. "+row) || !strings.Contains(text.String(), "     before any component moves:\n   - "+row) {
		t.Errorf("text numbers the plan's step and lists the change's under 'before':\n%s", text.String())
	}

	var md bytes.Buffer
	if err := Write(&md, FormatMarkdown, p, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## 1. kubernetes-image-pull cp-1 — pending\n",
		"### Before any component moves, 1. kubernetes-image-pull cp-1 — pending\n",
		"  ````text\n  a: `x` → ```y```\n  ````\n", // a fence longer than any run of backticks in it
		"> SIMULATED:",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}

	var js bytes.Buffer
	if err := Write(&js, FormatJSON, p, false); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["kind"] != "Plan" || doc["pending"] != float64(1) || doc["blocked"] != float64(0) {
		t.Errorf("JSON header %v %v %v, want Plan, 1 pending, 0 blocked", doc["kind"], doc["pending"], doc["blocked"])
	}
	if _, ok := doc["simulated"]; ok {
		t.Error("JSON says simulated for a plan of real machines")
	}
	a := doc["actions"].([]any)[0].(map[string]any)
	if a["step"] != "kubernetes-image-pull" || a["machine"] != "cp-1" || a["by"] != "apply" {
		t.Errorf("JSON step %v: the kind is named step, with machine and by", a)
	}
	if before := doc["kubernetes"].(map[string]any)["before"].([]any); len(before) != 1 {
		t.Errorf("JSON kubernetes.before has %d steps, want 1", len(before))
	}

	if err := Write(&text, "yaml", p, false); err == nil || !strings.Contains(err.Error(), `unknown plan format "yaml"`) {
		t.Errorf("Write yaml: %v, want an unknown-format error", err)
	}
}
