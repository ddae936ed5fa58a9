package reconcile_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/reconcile"
)

// nodeWithOthers creates Node name carrying what others set: a label and a
// taint Talos' NodeApplyController owns (talos.dev/owned-*), a label and a
// taint set with kubectl, and the label devata will take over.
func nodeWithOthers(t *testing.T, kc kubernetes.Interface, name string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			"example.com/from-talos": "yes", "example.com/from-kubectl": "yes", "node-role.kubernetes.io/worker": "someone-elses",
		},
		Annotations: map[string]string{"talos.dev/owned-labels": `["example.com/from-talos"]`, "talos.dev/owned-taints": `["example.com/talos-taint"]`},
	}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: "example.com/talos-taint", Value: "t", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/kubectl-taint", Effect: corev1.TaintEffectNoExecute},
	}}}
	if _, err := kc.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, kc kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := kc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func taintSet(n *corev1.Node) []string {
	var out []string
	for _, t := range n.Spec.Taints {
		out = append(out, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	slices.Sort(out)
	return out
}

// SetNodeKeys sets the declared labels and taints on a real API server's
// Node, taking over a label someone else set to another value (and saying
// so), leaves every label and taint others set, removes only what it set
// once the declaration drops it, writes nothing the second time, survives a
// Conflict, and computes without writing in a dry run.
func TestSetNodeKeys(t *testing.T) {
	_, kc := reconcile.StartTestKube(t, nil)
	ctx := context.Background()
	nodeWithOthers(t, kc, "worker-1")
	want := reconcile.NodeKeys{
		Labels: map[string]string{"node-role.kubernetes.io/worker": "", "node-restriction.kubernetes.io/pool": "a"},
		Taints: map[string]string{"example.com/dedicated": "gpu:NoSchedule", "example.com/soft": "PreferNoSchedule"},
	}

	// a dry run says what it would do and writes nothing
	before := getNode(t, kc, "worker-1")
	c, err := reconcile.SetNodeKeys(ctx, kc, "worker-1", nil, want, true)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Changed() || getNode(t, kc, "worker-1").ResourceVersion != before.ResourceVersion {
		t.Fatalf("dry run: changed %t, resourceVersion %s → %s", c.Changed(), before.ResourceVersion, getNode(t, kc, "worker-1").ResourceVersion)
	}
	if got := strings.Join(c.Lines(true), "\n"); !strings.Contains(got, "worker-1: Node labels node-restriction.kubernetes.io/pool=a, node-role.kubernetes.io/worker would be set through the Kubernetes API") {
		t.Errorf("dry-run lines:\n%s", got)
	}

	// a stale Node (as a LIST read it before someone else wrote) meets a Conflict and is read again
	stale := before.DeepCopy()
	before.Labels["example.com/late"] = "yes"
	if _, err := kc.CoreV1().Nodes().Update(ctx, before, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err = reconcile.SetNodeKeys(ctx, kc, "worker-1", stale, want, false)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Join(c.Lines(false), "\n")
	for _, line := range []string{
		"worker-1: Node labels node-restriction.kubernetes.io/pool=a, node-role.kubernetes.io/worker set through the Kubernetes API",
		"worker-1: Node labels node-role.kubernetes.io/worker had another value, set by someone else: taken over, as the inventory's viaKubernetes declares them",
		"worker-1: Node taints example.com/dedicated=gpu:NoSchedule, example.com/soft:PreferNoSchedule set through the Kubernetes API",
	} {
		if !strings.Contains(lines, line) {
			t.Errorf("lines lack %q:\n%s", line, lines)
		}
	}
	n := getNode(t, kc, "worker-1")
	wantLabels := map[string]string{
		"example.com/from-talos": "yes", "example.com/from-kubectl": "yes", "example.com/late": "yes",
		"node-role.kubernetes.io/worker": "", "node-restriction.kubernetes.io/pool": "a",
	}
	if !maps.Equal(n.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", n.Labels, wantLabels)
	}
	// the API server's admission adds node.kubernetes.io/not-ready (TaintNodesByCondition): another's, kept
	wantTaints := []string{"example.com/dedicated=gpu:NoSchedule", "example.com/kubectl-taint=:NoExecute", "example.com/soft=:PreferNoSchedule", "example.com/talos-taint=t:NoSchedule", "node.kubernetes.io/not-ready=:NoSchedule"}
	if got := taintSet(n); !slices.Equal(got, wantTaints) {
		t.Errorf("taints %v, want %v", got, wantTaints)
	}
	if got := n.Annotations[reconcile.OwnedLabelsAnnotation]; got != `["node-restriction.kubernetes.io/pool","node-role.kubernetes.io/worker"]` {
		t.Errorf("owned labels annotation %q", got)
	}
	if n.Annotations["talos.dev/owned-labels"] != `["example.com/from-talos"]` {
		t.Errorf("Talos' annotation changed: %q", n.Annotations["talos.dev/owned-labels"])
	}

	// the second time: nothing to do, no write
	rv := n.ResourceVersion
	if c, err = reconcile.SetNodeKeys(ctx, kc, "worker-1", nil, want, false); err != nil || c.Changed() {
		t.Fatalf("second write: changed %t (%v), err %v", c.Changed(), c, err)
	}
	if getNode(t, kc, "worker-1").ResourceVersion != rv {
		t.Errorf("second write updated the Node")
	}

	// dropped from the declaration: devata's go, the others' stay
	c, err = reconcile.SetNodeKeys(ctx, kc, "worker-1", nil, reconcile.NodeKeys{Labels: map[string]string{"node-restriction.kubernetes.io/pool": "a"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Lines(false), "\n"); !strings.Contains(got, "worker-1: Node labels node-role.kubernetes.io/worker removed: devata set them and the inventory no longer declares them") ||
		!strings.Contains(got, "worker-1: Node taints example.com/dedicated, example.com/soft removed") {
		t.Errorf("removal lines:\n%s", got)
	}
	n = getNode(t, kc, "worker-1")
	delete(wantLabels, "node-role.kubernetes.io/worker")
	if !maps.Equal(n.Labels, wantLabels) {
		t.Errorf("labels after the drop %v, want %v", n.Labels, wantLabels)
	}
	if got, want := taintSet(n), []string{"example.com/kubectl-taint=:NoExecute", "example.com/talos-taint=t:NoSchedule", "node.kubernetes.io/not-ready=:NoSchedule"}; !slices.Equal(got, want) {
		t.Errorf("taints after the drop %v, want %v", got, want)
	}
	if _, ok := n.Annotations[reconcile.OwnedTaintsAnnotation]; ok {
		t.Errorf("owned-taints annotation stays with no taint owned")
	}

	// no Node: NotFound, for the caller to say pending
	if _, err := reconcile.SetNodeKeys(ctx, kc, "worker-9", nil, want, false); !apierrors.IsNotFound(err) {
		t.Errorf("a missing Node: %v, want NotFound", err)
	}
}

// An owned-keys annotation that is not a JSON list is refused with what to
// do, without quoting it.
func TestSetNodeKeysBadAnnotation(t *testing.T) {
	_, kc := reconcile.StartTestKube(t, nil)
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Annotations: map[string]string{reconcile.OwnedLabelsAnnotation: "secret-looking{"}}}
	if _, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := reconcile.SetNodeKeys(ctx, kc, "worker-1", nil, reconcile.NodeKeys{Labels: map[string]string{"a": "b"}}, false)
	if err == nil || strings.Contains(err.Error(), "secret-looking") || !strings.Contains(err.Error(), "kubectl annotate node worker-1 devata.dev/owned-labels-") {
		t.Errorf("err = %v", err)
	}
}

// NodeWriter: one LIST; a held machine's Node is not written (and said);
// a machine without a Node is pending; without a client, declared keys are
// an error and undeclared ones nothing.
func TestNodeWriterHoldsAndPending(t *testing.T) {
	_, kc := reconcile.StartTestKube(t, nil)
	ctx := context.Background()
	for _, name := range []string{"worker-1", "worker-2"} {
		if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	via := inventory.ViaKubernetes{Labels: map[string]string{"node-role.kubernetes.io/worker": ""}}
	machines := []*inventory.Machine{
		{Name: "worker-1", Role: inventory.RoleWorker, ViaKubernetes: via},
		{Name: "worker-2", Role: inventory.RoleWorker, ViaKubernetes: via, Hold: &inventory.Hold{Reason: "disk swap"}},
		{Name: "worker-3", Role: inventory.RoleWorker, ViaKubernetes: via},
		{Name: "worker-4", Role: inventory.RoleWorker},
	}
	res, err := reconcile.NodeWriter{Kube: kc}.Run(ctx, machines)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range res {
		lines = append(lines, r.Lines(false)...)
	}
	want := []string{
		"worker-1: Node labels node-role.kubernetes.io/worker set through the Kubernetes API",
		"worker-2: held (disk swap): its Node's viaKubernetes labels and taints are left alone (labels node-role.kubernetes.io/worker would be set through the Kubernetes API)",
		"worker-3: no Node registered yet: its viaKubernetes labels and taints are pending (the next devata apply, or the reconcile loop, sets them)",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if _, ok := getNode(t, kc, "worker-1").Labels["node-role.kubernetes.io/worker"]; !ok {
		t.Errorf("worker-1 not labelled")
	}
	if n := getNode(t, kc, "worker-2"); len(n.Labels) != 0 || len(n.Annotations) != 0 {
		t.Errorf("held worker-2 written: %v %v", n.Labels, n.Annotations)
	}
	if _, err := (reconcile.NodeWriter{}).Run(ctx, machines); err != reconcile.ErrNoKubeconfig {
		t.Errorf("without a client: %v", err)
	}
	if res, err := (reconcile.NodeWriter{}).Run(ctx, machines[3:]); err != nil || res != nil {
		t.Errorf("without a client, nothing declared: %v %v", res, err)
	}
}
