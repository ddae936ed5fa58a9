package inventory_test

import (
	"testing"

	"devata.dev/devata/inventory"
)

// A group's rollout.order gives its machines stages: the named ones in
// their order, the rest of the group after the last; machines wait only
// for earlier stages of their own group and role.
func TestRolloutStages(t *testing.T) {
	data := []byte(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster: {name: lab, endpoint: "https://10.0.0.10:6443"}
groups:
  - name: storage
    selector: {matchLabels: {disk: ssd}}
    rollout: {order: [w-2, cp-1, w-1]}
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.11, installDisk: /dev/sda, labels: {disk: ssd}}
  - {name: w-1, role: worker, address: 10.0.0.21, installDisk: /dev/sda, labels: {disk: ssd}}
  - {name: w-2, role: worker, address: 10.0.0.22, installDisk: /dev/sda, labels: {disk: ssd}}
  - {name: w-3, role: worker, address: 10.0.0.23, installDisk: /dev/sda, labels: {disk: ssd}}
  - {name: w-4, role: worker, address: 10.0.0.24, installDisk: /dev/sda, labels: {disk: ssd}}
  - {name: w-5, role: worker, address: 10.0.0.25, installDisk: /dev/sda}
`)
	inv, err := inventory.Parse(data, "o.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"w-2": 0, "cp-1": 1, "w-1": 2, "w-3": 3, "w-4": 3} {
		g, stage, ok := inv.RolloutStage(inv.Machine(name))
		if !ok || g != "storage" || stage != want {
			t.Errorf("%s: stage %s/%d %t, want storage/%d", name, g, stage, ok, want)
		}
	}
	if _, _, ok := inv.RolloutStage(inv.Machine("w-5")); ok {
		t.Error("w-5 is in no group with an order, yet has a stage")
	}
	m := inv.Machine
	for _, c := range []struct {
		m, e string
		want bool
	}{
		{"w-1", "w-2", true}, {"w-3", "w-1", true}, {"w-3", "w-2", true},
		{"w-2", "w-1", false}, {"w-3", "w-4", false}, // one stage: no wait
		{"w-1", "cp-1", false}, {"cp-1", "w-2", false}, // roles never wait on each other here
		{"w-5", "w-2", false}, {"w-2", "w-5", false},
	} {
		if got := inv.RolloutAfter(m(c.m), m(c.e)); got != c.want {
			t.Errorf("%s after %s = %t, want %t", c.m, c.e, got, c.want)
		}
	}
}
