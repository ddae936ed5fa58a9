package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// The sim plays each node's kubelet towards a real kube-apiserver; the Node
// objects are read back through client-go.
func TestKubeletsRegisterNodesInARealAPIServer(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"worker-2"}})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// No API server runs before etcd does (its static pod needs it), so no
	// kubelet registers a Node before the bootstrap.
	if errs := f.Sim.SyncKubelets(ctx, kc); len(errs) > 0 {
		t.Fatalf("kubelets failed to post: %v", errs)
	}
	if nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("Nodes before etcd is bootstrapped: %v, %v; want none", nodes, err)
	}
	f.BootstrapEtcd(t, 3)
	if errs := f.Sim.SyncKubelets(ctx, kc); len(errs) > 0 {
		t.Fatalf("kubelets failed to post: %v", errs)
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]corev1.Node{}
	for _, n := range nodes.Items {
		byName[n.Name] = n
	}
	if len(byName) != 4 {
		t.Fatalf("%d Nodes, want 4 (worker-2 is in maintenance mode, no kubelet)", len(byName))
	}
	// cluster.network.cni is none: no Node is Ready before Cilium runs.
	w1 := byName["worker-1"]
	if ready(w1) != corev1.ConditionFalse || !strings.Contains(readyMessage(w1), "NetworkPluginNotReady") || w1.Status.NodeInfo.KubeletVersion != "v1.34.1" {
		t.Errorf("worker-1 before the CNI: ready %s (%s) kubelet %q", ready(w1), readyMessage(w1), w1.Status.NodeInfo.KubeletVersion)
	}
	// Each control plane's kubelet posts mirror pods of its static pods
	// (control_plane_static_pod.go: once its etcd is healthy).
	for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			p, err := kc.CoreV1().Pods("kube-system").Get(ctx, c+"-"+cp, metav1.GetOptions{})
			if err != nil || p.Labels["k8s-app"] != c || p.Labels["tier"] != "control-plane" || p.Spec.NodeName != cp || podReady(p) != corev1.ConditionTrue {
				t.Errorf("mirror pod %s-%s: %v %+v", c, cp, err, p)
			}
		}
	}
	// CoreDNS, from Talos' bootstrap manifests, waits for the CNI.
	dns := func() []corev1.Pod {
		t.Helper()
		dep, err := kc.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil || *dep.Spec.Replicas != 2 || dep.Labels["k8s-app"] != "kube-dns" {
			t.Fatalf("coredns Deployment: %v %+v", err, dep)
		}
		pods, err := kc.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil || len(pods.Items) != 2 {
			t.Fatalf("coredns pods: %v, %d, want 2", err, len(pods.Items))
		}
		return pods.Items
	}
	for _, p := range dns() {
		if podReady(&p) != corev1.ConditionFalse {
			t.Errorf("coredns pod %s Ready before the CNI", p.Name)
		}
	}
	if err := sim.InstallCilium(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	if errs := f.Sim.SyncKubelets(ctx, kc); len(errs) > 0 {
		t.Fatalf("kubelets failed to post: %v", errs)
	}
	if n, err := kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{}); err != nil || ready(*n) != corev1.ConditionTrue {
		t.Fatalf("worker-1 with its cilium agent running: %v %v", err, n.Status.Conditions)
	}
	for _, p := range dns() {
		if podReady(&p) != corev1.ConditionTrue {
			t.Errorf("coredns pod %s not Ready with the CNI up", p.Name)
		}
	}
	// On the inventory's service range the kube-dns Service holds the
	// address Talos pins (the tenth of 10.96.0.0/12).
	if svc, err := kc.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); err != nil || svc.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("kube-dns Service: %v %+v, want ClusterIP 10.96.0.10", err, svc)
	}
	// kube-proxy is disabled in the homelab (cluster.proxy.disabled)
	if ds, err := kc.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); err == nil {
		t.Errorf("kube-proxy DaemonSet %s exists though the config disables it", ds.Name)
	}
	if w1.Labels["topology.kubernetes.io/zone"] != "rack-a" || w1.Labels["storage.devata.dev/longhorn"] != "true" {
		t.Errorf("worker-1 lacks its inventory labels: %v", w1.Labels)
	}
	if _, ok := byName["cp-1"].Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("cp-1 lacks the control-plane role label")
	}
	if len(w1.Status.Addresses) == 0 || w1.Status.Addresses[0].Type != corev1.NodeInternalIP {
		t.Errorf("worker-1 addresses %v", w1.Status.Addresses)
	}
	if _, err := kc.CoordinationV1().Leases("kube-node-lease").Get(ctx, "cp-2", metav1.GetOptions{}); err != nil {
		t.Errorf("cp-2 node lease: %v", err)
	}

	f.Sim.Machine("worker-1").SetFaults(sim.Faults{KubeletUnhealthy: true})
	f.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	f.Sim.SyncKubelets(ctx, kc)
	for name, want := range map[string]corev1.ConditionStatus{"worker-1": corev1.ConditionFalse, "cp-3": corev1.ConditionUnknown, "cp-1": corev1.ConditionTrue} {
		n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ready(*n); got != want {
			t.Errorf("%s Ready=%s, want %s", name, got, want)
		}
	}
}

func readyMessage(n corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Message
		}
	}
	return ""
}

func podReady(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return ""
}

func ready(n corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// With kube-proxy enabled (machinery's default) Talos applies its DaemonSet
// (10-kube-proxy); the sim runs one host-network pod per posting node, and
// talosctl health reads DesiredNumberScheduled as the replica count.
func TestKubeProxyRunsWhereTheConfigEnablesIt(t *testing.T) {
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: configsServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	cp, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp}, sim.MachineSpec{Name: "w-1", Config: wk})
	if err := admin(t, f.Machine("cp-1").Addr()).Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "kube-proxy on both nodes", func() error {
		if errs := f.SyncKubelets(t.Context(), kc); len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		ds, err := kc.AppsV1().DaemonSets("kube-system").Get(t.Context(), "kube-proxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled != 2 || ds.Status.NumberReady != 2 {
			return fmt.Errorf("kube-proxy DaemonSet status %+v, want 2 desired and ready", ds.Status)
		}
		pods, err := kc.CoreV1().Pods("kube-system").List(t.Context(), metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 2 {
			return fmt.Errorf("%d kube-proxy pods, want 2", len(pods.Items))
		}
		for i := range pods.Items {
			if podReady(&pods.Items[i]) != corev1.ConditionTrue || !pods.Items[i].Spec.HostNetwork {
				return fmt.Errorf("kube-proxy pod %s not Ready on the host network", pods.Items[i].Name)
			}
		}
		return nil
	})
}
