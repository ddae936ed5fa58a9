package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
)

// devata plan shows each group's rollout.order (issue 36): the named
// machines in their order, then the group's others, in text, markdown
// and JSON; an order naming a machine the group does not select is
// refused before anything is observed, with the file, line and field.
func TestPlanShowsTheRolloutOrder(t *testing.T) {
	const group = "groups:\n  - name: workers\n    selector: {role: worker}\n    rollout: {order: [worker-2]}\nmachines:\n"
	sf := startSim(t, simtest.Options{Bootstrap: true, EditInventory: func(s string) string {
		return strings.Replace(s, "\nmachines:\n", "\n"+group, 1)
	}})
	r := devata(t, nil, "plan", "--config", sf.settings)
	show(t, r)
	lacks(t, "plan", r.stdout, "rollout order of group workers (each waits until those before it of its role are done; control planes first): worker-2, then worker-1")
	r = devata(t, nil, "plan", "-o", "markdown", "--config", sf.settings)
	lacks(t, "plan -o markdown", r.stdout, "## Rollout order", "- group workers: worker-2, then worker-1")
	r = devata(t, nil, "plan", "-o", "json", "--config", sf.settings)
	var doc struct {
		RolloutOrders []struct {
			Group       string
			Order, Rest []string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	if len(doc.RolloutOrders) != 1 || doc.RolloutOrders[0].Group != "workers" ||
		!slices.Equal(doc.RolloutOrders[0].Order, []string{"worker-2"}) || !slices.Equal(doc.RolloutOrders[0].Rest, []string{"worker-1"}) {
		t.Errorf("rolloutOrders = %+v, want workers: [worker-2], rest [worker-1]", doc.RolloutOrders)
	}

	raw, err := os.ReadFile(sf.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sf.Inventory.Path, []byte(strings.Replace(string(raw), "order: [worker-2]", "order: [worker-2, cp-1]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, "plan", "--config", sf.settings)
	if r.code == 0 || !strings.Contains(r.err, "groups[0].rollout.order[1]: machine cp-1 is not in group workers") || !strings.Contains(r.err, "inventory.yaml:") {
		t.Errorf("plan with cp-1 in the workers' order: exit %d, want the field named with its file and line\n%s", r.code, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Errorf("plan applied %d configs", applies)
	}
}
