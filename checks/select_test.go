package checks_test

import (
	"fmt"
	"strings"
	"testing"

	"devata.dev/devata/checks"
	"devata.dev/devata/inventory"
)

func inventoryOf(n int) *inventory.Inventory {
	inv := &inventory.Inventory{Path: "inventory.yaml"}
	for i := range n {
		inv.Machines = append(inv.Machines, inventory.Machine{Name: fmt.Sprintf("m-%06d", i), Role: "worker"})
	}
	return inv
}

// Select keeps the inventory's order whatever the order of --machines,
// takes a name given twice once, and names the first unknown one.
func TestSelectMachines(t *testing.T) {
	inv := inventoryOf(10)
	fc := &checks.FleetCheck{Inventory: inv, Machines: []string{"m-000007", "m-000002", "m-000007"}}
	ms, _, err := fc.Select()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Name != "m-000002" || ms[1].Name != "m-000007" {
		t.Errorf("selected %v, want m-000002 then m-000007", ms)
	}
	fc.Machines = []string{"m-000001", "nope", "nada"}
	if _, _, err := fc.Select(); err == nil || !strings.Contains(err.Error(), `no machine "nope" in inventory.yaml`) {
		t.Errorf("unknown machine: %v", err)
	}
	fc.Machines = nil
	if ms, _, err := fc.Select(); err != nil || len(ms) != 10 {
		t.Errorf("no --machines: %d selected, %v", len(ms), err)
	}
}

// reconcile selects every machine it owns by name: this must stay linear
// (it was quadratic, about a minute of CPU at 100,000 machines).
func BenchmarkSelect100kByName(b *testing.B) {
	inv := inventoryOf(100000)
	var names []string
	for _, m := range inv.Machines {
		names = append(names, m.Name)
	}
	fc := &checks.FleetCheck{Inventory: inv, Machines: names}
	for b.Loop() {
		if ms, _, err := fc.Select(); err != nil || len(ms) != len(names) {
			b.Fatal(len(ms), err)
		}
	}
}
