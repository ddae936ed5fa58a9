package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/plan"
	"devata.dev/devata/sim"
)

// viaKubernetes is the inventory entry both workers get: a label
// NodeRestriction forbids a kubelet, and a taint, which Talos up to 1.13
// cannot put on a worker's Node at all.
const viaKubernetes = `    viaKubernetes: {labels: {node-role.kubernetes.io/worker: ""}, taints: {example.com/dedicated: "batch:NoSchedule"}}
`

// Labels and taints NodeRestriction keeps from a worker's kubelet, set by
// devata through the Kubernetes API (issue 36 item 2), on Talos 1.13 and
// 1.14: validate accepts them, a dry run writes nothing, apply sets them on
// the Node and sends Talos nothing, the configs carry neither, drift is
// clean, labels Talos and kubectl set stay; a held worker's Node is not
// written; a second apply has nothing to do; dropped from the inventory,
// they go and the others stay.
func TestViaKubernetesLabelsAndTaints(t *testing.T) {
	// 1.14 keeps the example's own Kubernetes
	for _, c := range []struct{ talos, kube string }{{"v1.13.9", "v1.36.3"}, {"v1.14.1", ""}} {
		t.Run(c.talos, func(t *testing.T) { testViaKubernetes(t, c.talos, c.kube) })
	}
}

