package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
)

// Workers roll out in batches of the global limit, and never with more of
// a group's machines in one batch than its rollout.maxUnavailable.
func TestWorkerBatchesHonourGroupLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster: {name: lab, endpoint: "https://10.0.0.10:6443"}
groups:
  - {name: storage, selector: {matchLabels: {pool: storage}}, labels: {example.com/pool: storage}, rollout: {maxUnavailable: 1}}
  - {name: gpu, selector: {matchLabels: {pool: gpu}}, labels: {example.com/pool: gpu}, rollout: {maxUnavailable: 2}}
  - {name: all, selector: {role: worker}, labels: {example.com/any: "yes"}}
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.1, installDisk: /dev/sda}
`)
	pools := []string{"storage", "storage", "gpu", "storage", "gpu", "gpu", "web", "web"}
	for i, p := range pools {
		fmt.Fprintf(&b, "  - {name: w-%d, role: worker, address: 10.0.1.%d, installDisk: /dev/sda, labels: {pool: %s}}\n", i, i+1, p)
	}
	inv, err := inventory.Parse([]byte(b.String()), "inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var actions []Action
	var workers []int
	for i := range inv.Machines {
		if m := &inv.Machines[i]; !m.IsControlPlane() {
			workers = append(workers, len(actions))
			actions = append(actions, Action{Machine: m})
		}
	}
	names := func(batches [][]int) []string {
		var out []string
		for _, batch := range batches {
			var ns []string
			for _, i := range batch {
				ns = append(ns, actions[i].Machine.Name)
			}
			out = append(out, strings.Join(ns, " "))
		}
		return out
	}
	for max, want := range map[int][]string{
		1: {"w-0", "w-1", "w-2", "w-3", "w-4", "w-5", "w-6", "w-7"},
		4: {"w-0 w-2 w-4 w-6", "w-1 w-5 w-7", "w-3"},
		8: {"w-0 w-2 w-4 w-6 w-7", "w-1 w-5", "w-3"},
	} {
		got := names(workerBatches(inv, actions, workers, max))
		if !slices.Equal(got, want) {
			t.Errorf("max %d: batches %q, want %q", max, got, want)
		}
		// and none loses a machine
		if n := strings.Count(strings.Join(got, " "), "w-"); n != len(pools) {
			t.Errorf("max %d: %d machines in the batches, want %d", max, n, len(pools))
		}
	}
}
