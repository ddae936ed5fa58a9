package inventory_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
)

// Groups select by the machines' own labels and role; their labels and
// taints merge under the machine's own, their patches sit between the
// role's and the machine's in the groups' order.
func TestGroupsResolve(t *testing.T) {
	inv, err := inventory.Load("testdata/valid-groups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{"cp-1": {"rack-a"}, "w-1": {"storage", "rack-a"}, "w-2": {"storage"}, "w-3": nil} {
		if got := inv.Machine(name).Groups; !slices.Equal(got, want) {
			t.Errorf("%s groups = %v, want %v", name, got, want)
		}
	}
	w1, w2 := inv.Machine("w-1"), inv.Machine("w-2")
	wantW1 := map[string]string{"node.kubernetes.io/storage": "true", "topology.kubernetes.io/zone": "rack-a", "storage.example.com/tier": "fast", "example.com/rack": "a"}
	if !maps.Equal(w1.NodeLabels(), wantW1) {
		t.Errorf("w-1 labels = %v, want %v", w1.NodeLabels(), wantW1)
	}
	if got := w2.NodeLabels()["storage.example.com/tier"]; got != "slow" {
		t.Errorf("w-2's own label must win over its group's: tier = %q", got)
	}
	wantT := map[string]string{"storage.example.com/dedicated": "true:NoSchedule", "example.com/gpu": "NoExecute"}
	if !maps.Equal(w2.NodeTaints(), wantT) {
		t.Errorf("w-2 taints = %v, want %v", w2.NodeTaints(), wantT)
	}
	if len(inv.Machine("w-3").NodeTaints()) != 0 || len(inv.Machine("w-3").NodeLabels()) != 0 {
		t.Errorf("w-3 is in no group and has no labels or taints")
	}
	if got := inv.GroupPatches(w1); !slices.Equal(got, []string{"patches/ok.yaml"}) {
		t.Errorf("w-1 group patches = %v", got)
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings: %v", inv.Warnings)
	}
}

func TestGroupSelectingNothingWarns(t *testing.T) {
	data := []byte(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster: {name: lab, endpoint: "https://10.0.0.10:6443"}
groups:
  - {name: gpu, selector: {matchLabels: {example.com/gpu: "true"}}, labels: {example.com/accel: nvidia}}
  - {name: empty, selector: {role: worker}}
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.11, installDisk: /dev/sda}
`)
	inv, err := inventory.Parse(data, "g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`g.yaml:5:17: groups[0].selector: group gpu selects no machine: check matchLabels against the machines' own labels (labels groups give are not matched)`,
		`g.yaml:6:19: groups[1].selector: group empty selects no machine: check matchLabels against the machines' own labels (labels groups give are not matched)`,
		`g.yaml:6:5: groups[1]: group empty sets no patches, labels, taints or rollout limit or order: it changes nothing`,
	}
	slices.Sort(inv.Warnings)
	if !slices.Equal(inv.Warnings, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(inv.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

// What NodeRestriction (Kubernetes v1.37.2 getForbiddenLabels) lets a kubelet set.
func TestKubeletForbiddenLabel(t *testing.T) {
	for key, forbidden := range map[string]bool{
		"node.kubernetes.io/storage":            false,
		"topology.kubernetes.io/zone":           false,
		"kubernetes.io/hostname":                false,
		"beta.kubernetes.io/arch":               false,
		"kubelet.kubernetes.io/x":               false,
		"foo.node.kubernetes.io/x":              false,
		"example.com/storage":                   false,
		"plain":                                 false,
		"node-role.kubernetes.io/worker":        true,
		"node-restriction.kubernetes.io/pool":   true,
		"a.node-restriction.kubernetes.io/pool": true,
		"kubernetes.io/role":                    true,
		"k8s.io/x":                              true,
		"sub.k8s.io/x":                          true,
	} {
		if got := inventory.KubeletForbiddenLabel(key) != ""; got != forbidden {
			t.Errorf("%s: forbidden = %t, want %t", key, got, forbidden)
		}
	}
}

// A control plane's labels and taints are Talos' to set with an admin
// certificate: NodeRestriction does not apply.
func TestControlPlaneMayCarryRestrictedLabels(t *testing.T) {
	data := []byte(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster: {name: lab, endpoint: "https://10.0.0.10:6443"}
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.11, installDisk: /dev/sda, labels: {node-restriction.kubernetes.io/x: "y"}, taints: {example.com/cp: NoSchedule}}
`)
	if _, err := inventory.Parse(data, "cp.yaml"); err != nil {
		t.Fatal(err)
	}
}

// viaKubernetes labels and taints merge as labels and taints do (a
// machine's own win over its groups'), and stay apart from those Talos
// renders.
func TestViaKubernetesResolve(t *testing.T) {
	inv, err := inventory.Load("testdata/valid-groups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		machine        string
		labels, taints map[string]string
	}{
		{"cp-1", nil, nil},
		{"w-1", map[string]string{"node-role.kubernetes.io/storage": "", "node-role.kubernetes.io/worker": ""}, map[string]string{"node-restriction.kubernetes.io/storage": "NoSchedule"}},
		{"w-2", map[string]string{"node-role.kubernetes.io/storage": "primary", "node-role.kubernetes.io/worker": ""}, map[string]string{"node-restriction.kubernetes.io/storage": "NoSchedule"}},
		{"w-3", map[string]string{"node-role.kubernetes.io/worker": ""}, map[string]string{"example.com/batch": "only:NoExecute"}},
	} {
		m := inv.Machine(tc.machine)
		if got := m.ViaKubernetesLabels(); !maps.Equal(got, tc.labels) {
			t.Errorf("%s viaKubernetes labels = %v, want %v", tc.machine, got, tc.labels)
		}
		if got := m.ViaKubernetesTaints(); !maps.Equal(got, tc.taints) {
			t.Errorf("%s viaKubernetes taints = %v, want %v", tc.machine, got, tc.taints)
		}
		for k := range m.ViaKubernetesLabels() {
			if _, ok := m.NodeLabels()[k]; ok {
				t.Errorf("%s: viaKubernetes label %s is among the labels Talos renders", tc.machine, k)
			}
		}
		for k := range m.ViaKubernetesTaints() {
			if _, ok := m.NodeTaints()[k]; ok {
				t.Errorf("%s: viaKubernetes taint %s is among the taints Talos renders", tc.machine, k)
			}
		}
	}
}
