package main

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
)

// startKubeWith starts a real API server with opts, for a fleet's kubelets.
func startKubeWith(t *testing.T, opts testenv.Options) *kube {
	t.Helper()
	env := testenv.StartWith(t, opts)
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &kube{env: env, kc: kc}
}

// kubeServiceRange is the inventories' service subnet: Talos pins the
// kube-dns Service to its tenth address (sim/manifests.go), which the
// test bed's API server must be able to give.
var kubeServiceRange = map[string]string{"service-cluster-ip-range": "10.96.0.0/12"}

// devata apply refuses a Kubernetes minor upgrade while a client still
// requests an API the target removes, as the real API server records it:
// the fleet (examples/homelab-v1.14, Talos v1.14.1) runs Kubernetes v1.36.3
// and the inventory says v1.37.0; the API server (v1.37.2 emulating 1.36,
// k8s.io/component-base compatibility, with networking.k8s.io/v1beta1 on)
// has been asked for ipaddresses in networking.k8s.io/v1beta1, which
// Kubernetes 1.37 removes (k8s.io/api networking/v1beta1
// zz_generated.prerelease-lifecycle.go: APILifecycleRemoved 1.37). apply
// exits 2 naming the API, its release and --force, and writes nothing;
// with --force the same upgrade is planned, step by step, and not refused.
func TestApplyRefusesKubernetesUpgradeWhileRemovedAPIsAreRequested(t *testing.T) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.14.1", KubernetesVersion: "v1.36.3", Bootstrap: true, RestartDelay: 200 * time.Millisecond})
	args := map[string]string{"emulated-version": "1.36", "runtime-config": "networking.k8s.io/v1beta1=true"}
	for k, v := range kubeServiceRange {
		args[k] = v
	}
	k := startKubeWith(t, testenv.Options{APIServerArgs: args})
	k.playKubelets(t, sf.Sim)
	k.waitKubelets(t, "v1.36.3")
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	dyn, err := dynamic.NewForConfig(k.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1beta1", Resource: "ipaddresses"}
	if _, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("list %s: %v", gvr, err)
	}

	r := devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	lacks(t, "refused apply", r.stdout,
		"refused: clients still request APIs that Kubernetes v1.37.0 removes (the API server's apiserver_requested_deprecated_apis): networking.k8s.io/v1beta1 ipaddresses (removed in 1.37)",
		"or pass --force (devata apply or reconcile) to upgrade anyway",
	)
	if r.code != 2 {
		t.Fatalf("refused apply: exit %d, want 2\n%s%s", r.code, r.stdout, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Fatalf("a refused upgrade applied %d configs", applies)
	}
	if got := k.nodeKubelets(t); got["cp-1"] != "v1.36.3" {
		t.Fatalf("kubelets %v after a refusal", got)
	}

	// with --force the upgrade goes ahead: the plan holds every step and no
	// refusal (a dry run; TestKubernetesUpgradeOnTalos114 takes the steps)
	r = devata(t, nil, "apply", "--dry-run", "--force", "--config", sf.settings, kubeconfig)
	show(t, r)
	lacks(t, "apply --dry-run --force", r.stdout,
		"kubernetes: v1.36.3 → v1.37.0 by devata apply, one component at a time",
		"1. kube-apiserver on cp-1, cp-2, cp-3, one at a time",
		"4. kubelet on cp-1, cp-2, cp-3, worker-1, worker-2",
		"next: kube-apiserver on cp-1",
		"why: not checked: --force upgrades without it",
		"kubernetes-image-pull worker-1, worker-2",
	)
	if r.code != 1 || strings.Contains(r.stdout, "refused") {
		t.Fatalf("apply --dry-run --force: exit %d, want 1 (pending) and no refusal\n%s%s", r.code, r.stdout, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Errorf("a dry run applied %d configs", applies)
	}
}
