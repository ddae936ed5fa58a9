package main

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"devata.dev/devata/internal/drain"
	"devata.dev/devata/internal/simtest"
)

// Talos drains no Node on a LifecycleService upgrade, a staged upgrade or
// a rebooting apply (v1alpha1_sequencer.go in v1.14.1: only the legacy
// MachineService.Upgrade sequence runs CordonAndDrainNode), so devata
// drains before each upgrade. Here a PodDisruptionBudget that allows no
// eviction blocks the drain past --drain-timeout: the upgrade of worker-2
// is not sent, the error names the pod and its budget, and the Node is
// uncordoned again. Once the budget is gone the upgrade drains the Node
// first (the pod is evicted through the API server, the cilium-less
// DaemonSet pods and mirror pods stay), upgrades, and uncordons the Node
// once worker-2 is back. The dry run's plan says it drains, and
// --drain=false says it does not.
func TestUpgradeDrainsTheNodeFirst(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6"})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	k.waitNode(t, "worker-2", true)
	ctx := context.Background()

	if _, err := k.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs, err := k.kc.AppsV1().ReplicaSets("apps").Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web := k.pod(t, "apps", "web", "worker-2", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: new(true)}}
	})
	zero := intstr.FromInt32(0)
	if _, err := k.kc.PolicyV1().PodDisruptionBudgets("apps").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web-budget", Namespace: "apps"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig
	node := func() *corev1.Node {
		t.Helper()
		n, err := k.kc.CoreV1().Nodes().Get(ctx, "worker-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	r := devata(t, nil, "upgrade", "--machines", "worker-2", "--dry-run", "--config", sf.settings, kubeconfig)
	if !strings.Contains(r.stdout, "drain first: cordon its Node and evict its pods through the Eviction API") {
		t.Errorf("the dry run's plan does not say the upgrade drains:\n%s", r.stdout)
	}
	r = devata(t, nil, "upgrade", "--machines", "worker-2", "--dry-run", "--drain=false", "--config", sf.settings, kubeconfig)
	if !strings.Contains(r.stdout, "no drain (--drain=false)") {
		t.Errorf("the dry run with --drain=false does not say it does not drain:\n%s", r.stdout)
	}

	r = devata(t, nil, "upgrade", "--machines", "worker-2", "--yes", "--drain-timeout=2s", "--wait=1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 1 {
		t.Fatalf("upgrade against a budget: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{"the drain before its reboot did not finish within --drain-timeout 2s", "apps/web (PodDisruptionBudget apps/web-budget", "its Node is uncordoned again", "--drain=false"} {
		if !strings.Contains(r.err, want) {
			t.Errorf("the blocked upgrade's error lacks %q:\n%s", want, r.err)
		}
	}
	t.Logf("%s\n%s", r.stdout, r.err)
	if !strings.Contains(r.stdout, "failed: worker-2") {
		t.Errorf("the outcome does not name worker-2 failed:\n%s", r.stdout)
	}
	if n := sf.Sim.Machine("worker-2").Calls("Upgrade"); n != 0 {
		t.Errorf("worker-2 got %d Upgrade calls though its drain was blocked", n)
	}
	if n := node(); n.Spec.Unschedulable || n.Annotations[drain.CordonedAnnotation] != "" {
		t.Errorf("worker-2 after the blocked drain: unschedulable %t, annotations %v; want it uncordoned", n.Spec.Unschedulable, n.Annotations)
	}
	if st := k.podState(t, web); st != "running" {
		t.Errorf("pod web under its budget is %s", st)
	}

	if err := k.kc.PolicyV1().PodDisruptionBudgets("apps").Delete(ctx, "web-budget", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, "upgrade", "--machines", "worker-2", "--yes", "--wait=1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("upgrade: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	at := func(s string) int {
		t.Helper()
		i := strings.Index(r.stdout, s)
		if i < 0 {
			t.Fatalf("upgrade output lacks %q:\n%s", s, r.stdout)
		}
		return i
	}
	cordon, evicted, drained, upgrade, back, uncordon := at("==> worker-2: cordon and drain Node worker-2"), at("1 pod evicted from worker-2"),
		at("worker-2: Node worker-2 drained"), at("==> worker-2: upgrade Talos v1.10.6 → v1.11.0"), at("worker-2: runs Talos v1.11.0"), at("worker-2: Node worker-2 uncordoned")
	if cordon >= evicted || evicted >= drained || drained >= upgrade || upgrade >= back || back >= uncordon {
		t.Errorf("the upgrade does not cordon, drain, upgrade, come back and uncordon in that order:\n%s", r.stdout)
	}
	if st := k.podState(t, web); st != "gone" {
		t.Errorf("pod web after the drain is %s, want gone", st)
	}
	t.Logf("%s\n%s", r.stdout, r.err)
	if m := sf.Sim.Machine("worker-2"); m.Calls("Upgrade") != 1 || m.Observe().TalosVersion != "v1.11.0" {
		t.Errorf("worker-2: %d Upgrade calls, Talos %s", m.Calls("Upgrade"), m.Observe().TalosVersion)
	}
	if n := node(); n.Spec.Unschedulable || n.Annotations[drain.CordonedAnnotation] != "" {
		t.Errorf("worker-2 after its upgrade: unschedulable %t, annotations %v; want it uncordoned", n.Spec.Unschedulable, n.Annotations)
	}
}
