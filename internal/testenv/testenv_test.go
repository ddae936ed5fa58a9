package testenv_test

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"devata.dev/devata/internal/testenv"
)

func TestStart(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("version", func(t *testing.T) {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != testenv.KubernetesVersion || v.Major != "1" || v.Minor != "37" {
			t.Errorf("server version = %s (major %q, minor %q), want %s", v.GitVersion, v.Major, v.Minor, testenv.KubernetesVersion)
		}
	})

	t.Run("namespace", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "devata-test", Labels: map[string]string{"devata.dev/test": "yes"}}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels["devata.dev/test"] != "yes" || got.UID == "" {
			t.Errorf("namespace read back = %+v", got.ObjectMeta)
		}
	})

	t.Run("node", func(t *testing.T) {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
			Spec:       corev1.NodeSpec{PodCIDR: "10.244.0.0/24"},
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Status is a subresource: it is written apart from the object.
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		got, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Status = node.Status
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}

		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/control-plane"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("nodes = %d, want 1", len(list.Items))
		}
		n := list.Items[0]
		if n.Name != "cp-1" || n.Spec.PodCIDR != "10.244.0.0/24" || len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Status != corev1.ConditionTrue {
			t.Errorf("node read back: name %s, podCIDR %s, conditions %+v", n.Name, n.Spec.PodCIDR, n.Status.Conditions)
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		fi, err := os.Stat(env.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("kubeconfig mode = %v, want 0600", perm)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("through kubeconfig: %v", err)
		}
	})
}