func testViaKubernetes(t *testing.T, talosVersion, kubeVersion string) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: talosVersion, DesiredKubernetesVersion: kubeVersion, Bootstrap: true,
		EditInventory: func(s string) string {
			s = strings.Replace(s, "talosVersion: v1.14.1", "talosVersion: "+talosVersion, 1)
			for _, w := range []string{"worker-1", "worker-2"} {
				s = strings.Replace(s, "  - name: "+w+"\n", "  - name: "+w+"\n"+viaKubernetes, 1)
			}
			return s
		}})
	holdInInventory(t, sf, "worker-2", "disk swap, OPS-7")
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	ctx := context.Background()
	if err := sim.InstallCilium(ctx, k.env.Config); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"worker-1", "worker-2"} {
		k.waitNode(t, w, true)
	}
	// kubectl label node worker-1 example.com/by-kubectl=yes
	k.editNode(t, "worker-1", func(n *corev1.Node) { n.Labels["example.com/by-kubectl"] = "yes" })
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	if r := devata(t, nil, "validate", "--config", sf.settings); r.code != 0 {
		t.Fatalf("validate: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	r := devata(t, nil, "apply", "--dry-run", "--config", sf.settings, kubeconfig)
	show(t, r)
	lacks(t, "apply --dry-run", r.stdout,
		"worker-1: Node labels node-role.kubernetes.io/worker would be set through the Kubernetes API",
		"worker-1: Node taints example.com/dedicated=batch:NoSchedule would be set through the Kubernetes API")
	if r.code != 1 {
		t.Errorf("apply --dry-run with Node labels to set: exit %d, want 1", r.code)
	}
	if _, ok := k.node(t, "worker-1").Labels["node-role.kubernetes.io/worker"]; ok {
		t.Fatal("a dry run labelled worker-1's Node")
	}

	r = devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "apply", r.stdout,
		"worker-1: Node labels node-role.kubernetes.io/worker set through the Kubernetes API",
		"worker-1: Node taints example.com/dedicated=batch:NoSchedule set through the Kubernetes API",
		"worker-2: held (disk swap, OPS-7): its Node's viaKubernetes labels and taints are left alone")
	for name, calls := range applies(sf) {
		if calls != 0 {
			t.Errorf("%s: %d ApplyConfiguration calls; the Node labels and taints go to no machine", name, calls)
		}
	}
	n := k.node(t, "worker-1")
	for key, want := range map[string]string{"node-role.kubernetes.io/worker": "", "example.com/by-kubectl": "yes", "topology.kubernetes.io/zone": "rack-a"} {
		if got, ok := n.Labels[key]; !ok || got != want {
			t.Errorf("worker-1's Node: label %s=%q (present %t), want %q", key, got, ok, want)
		}
	}
	k.hasTaint(t, "worker-1", "example.com/dedicated", "batch", true)
	held := k.node(t, "worker-2")
	if _, ok := held.Labels["node-role.kubernetes.io/worker"]; ok || held.Annotations["devata.dev/owned-labels"] != "" {
		t.Errorf("held worker-2's Node was written: %v %v", held.Labels, held.Annotations)
	}
	k.hasTaint(t, "worker-2", "example.com/dedicated", "batch", false)
	for _, w := range []string{"worker-1", "worker-2"} {
		rd, err := sf.Renderer.Render(sf.Inventory.Machine(w))
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"node-role.kubernetes.io/worker", "example.com/dedicated"} {
			if strings.Contains(string(rd.Config), key) {
				t.Errorf("%s's Talos config carries %s", w, key)
			}
		}
	}
	if errs := sf.Sim.SyncKubelets(ctx, k.kc); len(errs) > 0 {
		t.Fatal(errs)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, kubeconfig, "--checks", "config,kubelet", "--machines", "worker-1,cp-1")
	if r.code != 0 {
		t.Errorf("drift after apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	// the held worker's Node lacks them, and the check says so
	r = devata(t, nil, "drift", "--config", sf.settings, kubeconfig, "--checks", "kubelet", "--machines", "worker-2", "-o", "json")
	if r.code != 1 || !strings.Contains(r.stdout, "Node lacks viaKubernetes labels node-role.kubernetes.io/worker=") {
		t.Errorf("drift of the held worker: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	r = devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig)
	if r.code != 0 || strings.Contains(r.stdout, "worker-1: Node") {
		t.Errorf("second apply: exit %d, want nothing to do\n%s%s", r.code, r.stdout, r.err)
	}

	// the loop puts back what someone took off (kubectl label node
	// worker-1 node-role.kubernetes.io/worker-), a Node write recorded in
	// the audit log; the held worker's Node stays unwritten, its drift too
	k.editNode(t, "worker-1", func(n *corev1.Node) { delete(n.Labels, "node-role.kubernetes.io/worker") })
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	loop := []string{"reconcile", "--once", "--config", sf.settings, kubeconfig, "--checks=config,kubelet", "--audit-log", audit}
	r = devata(t, nil, loop...)
	show(t, r)
	if r.code != 1 {
		t.Errorf("reconcile --once with a held worker's Node drifted: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "reconcile --once", r.stdout,
		"worker-1: Node labels node-role.kubernetes.io/worker set through the Kubernetes API",
		"worker-2: held (disk swap, OPS-7): its Node's viaKubernetes labels and taints are left alone")
	if _, ok := k.node(t, "worker-1").Labels["node-role.kubernetes.io/worker"]; !ok {
		t.Errorf("the loop did not label worker-1's Node again")
	}
	if _, ok := k.node(t, "worker-2").Labels["node-role.kubernetes.io/worker"]; ok {
		t.Errorf("the loop labelled held worker-2's Node")
	}
	rec, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"machine":"worker-1","action":"node-labels-taints","result":"started"`, `"machine":"worker-1","action":"node-labels-taints","reason":"worker-1: Node labels node-role.kubernetes.io/worker set through the Kubernetes API","result":"converged"`} {
		if !strings.Contains(string(rec), want) {
			t.Errorf("audit log lacks %s:\n%s", want, rec)
		}
	}
	for name, calls := range applies(sf) {
		if calls != 0 {
			t.Errorf("%s: %d ApplyConfiguration calls from the loop", name, calls)
		}
	}
	// unheld, the loop writes worker-2's Node and the pass ends in sync
	raw, err := os.ReadFile(sf.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	unheld := strings.Replace(string(raw), "    hold: {reason: \"disk swap, OPS-7\"}\n", "", 1)
	if err := os.WriteFile(sf.Inventory.Path, []byte(unheld), 0o644); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, loop...)
	show(t, r)
	if r.code != 0 || !strings.Contains(r.stdout, "worker-2: Node labels node-role.kubernetes.io/worker set through the Kubernetes API") {
		t.Errorf("reconcile --once, worker-2 unheld: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	k.hasTaint(t, "worker-2", "example.com/dedicated", "batch", true)

	// dropped from worker-1 (another label declared instead): drift names
	// the keys devata still owns there and the commands that remove them;
	// the dry run's JSON and devata plan show the label to set and the keys
	// to remove; apply removes them, Talos' and kubectl's stay, and drift
	// is clean again
	if raw, err = os.ReadFile(sf.Inventory.Path); err != nil {
		t.Fatal(err)
	}
	dropped := strings.Replace(string(raw), "  - name: worker-1\n"+viaKubernetes, "  - name: worker-1\n    viaKubernetes: {labels: {example.com/pool: gpu}}\n", 1)
	if dropped == string(raw) {
		t.Fatal("worker-1's viaKubernetes not found in the inventory")
	}
	if err := os.WriteFile(sf.Inventory.Path, []byte(dropped), 0o644); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, kubeconfig, "--checks", "kubelet", "--machines", "worker-1", "-o", "json")
	lacks(t, "drift after the drop", r.stdout,
		"Node carries viaKubernetes labels node-role.kubernetes.io/worker that devata set and the inventory no longer declares",
		"Node carries viaKubernetes taints example.com/dedicated that devata set and the inventory no longer declares",
		"kubectl label node worker-1 node-role.kubernetes.io/worker-",
		"kubectl taint node worker-1 example.com/dedicated:NoSchedule-")
	if r.code != 1 {
		t.Errorf("drift after the drop: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	r = devata(t, nil, "apply", "--dry-run", "-o", "json", "--config", sf.settings, kubeconfig, "--machines", "worker-1")
	var doc plan.Rollout
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("apply --dry-run -o json: %v\n%s%s", err, r.stdout, r.err)
	}
	want := []plan.NodeKeys{{Machine: "worker-1",
		Labels: plan.NodeKeyChanges{Set: []string{"example.com/pool=gpu"}, Removed: []string{"node-role.kubernetes.io/worker"}},
		Taints: plan.NodeKeyChanges{Removed: []string{"example.com/dedicated"}}}}
	if r.code != 1 || doc.Summary.ExitCode != 1 || !reflect.DeepEqual(doc.NodeKeys, want) || doc.NodeKeysProblem != "" {
		t.Errorf("apply --dry-run -o json after the drop: exit %d (summary %d), nodeKeys %+v %q, want %+v\n%s%s", r.code, doc.Summary.ExitCode, doc.NodeKeys, doc.NodeKeysProblem, want, r.stdout, r.err)
	}
	r = devata(t, nil, "plan", "--config", sf.settings, kubeconfig)
	lacks(t, "plan after the drop", r.stdout,
		"node labels and taints (viaKubernetes), by devata apply through the Kubernetes API after its rollout:",
		"     worker-1: Node labels example.com/pool=gpu would be set through the Kubernetes API",
		"     worker-1: Node labels node-role.kubernetes.io/worker would be removed: devata set them and the inventory no longer declares them",
		"     worker-1: Node taints example.com/dedicated would be removed")
	if r.code != 1 {
		t.Errorf("plan after the drop: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	if _, ok := k.node(t, "worker-1").Labels["example.com/pool"]; ok {
		t.Fatal("a dry run or plan labelled worker-1's Node")
	}
	r = devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply after the drop: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "apply after the drop", r.stdout,
		"worker-1: Node labels example.com/pool=gpu set through the Kubernetes API",
		"worker-1: Node labels node-role.kubernetes.io/worker removed: devata set them and the inventory no longer declares them",
		"worker-1: Node taints example.com/dedicated removed")
	if errs := sf.Sim.SyncKubelets(ctx, k.kc); len(errs) > 0 {
		t.Fatal(errs)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, kubeconfig, "--checks", "kubelet", "--machines", "worker-1")
	if r.code != 0 {
		t.Errorf("drift after apply removed the dropped keys: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	n = k.node(t, "worker-1")
	if _, ok := n.Labels["node-role.kubernetes.io/worker"]; ok {
		t.Errorf("worker-1's Node keeps the dropped label")
	}
	if n.Labels["example.com/by-kubectl"] != "yes" || n.Labels["topology.kubernetes.io/zone"] != "rack-a" {
		t.Errorf("worker-1's Node lost labels others set: %v", n.Labels)
	}
	k.hasTaint(t, "worker-1", "example.com/dedicated", "batch", false)
	if slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == "example.com/dedicated" }) {
		t.Errorf("worker-1's Node keeps the dropped taint")
	}

	// dropped from worker-2 too: the loop removes them (the kubelet
	// check's drift is what its own Node write fixes), audited, and the
	// pass ends in sync
	if raw, err = os.ReadFile(sf.Inventory.Path); err != nil {
		t.Fatal(err)
	}
	dropped = strings.Replace(string(raw), "  - name: worker-2\n"+viaKubernetes, "  - name: worker-2\n", 1)
	if dropped == string(raw) {
		t.Fatal("worker-2's viaKubernetes not found in the inventory")
	}
	if err := os.WriteFile(sf.Inventory.Path, []byte(dropped), 0o644); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, loop...)
	show(t, r)
	if r.code != 0 {
		t.Errorf("reconcile --once after worker-2's keys were dropped: exit %d, want 0\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "reconcile --once after the drop", r.stdout,
		"worker-2: Node labels node-role.kubernetes.io/worker removed: devata set them and the inventory no longer declares them",
		"worker-2: Node taints example.com/dedicated removed")
	if _, ok := k.node(t, "worker-2").Labels["node-role.kubernetes.io/worker"]; ok {
		t.Errorf("the loop left the dropped label on worker-2's Node")
	}
	k.hasTaint(t, "worker-2", "example.com/dedicated", "batch", false)
	if rec, err = os.ReadFile(audit); err != nil {
		t.Fatal(err)
	}
	if want := `"machine":"worker-2","action":"node-labels-taints","reason":"worker-2: Node labels node-role.kubernetes.io/worker removed`; !strings.Contains(string(rec), want) {
		t.Errorf("audit log lacks %s:\n%s", want, rec)
	}
}

// node reads Node name.
func (k *kube) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := k.kc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// editNode changes a Node with a patch, as kubectl label and kubectl
// taint do (taint sends this two-way strategic merge patch from the Node
// read to the Node edited; label a JSON merge patch of the same change):
// no resourceVersion, so the sim's kubelets posting meanwhile do not make
// it a Conflict (an Update did, once, in CI).
func (k *kube) editNode(t *testing.T, name string, edit func(*corev1.Node)) {
	t.Helper()
	was := k.node(t, name)
	is := was.DeepCopy()
	edit(is)
	before, err := json.Marshal(was)
	if err != nil {
		t.Fatal(err)
	}
	after, err := json.Marshal(is)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(before, after, corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.kc.CoreV1().Nodes().Patch(context.Background(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch Node %s: %v", name, err)
	}
}
