package sim_test

import (
	"context"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
)

// The sim's kubelets apply the config's node labels, annotations and taints
// as machined's NodeApplyController does (node_apply.go): what Talos set it
// owns, recorded in the talos.dev/owned-* annotations, and it removes what
// it owns once the config drops it; what others set stays, and a value
// someone else set first is not taken over. NodeLabelsSuite,
// NodeAnnotationsSuite and NodeTaintsSuite of Talos' own API suites wait for
// exactly this.
func TestKubeletOwnsTheLabelsAnnotationsAndTaintsTalosSets(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sync := func() *corev1.Node {
		t.Helper()
		if errs := f.Sim.SyncKubelets(ctx, kc); len(errs) > 0 {
			t.Fatalf("kubelets failed to post: %v", errs)
		}
		n, err := kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	n := sync()
	if got := n.Annotations[constants.AnnotationOwnedLabels]; got != `["storage.devata.dev/longhorn","topology.kubernetes.io/zone"]` {
		t.Errorf("worker-1 owned labels %q, want the inventory's two", got)
	}
	cp, err := kc.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cp.Annotations[constants.AnnotationOwnedTaints] != `["node-role.kubernetes.io/control-plane"]` ||
		!slices.ContainsFunc(cp.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == constants.LabelNodeRoleControlPlane && t.Effect == corev1.TaintEffectNoSchedule
		}) {
		t.Errorf("cp-1 taints %v owned %q, want Talos' control-plane NoSchedule taint, owned", cp.Spec.Taints, cp.Annotations[constants.AnnotationOwnedTaints])
	}

	// others set a label of their own, and first the value of one the
	// config is about to set
	n.Labels["team"] = "storage"
	n.Labels["example.com/pre"] = "theirs"
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	c, err := f.Dialer.Client(ctx, f.Inventory.Machine("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	cfg := f.Started["worker-1"]
	applyNoReboot := func(patch string) {
		t.Helper()
		cfg = simtest.Patch(t, cfg, patch)
		if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
			t.Fatal(err)
		}
	}
	// the zone label leaves the config, two others come, with an annotation and a taint
	applyNoReboot(`machine:
  nodeLabels:
    topology.kubernetes.io/zone: {$patch: delete}
    example.com/new: "1"
    example.com/pre: "ours"
  nodeAnnotations:
    example.com/note: hello
  nodeTaints:
    example.com/dedicated: storage:NoSchedule
`)
	n = sync()
	if _, ok := n.Labels["topology.kubernetes.io/zone"]; ok {
		t.Errorf("worker-1 keeps the zone label Talos owned after the config dropped it: %v", n.Labels)
	}
	for k, want := range map[string]string{"team": "storage", "example.com/pre": "theirs", "example.com/new": "1", "storage.devata.dev/longhorn": "true"} {
		if n.Labels[k] != want {
			t.Errorf("worker-1 label %s = %q, want %q", k, n.Labels[k], want)
		}
	}
	if got := n.Annotations[constants.AnnotationOwnedLabels]; got != `["example.com/new","storage.devata.dev/longhorn"]` {
		t.Errorf("owned labels %q: a label someone else set first is not Talos'", got)
	}
	if n.Annotations["example.com/note"] != "hello" || n.Annotations[constants.AnnotationOwnedAnnotations] != `["example.com/note"]` {
		t.Errorf("annotations %v", n.Annotations)
	}
	// (the API server's TaintNodesByCondition admission adds not-ready taints
	// of its own, which Talos leaves alone)
	dedicated := func(t corev1.Taint) bool { return t.Key == "example.com/dedicated" }
	// a worker writes its Node with its kubelet's credentials, and
	// NodeRestriction refuses a node that changes its own taints: a taint
	// added to a registered worker's config stays off its Node
	// (applyTaints, kubelet_taints.go)
	if slices.ContainsFunc(n.Spec.Taints, dedicated) || n.Annotations[constants.AnnotationOwnedTaints] != "" {
		t.Errorf("worker-1 got a taint after it registered, which NodeRestriction refuses Talos: taints %v owned %q", n.Spec.Taints, n.Annotations[constants.AnnotationOwnedTaints])
	}

	// all of it leaves the config again: Talos removes what it owns
	applyNoReboot(`machine:
  nodeLabels:
    example.com/new: {$patch: delete}
    example.com/pre: {$patch: delete}
  nodeAnnotations:
    example.com/note: {$patch: delete}
  nodeTaints:
    example.com/dedicated: {$patch: delete}
`)
	n = sync()
	if _, ok := n.Labels["example.com/new"]; ok {
		t.Errorf("worker-1 keeps example.com/new: %v", n.Labels)
	}
	if n.Labels["example.com/pre"] != "theirs" || n.Labels["team"] != "storage" {
		t.Errorf("labels others set are gone: %v", n.Labels)
	}
	if _, ok := n.Annotations["example.com/note"]; ok || slices.ContainsFunc(n.Spec.Taints, dedicated) {
		t.Errorf("the annotation and taint Talos owned stay: %v %v", n.Annotations, n.Spec.Taints)
	}
	if _, ok := n.Annotations[constants.AnnotationOwnedAnnotations]; ok {
		t.Errorf("an empty owned-annotations annotation stays: %v", n.Annotations)
	}
}
