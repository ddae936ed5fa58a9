package sim_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// The config of a control plane with the CNI left to the operator (none,
// as devata's Cilium inventories have it), the Talos API reachable from
// Kubernetes and an inline manifest of three documents: a ConfigMap, a
// comment-only document Talos skips, and a List Talos unwraps.
const (
	bootstrapExtrasPatch = `cluster:
  network:
    cni:
      name: none
  inlineManifests:
    - name: extras
      contents: |
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: inline-one
          namespace: default
        data:
          a: b
        ---
        # only a comment
        ---
        apiVersion: v1
        kind: List
        items:
          - apiVersion: v1
            kind: ServiceAccount
            metadata:
              name: inline-two
              namespace: default
        ---
        apiVersion: v1
        kind: ServiceAccount
        metadata:
          name: inline-three
          namespace: extras
        ---
        apiVersion: v1
        kind: Namespace
        metadata:
          name: extras
machine:
  features:
    kubernetesTalosAPIAccess:
      enabled: true
      allowedRoles: [os:reader]
      allowedKubernetesNamespaces: [kube-system]
`
)

// manifestObjects are a control plane's Manifest resources' objects by
// manifest name, and the names its ManifestStatus gives.
func manifestObjects(t *testing.T, c *client.Client) (map[string][]*unstructured.Unstructured, []string) {
	t.Helper()

	out := manifestItems(t, c)

	st, err := safe.StateGetByID[*k8s.ManifestStatus](t.Context(), c.COSI, k8s.ManifestStatusID)
	if err != nil {
		t.Fatalf("manifest status: %v", err)
	}

	return out, st.TypedSpec().ManifestsApplied
}

// manifestItems reads every Manifest resource the machine serves, its
// objects by manifest ID in the order the resource holds them.
func manifestItems(t *testing.T, c *client.Client) map[string][]*unstructured.Unstructured {
	t.Helper()

	list, err := safe.StateList[*k8s.Manifest](t.Context(), c.COSI, resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ManifestType, "", resource.VersionUndefined))
	if err != nil {
		t.Fatalf("list manifests: %v", err)
	}

	out := map[string][]*unstructured.Unstructured{}
	for m := range list.All() {
		for _, item := range m.TypedSpec().Items {
			out[m.Metadata().ID()] = append(out[m.Metadata().ID()], &unstructured.Unstructured{Object: item.Object})
		}
	}

	return out
}

func objectNames(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+" "+strings.TrimPrefix(o.GetNamespace()+"/", "/")+o.GetName())
	}

	return out
}

// Every control plane renders the bootstrap token Secret from
// cluster.token, the CSR ClusterRoleBindings, kubeconfig-in-cluster
// (KubePrism's address, on by default) and the system:talos-nodes RBAC;
// flannel only when the CNI is flannel, the serviceaccounts.talos.dev CRD
// only with kubernetesTalosAPIAccess, an inline manifest as 99-<name>.
// The Manifest resources are the ones ManifestStatus names.
func TestBootstrapManifestsOfEveryControlPlane(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	extras := patch(t, cp, bootstrapExtrasPatch)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: extras, TalosVersion: "v1.14.1"},
	)

	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	joined(t, f, 2)

	cfg, err := configloader.NewFromBytes(cp)
	if err != nil {
		t.Fatal(err)
	}

	token := cfg.Cluster().Token()

	ms, applied := manifestObjects(t, dial(t, role.MakeSet(role.Reader), f.Machine("cp-1").Addr()))
	if ids := slices.Sorted(func(yield func(string) bool) {
		for id := range ms {
			if !yield(id) {
				return
			}
		}
	}); !slices.Equal(ids, applied) {
		t.Errorf("cp-1 serves manifests %v, its ManifestStatus names %v", ids, applied)
	}

	for name, want := range map[string][]string{
		"00-kubelet-bootstrapping-token": {"Secret kube-system/bootstrap-token-" + token.ID()},
		"01-csr-node-bootstrap":          {"ClusterRoleBinding system-bootstrap-node-bootstrapper"},
		"01-csr-approver-role-binding":   {"ClusterRoleBinding system-bootstrap-approve-node-client-csr"},
		"01-csr-renewal-role-binding":    {"ClusterRoleBinding system-bootstrap-node-renewal"},
		"05-flannel":                     {"ClusterRole flannel", "ClusterRoleBinding flannel", "ServiceAccount kube-system/flannel", "ConfigMap kube-system/kube-flannel-cfg", "DaemonSet kube-system/kube-flannel"},
		"11-kube-config-in-cluster":      {"ConfigMap kube-system/kubeconfig-in-cluster"},
		"11-talos-node-rbac-template":    {"ClusterRoleBinding system:talos-nodes", "ClusterRole system:talos-nodes"},
	} {
		if got := objectNames(ms[name]); !slices.Equal(got, want) {
			t.Errorf("cp-1 %s holds %q, want %q", name, got, want)
		}
	}

	secret := ms["00-kubelet-bootstrapping-token"][0]
	if sd, _, _ := unstructured.NestedStringMap(secret.Object, "stringData"); sd["token-id"] != token.ID() || sd["token-secret"] != token.Secret() ||
		sd["auth-extra-groups"] != "system:bootstrappers:nodes" || secret.Object["type"] != "bootstrap.kubernetes.io/token" {
		t.Errorf("the bootstrap token Secret does not carry cluster.token (type %v)", secret.Object["type"])
	}

	if kc, _, _ := unstructured.NestedString(ms["11-kube-config-in-cluster"][0].Object, "data", "kubeconfig"); !strings.Contains(kc, "server: https://127.0.0.1:7445\n") {
		t.Errorf("kubeconfig-in-cluster does not name KubePrism:\n%s", kc)
	}

	ds := ms["05-flannel"][4]
	if cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers"); len(cs) != 1 || cs[0].(map[string]any)["image"] != "ghcr.io/siderolabs/flannel:v0.27.2" {
		t.Errorf("flannel on Talos v1.11.0: containers %v, want ghcr.io/siderolabs/flannel:v0.27.2", cs)
	}

	ms2, applied2 := manifestObjects(t, admin(t, f.Machine("cp-2").Addr()))
	if _, ok := ms2["05-flannel"]; ok {
		t.Error("cp-2 renders flannel though its CNI is none")
	}

	if got := objectNames(ms2["13-talos-service-account-crd"]); !slices.Equal(got, []string{"CustomResourceDefinition serviceaccounts.talos.dev"}) {
		t.Errorf("cp-2 13-talos-service-account-crd holds %q", got)
	}

	if got := objectNames(ms2["99-extras"]); !slices.Equal(got, []string{"ConfigMap default/inline-one", "ServiceAccount default/inline-two", "ServiceAccount extras/inline-three", "Namespace extras"}) {
		t.Errorf("cp-2 99-extras holds %q", got)
	}

	if !slices.Contains(applied2, "99-extras") || !slices.Contains(applied2, "13-talos-service-account-crd") || slices.Contains(applied2, "05-flannel") {
		t.Errorf("cp-2 ManifestStatus names %v", applied2)
	}
}

