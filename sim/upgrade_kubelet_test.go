package sim_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// In stage upgrading machined cordons the Node (node_cordoned_spec.go,
// node_apply.go ApplyCordoned) and uncordons it once the machine boots.
func TestUpgradeCordonsTheNode(t *testing.T) {
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: configsServiceSubnets})

	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	f := controlPlanes(t, 1, sim.Options{UpgradeDelay: time.Second})
	joined(t, f, 1)

	ctx := t.Context()
	node := func() *corev1.Node {
		t.Helper()

		if errs := f.SyncKubelets(ctx, kc); len(errs) > 0 {
			t.Fatalf("kubelets: %v", errs)
		}

		n, err := kc.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		return n
	}

	if n := node(); n.Spec.Unschedulable {
		t.Fatalf("w-1 cordoned before the upgrade: %+v", n.Spec)
	}

	c := admin(t, f.Machine("w-1").Addr())
	if _, err := upgrade(t, c, &machine.UpgradeRequest{Image: installer1110}); err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	if n := node(); !n.Spec.Unschedulable || n.Annotations["talos.dev/cordoned"] != "true" {
		t.Errorf("w-1 upgrading: unschedulable %t, annotations %v; want cordoned by Talos", n.Spec.Unschedulable, n.Annotations)
	}

	until(t, "w-1 back on v1.11.0", func() (bool, error) {
		got, err := tag(t, c)

		return got == "v1.11.0", err
	})

	if n := node(); n.Spec.Unschedulable || n.Annotations["talos.dev/cordoned"] != "" {
		t.Errorf("w-1 after the upgrade: unschedulable %t, annotations %v; want uncordoned", n.Spec.Unschedulable, n.Annotations)
	}
}
