package sim_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"devata.dev/devata/sim"
)

// A control plane serves the bootstrap manifests Talos' ManifestController
// renders from its config (controllers/k8s/manifest.go) as Manifest
// resources in the controlplane namespace, readable with os:reader (the
// type is not Sensitive): CoreDNS with the default image of the Talos the
// machine runs (v1.11.0: coredns v1.12.2; v1.14.1: v1.14.7), the kube-dns
// Service pinned to the service subnet's tenth address, and kube-proxy
// with the config's image only where the config enables it, beside the
// manifests every control plane renders (bootstrap token, CSR bindings,
// kubeconfig-in-cluster, node RBAC) and flannel, the default CNI
// (manifests_bootstrap_test.go looks into those). A worker renders none.
func TestBootstrapManifestResources(t *testing.T) {
	t.Parallel()

	cp, worker := baseConfigs(t)
	noProxy := patch(t, cp, "cluster:\n  proxy:\n    disabled: true\n")
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: noProxy, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "w-1", Role: "worker", Config: worker},
	)

	find := func(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
		t.Helper()

		for _, o := range objs {
			if o.GetKind() == kind {
				return o
			}
		}

		t.Fatalf("no %s among %d objects", kind, len(objs))

		return nil
	}
	image := func(o *unstructured.Unstructured) string {
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(cs) == 0 {
			return ""
		}

		img, _ := cs[0].(map[string]any)["image"].(string)

		return img
	}

	ms := manifestItems(t, dial(t, role.MakeSet(role.Reader), f.Machine("cp-1").Addr()))
	if got := slices.Sorted(func(yield func(string) bool) {
		for id := range ms {
			if !yield(id) {
				return
			}
		}
	}); !slices.Equal(got, []string{
		"00-kubelet-bootstrapping-token", "01-csr-approver-role-binding", "01-csr-node-bootstrap", "01-csr-renewal-role-binding",
		"05-flannel", "10-kube-proxy", "11-core-dns", "11-core-dns-svc", "11-kube-config-in-cluster", "11-talos-node-rbac-template",
	}) {
		t.Fatalf("cp-1 manifests %v", got)
	}

	var kinds []string
	for _, o := range ms["11-core-dns"] {
		kinds = append(kinds, o.GetKind())
	}

	if !slices.Equal(kinds, []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment"}) {
		t.Errorf("11-core-dns holds %v", kinds)
	}

	if dep := find(ms["11-core-dns"], "Deployment"); image(dep) != "registry.k8s.io/coredns/coredns:v1.12.2" || dep.GetAPIVersion() != "apps/v1" {
		t.Errorf("CoreDNS on Talos v1.11.0: %s %s, want apps/v1 and coredns v1.12.2", dep.GetAPIVersion(), image(dep))
	}

	if _, ok := find(ms["11-core-dns"], "Deployment").Object["status"]; ok {
		t.Error("a manifest object carries a status")
	}

	if ip, _, _ := unstructured.NestedString(find(ms["11-core-dns-svc"], "Service").Object, "spec", "clusterIP"); ip != "10.96.0.10" {
		t.Errorf("kube-dns clusterIP %q, want 10.96.0.10", ip)
	}

	if corefile, _, _ := unstructured.NestedString(find(ms["11-core-dns"], "ConfigMap").Object, "data", "Corefile"); !strings.Contains(corefile, "kubernetes cluster.local in-addr.arpa ip6.arpa {") {
		t.Errorf("Corefile:\n%s", corefile)
	}

	ds := find(ms["10-kube-proxy"], "DaemonSet")
	if image(ds) != "registry.k8s.io/kube-proxy:v1.34.1" {
		t.Errorf("kube-proxy image %q, want the config's registry.k8s.io/kube-proxy:v1.34.1", image(ds))
	}

	cmd, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	if c, _ := cmd[0].(map[string]any)["command"].([]any); !slices.Contains(c, any("--cluster-cidr=10.244.0.0/16")) || !slices.Contains(c, any("--proxy-mode=nftables")) {
		t.Errorf("kube-proxy command %v", c)
	}

	ms2 := manifestItems(t, admin(t, f.Machine("cp-2").Addr()))
	if _, ok := ms2["10-kube-proxy"]; ok {
		t.Error("cp-2 renders kube-proxy though its config disables it")
	}

	if img := image(find(ms2["11-core-dns"], "Deployment")); img != "registry.k8s.io/coredns/coredns:v1.14.7" {
		t.Errorf("CoreDNS on Talos v1.14.1: %s, want coredns v1.14.7", img)
	}

	if wm := manifestItems(t, admin(t, f.Machine("w-1").Addr())); len(wm) != 0 {
		t.Errorf("a worker serves manifests: %v", wm)
	}
}