// At boot Talos creates every object of every manifest (ManifestApplyController
// manifest_apply.go, through its REST mapper for any kind): the bootstrap token
// Secret (the API server keeps its stringData as data), the CRD, the
// RBAC, flannel and the inline manifest's objects, each listed in the
// inventory ConfigMap.
func TestBootApplyCreatesEveryBootstrapObject(t *testing.T) {
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: []string{"10.96.0.0/12"}})

	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: patch(t, cp, strings.Replace(bootstrapExtrasPatch, "      name: none\n", "      name: flannel\n", 1))},
	)

	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	joined(t, f, 1)

	ctx := t.Context()
	if errs := f.SyncKubelets(ctx, kc); len(errs) > 0 {
		t.Fatalf("kubelets: %v", errs)
	}

	cfg, err := configloader.NewFromBytes(cp)
	if err != nil {
		t.Fatal(err)
	}

	token := cfg.Cluster().Token()

	s, err := kc.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+token.ID(), metav1.GetOptions{})
	if err != nil || s.Type != "bootstrap.kubernetes.io/token" || string(s.Data["token-secret"]) != token.Secret() || s.Annotations["config.k8s.io/owning-inventory"] == "" {
		t.Errorf("bootstrap token Secret: %v (type %q, annotations %v)", err, s.Type, s.Annotations)
	}

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crd).Get(ctx, "serviceaccounts.talos.dev", metav1.GetOptions{}); err != nil {
		t.Errorf("Talos ServiceAccount CRD: %v", err)
	}

	for _, name := range []string{"system-bootstrap-node-bootstrapper", "system-bootstrap-approve-node-client-csr", "system-bootstrap-node-renewal", "system:talos-nodes", "flannel"} {
		if _, err := kc.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("ClusterRoleBinding %s: %v", name, err)
		}
	}

	if _, err := kc.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-flannel", metav1.GetOptions{}); err != nil {
		t.Errorf("flannel DaemonSet: %v", err)
	}

	for _, get := range []func() error{
		func() error {
			_, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeconfig-in-cluster", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := kc.CoreV1().ConfigMaps("default").Get(ctx, "inline-one", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := kc.CoreV1().ServiceAccounts("default").Get(ctx, "inline-two", metav1.GetOptions{})
			return err
		},
		// listed before its Namespace: Talos creates Namespaces first
		func() error {
			_, err := kc.CoreV1().ServiceAccounts("extras").Get(ctx, "inline-three", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Error(err)
		}
	}

	inv, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "talos-bootstrap-manifests-inventory", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{"kube-system_bootstrap-token-" + token.ID() + "__Secret", "_serviceaccounts.talos.dev_apiextensions.k8s.io_CustomResourceDefinition", "default_inline-one__ConfigMap"} {
		if _, ok := inv.Data[key]; !ok {
			t.Errorf("the inventory lacks %s: %v", key, inv.Data)
		}
	}
}
