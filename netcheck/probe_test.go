package netcheck_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks/probe"
	"devata.dev/devata/drift"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/sim"
)

// probeNamespace creates deploy/netcheck-probe.yaml's namespace with the
// "default" ServiceAccount the pods run as (kube-controller-manager, which
// creates it in a real cluster, does not run in the test bed).
func probeNamespace(t *testing.T, b *bed) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe.DefaultNamespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := b.kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := b.kube.CoreV1().ServiceAccounts(ns.Name).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// probePass runs one drift pass with the probe while the simulated kubelets
// run (they run the probe pods), and checks no probe pod is left.
func probePass(t *testing.T, b *bed, kube kubernetes.Interface, timeout time.Duration) map[string]drift.Result {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); b.fleet.Sim.RunKubelets(ctx, b.kube, 100*time.Millisecond) }()
	ext := with(kube, netcheck.Options{Exec: b.exec, Probe: &probe.Options{Timeout: timeout}})
	rs := b.driftWith(t, ext, []string{netcheck.CheckProbe}, 1)
	stop()
	<-done
	left, err := b.kube.CoreV1().Pods(probe.DefaultNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + probe.Label})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 {
		t.Errorf("%d probe pods left behind, e.g. %s", len(left.Items), left.Items[0].Name)
	}
	return rs
}

func probeTests(t *testing.T, b *bed, machinesOf []string) {
	probeNamespace(t, b)

	t.Run("healthy fleet connects from both networks", func(t *testing.T) {
		rs := probePass(t, b, b.kube, 20*time.Second)
		for _, m := range machinesOf {
			expectRung(t, rs, m+"/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusInSync, "", "")
			ev := strings.Join(rs[m+"/"+netcheck.CheckProbe].Evidence, "\n")
			for _, want := range []string{"host network on node " + m + ": connected to 10.96.0.1:443", "pod network on node " + m + ": connected to 10.96.0.1:443"} {
				if !strings.Contains(ev, want) {
					t.Errorf("%s evidence lacks %q:\n%s", m, want, ev)
				}
			}
		}
	})

	t.Run("pod network broken where every other rung is fine", func(t *testing.T) {
		defer b.fault(t, "worker-1", func(f *sim.Faults) { f.CiliumPodNetworkBroken = true })()
		rs := probePass(t, b, b.kube, 20*time.Second)
		expectRung(t, rs, "worker-1/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusDrifted,
			"from the pod network on node worker-1, 10.96.0.1:443 (Service default/kubernetes) did not accept a connection: TIMEOUT (exit 1)", "cilium-dbg monitor --type drop")
		if ev := strings.Join(rs["worker-1/"+netcheck.CheckProbe].Evidence, "\n"); !strings.Contains(ev, "host network on node worker-1: connected") {
			t.Errorf("the host-network probe should still pass: %s", ev)
		}
		expectRung(t, rs, "worker-2/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusInSync, "", "")
	})

	t.Run("kube-proxy replacement off: nothing routes the ClusterIP", func(t *testing.T) {
		defer apply(t, b.dyn, "cnc-kpr-off-worker-2.yaml")()
		rs := probePass(t, b, b.kube, 20*time.Second)
		expectRung(t, rs, "worker-2/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusDrifted,
			"from the host network on node worker-2, 10.96.0.1:443 (Service default/kubernetes) did not accept a connection: TIMEOUT (exit 1); from the pod network", "")
	})

	t.Run("kubelet down: the probe gives up, Unknown", func(t *testing.T) {
		defer b.fault(t, "worker-2", func(f *sim.Faults) { f.Unreachable = true })()
		rs := probePass(t, b, b.kube, 2*time.Second)
		expectRung(t, rs, "worker-2/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusUnknown, "did not finish within 2s (never started: is the node's kubelet up?)", "get events")
		expectRung(t, rs, "worker-1/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusInSync, "", "")
	})

	t.Run("no permission to create pods is Unknown, not Drifted", func(t *testing.T) {
		_, kube := leastPrivileged(t, b, "netcheck-probe-least-privilege")
		rs := probePass(t, b, kube, 20*time.Second)
		for _, m := range machinesOf {
			expectRung(t, rs, m+"/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusUnknown, "forbidden", "kubectl apply -f deploy/netcheck-probe.yaml")
		}
		defer bindDeployRBAC(t, b, "netcheck-probe-least-privilege", "Role", "netcheck-probe.yaml")()
		waitAllowed(t, kube, authv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: probe.DefaultNamespace})
		rs = probePass(t, b, kube, 20*time.Second)
		for _, m := range machinesOf {
			expectRung(t, rs, m+"/"+netcheck.CheckProbe, drift.RungTransaction, drift.StatusInSync, "", "")
		}
	})

	t.Run("a cancelled probe still deletes its pod", func(t *testing.T) {
		// No kubelet runs the pod; the caller gives up after 300ms.
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		r := netcheck.Probe(ctx, b.kube, probe.Options{}, "cp-1", "10.96.0.1:443", false)
		if r.Err == nil || r.Pod == "" {
			t.Fatalf("want a created pod and an error, got %+v", r)
		}
		_, name, _ := strings.Cut(r.Pod, "/")
		if _, err := b.kube.CoreV1().Pods(probe.DefaultNamespace).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("probe pod %s still there after the probe returned: %v", r.Pod, err)
		}
	})

	t.Run("a probe pod that cannot be deleted is said, not left silently", func(t *testing.T) {
		// a user who may create and read probe pods but not delete them
		const user = "netcheck-probe-no-delete"
		cfg, err := b.env.User(user)
		if err != nil {
			t.Fatal(err)
		}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ns := probe.DefaultNamespace
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get"}}}}
		if _, err := b.kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		if _, err := b.kube.RbacV1().RoleBindings(ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAllowed(t, kube, authv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: ns})

		ctx, stop := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); b.fleet.Sim.RunKubelets(ctx, b.kube, 100*time.Millisecond) }()
		r := netcheck.Probe(t.Context(), kube, probe.Options{Timeout: 20 * time.Second}, "cp-1", "10.96.0.1:443", false)
		stop()
		<-done
		if r.Pod != "" {
			_, name, _ := strings.Cut(r.Pod, "/")
			if err := b.kube.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("clean up %s: %v", r.Pod, err)
			}
		}
		if !r.Reached || r.Err == nil || !strings.Contains(r.Err.Error(), "delete probe pod "+r.Pod) || !apierrors.IsForbidden(errors.Unwrap(r.Err)) {
			t.Errorf("a probe that connected but could not delete its pod: %+v, want Reached and the delete's Forbidden error", r)
		}
	})

	t.Run("without --probe there is no cilium-probe check", func(t *testing.T) {
		infos := drift.Infos(netcheck.Checks(b.ext().o))
		if len(infos) != 3 || slices.ContainsFunc(infos, func(i drift.Info) bool { return i.Name == netcheck.CheckProbe }) {
			t.Errorf("checks %v", infos)
		}
	})
}
