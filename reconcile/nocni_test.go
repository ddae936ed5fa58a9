package reconcile_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
)

// With cluster.network.cni none, no Node is Ready before the CNI runs, so on
// Talos MachineStatus stays not ready with only its nodeReady condition unmet
// (internal/app/machined/pkg/controllers/runtime/machine_status.go, the
// nodeReady check last). A rollout must converge on Talos and etcd there, and
// say why it did not wait for ready: no CNI runs in the cluster, read there
// (reconcile/cni.go). The Nodes live in a real kube-apiserver and are read
// back through client-go.
func TestRolloutConvergesWhileNodesWaitForTheCNI(t *testing.T) {
	h := newHarness(t)
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: h.f.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if errs := h.f.Sim.SyncKubelets(ctx, kc); len(errs) > 0 {
		t.Fatalf("kubelets: %v", errs)
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 5 {
		t.Fatalf("%d Nodes, want 5", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionFalse {
				t.Fatalf("Node %s is Ready %s before any CNI runs", n.Name, c.Status)
			}
		}
	}

	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(plan.Pending()); n != 2 {
		t.Fatalf("%d actions, want 2: %v", n, plan.Actions)
	}
	r := h.rollout(nil)
	r.Kube = kc
	out := r.Run(ctx, plan)
	log := strings.Join(h.lines, "\n")
	if !out.Done() || len(out.Converged) != 2 {
		t.Fatalf("rollout did not converge while Nodes wait for the CNI: %+v\n%s", out, log)
	}
	for _, name := range []string{"worker-1", "cp-2"} {
		want := name + `: running; not ready only because its Node is not (nodeReady: node "` + name + `" is not ready): no CNI runs in the cluster (no cilium agent pod Ready, no Node Ready)`
		if !strings.Contains(log, want) {
			t.Errorf("the rollout does not say why it did not wait for ready on %s; want %q in:\n%s", name, want, log)
		}
	}
}
