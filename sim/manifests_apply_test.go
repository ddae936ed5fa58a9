package sim_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// configsServiceSubnets is the service range of baseConfigs' configs
// (machinery's default): a test's API server runs on it, as a Talos control
// plane gives its kube-apiserver the config's (v1.14.1 controllers/k8s
// control_plane_final.go), so that the kube-dns Service Talos pins fits.
var configsServiceSubnets = []string{constants.DefaultIPv4ServiceCIDR}

// lockedBuffer is a log sink the fleet's goroutines write to while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.String()
}

// Talos pins the kube-dns Service's ClusterIP to the tenth address of the
// service subnet (k8stemplates coredns.go CoreDNSService,
// k8s.DNSServiceAddrs: 10.96.0.10) and ManifestApplyController (v1.14.1
// controllers/k8s/manifest_apply.go apply) applies it as it is: an API
// server whose --service-cluster-ip-range does not hold it (envtest's own
// 10.0.0.0/24 here) refuses the Service, the other objects are applied,
// and the controller fails and runs again, never picking another address.
// The sim does the same: kube-dns stays absent round after round, the
// error says which object and why, the failure is logged once as
// cosi-project/runtime logs a failed controller, and no ManifestStatus is
// written (Run writes it only after an apply that succeeded).
func TestKubeDNSRefusedByTheServiceRangeStaysAbsent(t *testing.T) {
	env := testenv.Start(t) // envtest's service range, not the config's 10.96.0.0/12
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	var logs lockedBuffer

	cp, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Machines: []sim.MachineSpec{{Name: "cp-1", Role: "controlplane", Config: cp}, {Name: "w-1", Config: wk}},
	})

	if err := admin(t, f.Machine("cp-1").Addr()).Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	var failure error

	eventually(t, "the bootstrap manifests' apply to fail on kube-dns", func() error {
		failure = f.SyncKubelets(t.Context(), kc)["addons"]
		if failure == nil {
			return fmt.Errorf("no add-on error yet")
		}

		return nil
	})

	for _, want := range []string{"error creating /v1/Service/kube-dns", "10.96.0.10", "does not match the current range"} {
		if !strings.Contains(failure.Error(), want) {
			t.Errorf("the apply's error %q does not say %q", failure, want)
		}
	}

	// The controller runs again; the Service is refused again.
	for range 3 {
		if err := f.SyncKubelets(t.Context(), kc)["addons"]; err == nil || !strings.Contains(err.Error(), "kube-dns") {
			t.Fatalf("a later round: %v, want the same refusal", err)
		}
	}

	if svc, err := kc.CoreV1().Services("kube-system").Get(t.Context(), "kube-dns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("kube-dns Service: %v, ClusterIP %v; want none (nothing picks another address)", err, svc.Spec.ClusterIPs)
	}

	// The rest of the manifests were applied and listed; kube-dns was not.
	if _, err := kc.AppsV1().Deployments("kube-system").Get(t.Context(), "coredns", metav1.GetOptions{}); err != nil {
		t.Errorf("the coredns Deployment, applied before the Service: %v", err)
	}

	inv, err := kc.CoreV1().ConfigMaps("kube-system").Get(t.Context(), "talos-bootstrap-manifests-inventory", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if _, ok := inv.Data["kube-system_coredns_apps_Deployment"]; !ok {
		t.Errorf("the inventory does not list the coredns Deployment: %v", inv.Data)
	}

	if _, ok := inv.Data["kube-system_kube-dns__Service"]; ok {
		t.Errorf("the inventory lists the kube-dns Service the API server refused: %v", inv.Data)
	}

	c := dial(t, role.MakeSet(role.Reader), f.Machine("cp-1").Addr())

	list, err := safe.StateList[*k8s.ManifestStatus](t.Context(), c.COSI, resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ManifestStatusType, "", resource.VersionUndefined))
	if err != nil {
		t.Fatal(err)
	}

	if list.Len() != 0 {
		t.Errorf("ManifestStatus %v while the apply fails, want none", list.Get(0).TypedSpec().ManifestsApplied)
	}

	text := logs.String()
	if n := strings.Count(text, "controller failed"); n != 1 || !strings.Contains(text, "controller=k8s.ManifestApplyController") || !strings.Contains(text, "kube-dns") {
		t.Errorf("the fleet's log, want one controller failure of k8s.ManifestApplyController naming kube-dns (%d):\n%s", n, text)
	}
}
