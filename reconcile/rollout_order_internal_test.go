package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
)

// A group's rollout.order splits apply's worker batches into stages: a
// worker never shares a batch with, or goes before, one named earlier in
// its group's order; the group's unnamed workers share the last stage,
// and workers of no ordered group fill the batches as before.
func TestWorkerBatchesFollowRolloutOrder(t *testing.T) {
	var b strings.Builder
	b.WriteString(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster: {name: lab, endpoint: "https://10.0.0.10:6443"}
groups:
  - {name: storage, selector: {matchLabels: {pool: storage}}, rollout: {order: [w-3, w-0]}}
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.1, installDisk: /dev/sda}
`)
	pools := []string{"storage", "storage", "web", "storage", "storage", "web"}
	for i, p := range pools {
		fmt.Fprintf(&b, "  - {name: w-%d, role: worker, address: 10.0.1.%d, installDisk: /dev/sda, labels: {pool: %s}}\n", i, i+1, p)
	}
	inv, err := inventory.Parse([]byte(b.String()), "inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var actions []Action
	for i := range inv.Machines {
		if m := &inv.Machines[i]; !m.IsControlPlane() {
			actions = append(actions, Action{Machine: m})
		}
	}
	actions = inStageOrder(inv, actions)
	var names []string
	for _, a := range actions {
		names = append(names, a.Machine.Name)
	}
	if want := []string{"w-2", "w-3", "w-5", "w-0", "w-1", "w-4"}; !slices.Equal(names, want) {
		t.Errorf("stage order %v, want %v", names, want)
	}
	workers := []int{0, 1, 2, 3, 4, 5}
	for max, want := range map[int][]string{
		1: {"w-2", "w-3", "w-5", "w-0", "w-1", "w-4"},
		3: {"w-2 w-3 w-5", "w-0", "w-1 w-4"},
		8: {"w-2 w-3 w-5", "w-0", "w-1 w-4"},
	} {
		var got []string
		for _, batch := range workerBatches(inv, actions, workers, max) {
			var ns []string
			for _, i := range batch {
				ns = append(ns, actions[i].Machine.Name)
			}
			got = append(got, strings.Join(ns, " "))
		}
		if !slices.Equal(got, want) {
			t.Errorf("max %d: batches %q, want %q", max, got, want)
		}
	}
}
