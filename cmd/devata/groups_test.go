package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// storageGroup is issue 36's acceptance group: the workers labelled
// node.kubernetes.io/storage=true (a label NodeRestriction lets a kubelet
// set: node.kubernetes.io/ is one of its namespaces), a disk patch, a
// taint, one at a time.
const storageGroup = `groups:
  - name: storage
    selector: {matchLabels: {node.kubernetes.io/storage: "true"}, role: worker}
    patches: [DIR/storage-disk.yaml]
    labels: {storage.example.com/pool: longhorn}
    taints: {storage.example.com/dedicated: "longhorn:NoSchedule"}
    rollout: {maxUnavailable: 1}
machines:
`

// A storage group on the Talos 1.14 homelab: plan prints each machine's
// patch order; the workers, added in maintenance mode, join with the group's
// patch, label and taint, and their Nodes carry the taint (Talos 1.14's
// kubelet registers with it); the kubelet check is in sync. A taint removed
// from a worker's Node behind Talos' back stays removed (NodeRestriction
// forbids the node to put it back), and the check says so with the kubectl
// command that does.
func TestStorageGroupRendersAppliesAndTaints(t *testing.T) {
	dir, err := filepath.Abs("testdata/groups")
	if err != nil {
		t.Fatal(err)
	}
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.14.1", Bootstrap: true, Maintenance: []string{"worker-1", "worker-2"},
		EditInventory: func(s string) string {
			// the group's patch (a sysctl standing in for disk tuning) lives in testdata
			s = strings.Replace(s, "machines:\n", strings.ReplaceAll(storageGroup, "DIR", dir), 1)
			s = strings.Replace(s, "  secrets: secrets.yaml\n", "  secrets: secrets.yaml\n  readableDirs: ["+dir+"]\n", 1)
			return strings.ReplaceAll(s, `storage.devata.dev/longhorn: "true"}`, `storage.devata.dev/longhorn: "true", node.kubernetes.io/storage: "true"}`)
		}})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	r := devata(t, nil, "plan", "--config", sf.settings, kubeconfig)
	show(t, r)
	lacks(t, "plan", r.stdout,
		"patch order (cluster → role → groups in the inventory's order → machine; later wins):",
		"cp-1: cluster patches/common.yaml → role controlplane patches/controlplane.yaml → machine patches/cp-1.yaml",
		"worker-1, worker-2: cluster patches/common.yaml → role worker patches/worker.yaml → group storage "+dir+"/storage-disk.yaml",
	)

	r = devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "config"); r.code != 0 {
		t.Fatalf("config drift after apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, w := range []string{"worker-1", "worker-2"} {
		rd, err := sf.Renderer.Render(sf.Inventory.Machine(w))
		if err != nil {
			t.Fatal(err)
		}
		cfg := string(rd.Config)
		for _, want := range []string{"vm.dirty_background_ratio: \"5\"", "storage.example.com/dedicated: longhorn:NoSchedule", "storage.example.com/pool: longhorn"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("%s's config lacks %q", w, want)
			}
		}
	}
	// apply waited for each joined machine's Node, registered with its taints
	k.hasTaint(t, "worker-1", "storage.example.com/dedicated", "longhorn", true)
	k.hasTaint(t, "worker-2", "storage.example.com/dedicated", "longhorn", true)
	ctx := context.Background()
	if err := sim.InstallCilium(ctx, k.env.Config); err != nil {
		t.Fatal(err)
	}
	if errs := sf.Sim.SyncKubelets(ctx, k.kc); len(errs) > 0 {
		t.Fatal(errs)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, kubeconfig, "--checks", "kubelet")
	show(t, r)
	if r.code != 0 {
		t.Fatalf("kubelet check after apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	// kubectl taint node worker-2 storage.example.com/dedicated-
	k.editNode(t, "worker-2", func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == "storage.example.com/dedicated" })
	})
	if errs := sf.Sim.SyncKubelets(ctx, k.kc); len(errs) > 0 {
		t.Fatal(errs)
	}
	k.hasTaint(t, "worker-2", "storage.example.com/dedicated", "longhorn", false)
	r = devata(t, nil, "drift", "--config", sf.settings, kubeconfig, "--checks", "kubelet", "-o", "json")
	if r.code != 1 || !strings.Contains(r.stdout, "Node lacks taints storage.example.com/dedicated=longhorn:NoSchedule") ||
		!strings.Contains(r.stdout, "kubectl taint node worker-2 storage.example.com/dedicated=longhorn:NoSchedule") {
		t.Errorf("a worker's Node without its taint: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// hasTaint fails the test unless the Node carries (or lacks) the taint key with value.
func (k *kube) hasTaint(t *testing.T, node, key, value string, want bool) {
	t.Helper()
	n, err := k.kc.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if has := slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == key && tn.Value == value }); has != want {
		t.Errorf("Node %s: taint %s=%s present %t, want %t; taints %v", node, key, value, has, want, n.Spec.Taints)
	}
}
