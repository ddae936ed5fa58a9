package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/yaml"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/reconcile"
)

// talosManifests are the bootstrap manifests of a Talos v1.14.1 control
// plane with CoreDNS, kube-proxy (flag mode: no ConfigMap) and
// kubernetesTalosAPIAccess: Manifest resources in name order, each one's
// objects in the order controllers/k8s/manifest.go render lists them, as
// reconcile.BootstrapManifests returns them. Files in
// testdata/talos-v1.14.1-manifests (Talos' own template goldens).
var talosManifests = []struct{ manifest, file string }{
	{"00-kubelet-bootstrapping-token", "kubelet-bootstrapping-token"},
	{"01-csr-approver-role-binding", "csr-approver-role-binding"},
	{"01-csr-node-bootstrap", "csr-node-bootstrap"},
	{"01-csr-renewal-role-binding", "csr-renewal-role-binding"},
	{"10-kube-proxy", "kube-proxy-daemonset"},
	{"10-kube-proxy", "kube-proxy-service-account"},
	{"10-kube-proxy", "kube-proxy-cluster-role-binding"},
	{"11-core-dns", "coredns-service-account"},
	{"11-core-dns", "coredns-cluster-role"},
	{"11-core-dns", "coredns-cluster-role-binding"},
	{"11-core-dns", "coredns-configmap-cluster-domain"},
	{"11-core-dns", "coredns-deployment"},
	{"11-core-dns-svc", "coredns-service-ipv4"},
	{"11-kube-config-in-cluster", "kubeconfig-in-cluster"},
	{"11-talos-node-rbac-template", "talos-nodes-rbac-cluster-role-binding"},
	{"11-talos-node-rbac-template", "talos-nodes-rbac-cluster-role"},
	{"13-talos-service-account-crd", "talos-service-account-crd"},
}

// loadTalosManifests reads talosManifests, without status (as Talos'
// adapters/k8s/manifest.go SetObjects stores them).
func loadTalosManifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, m := range talosManifests {
		data, err := os.ReadFile(filepath.Join("testdata", "talos-v1.14.1-manifests", m.file+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", m.file, err)
		}
		delete(u.Object, "status")
		out = append(out, u)
	}
	return out
}

// The kubernetes-upgrade component, on a real kube-apiserver (with the
// service range of deploy's inventory, where Talos' kube-dns address
// fits): the reconcile ServiceAccount, bound as deploy/ binds it, syncs a
// Talos v1.14.1 control plane's bootstrap manifests with devata's own
// reconcile.SyncManifests, notes a due sync on the kube-system Namespace
// and writes a Node's labels only with the component; with it, it still
// cannot write other objects, and every rule it holds for RBAC's
// escalation check is needed.
func TestKubernetesUpgradeComponent(t *testing.T) {
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: []string{"10.96.0.0/12"}})
	ctx := t.Context()
	admin := env.Config
	adminKube := kubernetes.NewForConfigOrDie(admin)

	// deploy/ without the component, as kubectl apply -k applies it.
	applyRBAC(t, admin, buildOf(t, baseBuild))

	// The cluster as an older Talos left it at boot (ManifestApplyController
	// creates what is missing): every object of the manifests, CoreDNS and
	// kube-proxy on older images; a worker's Node.
	objs := loadTalosManifests(t)
	old := map[string]string{"coredns": "coredns/coredns:1.9.2", "kube-proxy": "k8s.gcr.io/kube-proxy:v1.26.0"}
	for _, o := range objs {
		o := o.DeepCopy()
		if image, ok := old[o.GetName()]; ok && (o.GetKind() == "Deployment" || o.GetKind() == "DaemonSet") {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			cs[0].(map[string]any)["image"] = image
			if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
				t.Fatal(err)
			}
		}
		create(t, admin, o)
	}
	if _, err := adminKube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminKube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	devata := tokenConfigOf(t, admin, "devata-reconcile")
	kube := kubernetes.NewForConfigOrDie(devata)
	note := func(ns string) error {
		_, err := kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"devata.dev/bootstrap-manifests-due":"v1.37.0"}}}`), metav1.PatchOptions{})
		return err
	}
	label := func(node string) error {
		_, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"node-role.kubernetes.io/worker":""},"annotations":{"devata.dev/owned-labels":"[\"node-role.kubernetes.io/worker\"]"}}}`), metav1.PatchOptions{})
		return err
	}

	// Without the component: each object, the note and the label are
	// refused.
	for _, o := range objs {
		if _, err := reconcile.SyncManifests(ctx, kube, []*unstructured.Unstructured{o}, false); !apierrors.IsForbidden(err) {
			t.Errorf("without the component, syncing %s %s: %v, want Forbidden", o.GetKind(), o.GetName(), err)
		}
	}
	if err := note("kube-system"); !apierrors.IsForbidden(err) {
		t.Errorf("without the component, the kube-system note: %v, want Forbidden", err)
	}
	if err := label("worker-1"); !apierrors.IsForbidden(err) {
		t.Errorf("without the component, a Node label: %v, want Forbidden", err)
	}

	// With it.
	up := buildOf(t, upgradeBuild)
	applyRBAC(t, admin, up)
	waitAllowed(t, adminKube, "devata-reconcile",
		authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "patch", Group: "apps", Resource: "deployments", Name: "coredns"},
		authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "patch", Resource: "secrets", Name: "bootstrap-token-25p8ak"},
		authorizationv1.ResourceAttributes{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "system:node-bootstrapper"},
		authorizationv1.ResourceAttributes{Verb: "watch", Resource: "pods"},
	)
	changes, err := reconcile.SyncManifests(ctx, kube, objs, false)
	if err != nil {
		t.Fatalf("with the component, the sync: %v (after %v)", err, changes)
	}
	if len(changes) != len(objs) {
		t.Fatalf("the sync reported %d changes for %d objects", len(changes), len(objs))
	}
	for _, c := range changes {
		want := "configured" // the owning-inventory annotation Talos' boot-time apply did not set
		if c.Action != want {
			t.Errorf("%s: %s, want %s", c.Object, c.Action, want)
		}
		switch c.Object {
		case "apps/v1 Deployment kube-system/coredns":
			if !slices.Equal(c.Images, []string{"coredns: coredns/coredns:1.9.2 → coredns/coredns:1.9.3"}) {
				t.Errorf("%s: images %v, want CoreDNS moved to 1.9.3", c.Object, c.Images)
			}
		case "apps/v1 DaemonSet kube-system/kube-proxy":
			if !slices.Equal(c.Images, []string{"kube-proxy: k8s.gcr.io/kube-proxy:v1.26.0 → k8s.gcr.io/kube-proxy:v1.27.0"}) {
				t.Errorf("%s: images %v, want kube-proxy moved to v1.27.0", c.Object, c.Images)
			}
		}
	}
	if d, err := adminKube.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err != nil || d.Spec.Template.Spec.Containers[0].Image != "coredns/coredns:1.9.3" {
		t.Errorf("the coredns Deployment after the sync: %v", err)
	}
	if changes, err := reconcile.SyncManifests(ctx, kube, objs, false); err != nil || slices.ContainsFunc(changes, func(c reconcile.ManifestChange) bool { return c.Action != "unchanged" }) {
		t.Errorf("a second sync: %v, %v; want every object unchanged", changes, err)
	}
	// A missing object is created by its name through server-side apply;
	// a plain create, which carries no name to authorize, is refused.
	if err := adminKube.CoreV1().ConfigMaps("kube-system").Delete(ctx, "kubeconfig-in-cluster", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := objs[slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetName() == "kubeconfig-in-cluster" })]
	if _, err := kube.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeconfig-in-cluster"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a plain create of kubeconfig-in-cluster: %v, want Forbidden", err)
	}
	if changes, err := reconcile.SyncManifests(ctx, kube, []*unstructured.Unstructured{cm}, false); err != nil || len(changes) != 1 || changes[0].Action != "created" {
		t.Errorf("syncing the deleted kubeconfig-in-cluster: %v, %v; want created", changes, err)
	}
	if err := note("kube-system"); err != nil {
		t.Errorf("with the component, the kube-system note: %v", err)
	}
	if err := label("worker-1"); err != nil {
		t.Errorf("with the component, a Node label by patch: %v", err)
	}
	// as Talos' NodeApplyController writes: get, then update with the
	// resourceVersion read
	n, err := kube.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "storage", Effect: corev1.TaintEffectNoSchedule})
	if _, err := kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Errorf("with the component, a Node taint by update: %v", err)
	}

	// What it still may not do.
	apply := func(manifest string) error {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
			t.Fatal(err)
		}
		_, err := reconcile.SyncManifests(ctx, kube, []*unstructured.Unstructured{u}, false)
		return err
	}
	create(t, admin, mustObject(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"metrics-server","namespace":"kube-system"},"spec":{"selector":{"matchLabels":{"app":"m"}},"template":{"metadata":{"labels":{"app":"m"}},"spec":{"containers":[{"name":"m","image":"registry.k8s.io/metrics-server/metrics-server:v0.8.0"}]}}}}`))
	refused := map[string]string{
		"another Deployment in kube-system":               `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"metrics-server","namespace":"kube-system"},"spec":{"selector":{"matchLabels":{"app":"m"}},"template":{"metadata":{"labels":{"app":"m"}},"spec":{"containers":[{"name":"m","image":"evil.example/m:1"}]}}}}`,
		"a new Deployment in kube-system":                 `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"evil","namespace":"kube-system"},"spec":{"selector":{"matchLabels":{"app":"e"}},"template":{"metadata":{"labels":{"app":"e"}},"spec":{"containers":[{"name":"e","image":"evil.example/e:1"}]}}}}`,
		"coredns's Deployment in another namespace":       `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"tenant"},"spec":{"selector":{"matchLabels":{"app":"e"}},"template":{"metadata":{"labels":{"app":"e"}},"spec":{"containers":[{"name":"e","image":"evil.example/e:1"}]}}}}`,
		"another ClusterRole":                             `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"admin"},"rules":[]}`,
		"a new ClusterRole":                               `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"devata-evil"},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}`,
		"system:coredns with a rule devata does not hold": `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"system:coredns"},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]}]}`,
		"a new ClusterRoleBinding":                        `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"devata-evil"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"ServiceAccount","name":"devata-reconcile","namespace":"devata"}]}`,
		"another Secret in kube-system":                   `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"bootstrap-token-abcdef","namespace":"kube-system"},"stringData":{"token-id":"abcdef"}}`,
		"another CustomResourceDefinition":                `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},"spec":{"group":"example.com","names":{"kind":"Widget","plural":"widgets"},"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object"}}}]}}`,
	}
	for what, manifest := range refused {
		if err := apply(manifest); !apierrors.IsForbidden(err) {
			t.Errorf("with the component, server-side applying %s: %v, want Forbidden", what, err)
		}
	}
	for _, ns := range []string{"default", "devata", "tenant"} {
		if err := note(ns); !apierrors.IsForbidden(err) {
			t.Errorf("with the component, annotating Namespace %s: %v, want Forbidden", ns, err)
		}
	}
	if _, err := kube.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("with the component, listing kube-system's Secrets: %v, want Forbidden", err)
	}
	if err := kube.CoreV1().Nodes().Delete(ctx, "worker-1", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("with the component, deleting a Node: %v, want Forbidden", err)
	}

	everyHeldRuleNeeded(t, admin, up, objs)
}

// everyHeldRuleNeeded syncs the manifests as a ServiceAccount bound to all
// that the component and deploy/ bind devata-reconcile to, but with one
// grant RBAC's escalation check asks for left out: one verb on one
// resource of the held ClusterRole, or bind on one of the CSR bindings'
// roles; once per such grant. Each absence must make RBAC refuse some
// object, or the component grants more than the check asks. A grant
// deploy/ gives reconcile anyway (list Pods, get Nodes, …) is held too, so
// that the component does not lean on deploy/'s reads staying: it is not
// tried.
func everyHeldRuleNeeded(t *testing.T, admin *rest.Config, up resmap.ResMap, objs []*unstructured.Unstructured) {
	ctx := t.Context()
	adminKube := kubernetes.NewForConfigOrDie(admin)
	base := map[grant]bool{}
	for _, g := range jobCalls["devata-reconcile"] {
		for _, v := range strings.Split(g.verbs, ",") {
			base[grant{g.namespace, g.group, g.resource, g.name, v}] = true
		}
	}
	// the component's two ClusterRoles, one grant a rule
	type single struct {
		role string
		g    grant
	}
	roles := []string{"devata-kubernetes-upgrade-held", "devata-kubernetes-upgrade"}
	var all, droppable []single
	for _, name := range roles {
		role := find(up, "ClusterRole", name)
		if role == nil {
			t.Fatalf("the component has no ClusterRole %s", name)
		}
		for _, r := range asSlice(field[any](t, role, "rules")) {
			r := r.(map[string]any)
			names := asSlice(r["resourceNames"])
			if len(names) == 0 {
				names = []any{""}
			}
			for _, g := range asSlice(r["apiGroups"]) {
				for _, res := range asSlice(r["resources"]) {
					for _, n := range names {
						for _, v := range asSlice(r["verbs"]) {
							one := single{name, grant{"", g.(string), res.(string), n.(string), v.(string)}}
							all = append(all, one)
							switch {
							case name == roles[0] && n != "":
								t.Errorf("held rule %v names objects: a role's rules it must cover name none", r)
							case name == roles[0] && base[one.g]:
								t.Logf("held %s: deploy/ grants it already", one.g.expand()[0])
							case name == roles[0], v == "bind":
								droppable = append(droppable, one)
							}
						}
					}
				}
			}
		}
	}
	rule := func(g grant) map[string]any {
		r := map[string]any{"apiGroups": []any{g.group}, "resources": []any{g.resource}, "verbs": []any{g.verbs}}
		if g.name != "" {
			r["resourceNames"] = []any{g.name}
		}
		return r
	}
	for i, drop := range droppable {
		sa := fmt.Sprintf("devata-reconcile-minus-%d", i)
		if _, err := adminKube.CoreV1().ServiceAccounts("devata").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// each of the component's ClusterRoles, as sa's own, without drop
		for _, name := range roles {
			var rules []any
			for _, one := range all {
				if one.role == name && one != drop {
					rules = append(rules, rule(one.g))
				}
			}
			create(t, admin, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
				"metadata": map[string]any{"name": sa + "-" + name},
				"rules":    rules,
			}})
		}
		// every binding of devata-reconcile, for sa, the component's
		// ClusterRoles replaced by sa's own
		for _, r := range up.Resources() {
			if r.GetKind() != "RoleBinding" && r.GetKind() != "ClusterRoleBinding" {
				continue
			}
			if !slices.ContainsFunc(asSlice(field[any](t, r, "subjects")), func(s any) bool { return s.(map[string]any)["name"] == "devata-reconcile" }) {
				continue
			}
			ref := field[map[string]any](t, r, "roleRef")
			if ref["kind"] == "ClusterRole" && slices.Contains(roles, ref["name"].(string)) {
				ref = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa + "-" + ref["name"].(string)}
			}
			create(t, admin, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "rbac.authorization.k8s.io/v1", "kind": r.GetKind(),
				"metadata": map[string]any{"name": r.GetName() + "-minus-" + fmt.Sprint(i), "namespace": r.GetNamespace()},
				"roleRef":  ref,
				"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": "devata"}},
			}})
		}
	}
	dc := dynamic.NewForConfigOrDie(admin)
	for i, drop := range droppable {
		sa := fmt.Sprintf("devata-reconcile-minus-%d", i)
		// the bindings are in force once what each grants is allowed
		attrs := []authorizationv1.ResourceAttributes{
			{Namespace: "kube-system", Verb: "patch", Resource: "secrets", Name: "bootstrap-token-25p8ak"},
			{Namespace: "kube-system", Verb: "patch", Group: "apps", Resource: "deployments", Name: "coredns"},
			{Verb: "get", Resource: "nodes", Name: "worker-1"},
		}
		for _, one := range all {
			if one != drop {
				attrs = append(attrs, authorizationv1.ResourceAttributes{Verb: one.g.verbs, Group: one.g.group, Resource: one.g.resource, Name: one.g.name})
			}
		}
		waitAllowed(t, adminKube, sa, attrs...)
		// RBAC checks a role's or binding's rules only when a write changes
		// it (policybased storage.go: IsOnlyMutatingGCFields lets an
		// unchanged one through): take the annotation the sync sets off the
		// roles and bindings, as they are before the first sync after
		// Talos' boot-time apply
		for _, o := range objs {
			if o.GroupVersionKind().Group != "rbac.authorization.k8s.io" {
				continue
			}
			plural := map[string]string{"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}[o.GetKind()]
			if _, err := dc.Resource(rbacv1.SchemeGroupVersion.WithResource(plural)).Patch(ctx, o.GetName(), types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"config.k8s.io/owning-inventory":null}}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		kube := kubernetes.NewForConfigOrDie(tokenConfigOf(t, admin, sa))
		changes, err := reconcile.SyncManifests(ctx, kube, objs, false)
		what := drop.g.expand()[0]
		if !apierrors.IsForbidden(err) {
			t.Errorf("without %s's %q: the sync %v, %v; want it Forbidden: the component grants what no role of the manifests asks for", drop.role, what, changes, err)
			continue
		}
		t.Logf("without %s's %q: %v", drop.role, what, err)
	}
}

// applyRBAC applies what a kustomize build holds for accounts and their
// rights (the workloads are not run here).
func applyRBAC(t *testing.T, cfg *rest.Config, res resmap.ResMap) {
	t.Helper()
	n := 0
	for _, r := range res.Resources() {
		switch r.GetKind() {
		case "Namespace", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		case "ServiceAccount":
			if r.GetApiVersion() != "v1" {
				continue // talos.dev: no CRD here
			}
		default:
			continue
		}
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		serverSideApply(t, cfg, &unstructured.Unstructured{Object: m})
		n++
	}
	if n < 12 {
		t.Fatalf("applied %d objects: the build has too little RBAC", n)
	}
}

func mustObject(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// resourceOf is u's dynamic client, found through discovery.
func resourceOf(t *testing.T, cfg *rest.Config, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	dc := dynamic.NewForConfigOrDie(cfg)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return dc.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return dc.Resource(m.Resource)
}

// create creates u as the cluster's admin (Talos' boot-time apply, or the
// test's own setup).
func create(t *testing.T, cfg *rest.Config, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := resourceOf(t, cfg, u).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// serverSideApply applies u as kubectl apply --server-side does.
func serverSideApply(t *testing.T, cfg *rest.Config, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := resourceOf(t, cfg, u).Apply(t.Context(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "kubectl", Force: true}); err != nil {
		t.Fatalf("apply %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
}

// tokenConfigOf is a client config with a fresh token of the devata
// ServiceAccount sa and nothing else, as a pod of it gets.
func tokenConfigOf(t *testing.T, admin *rest.Config, sa string) *rest.Config {
	t.Helper()
	tok, err := kubernetes.NewForConfigOrDie(admin).CoreV1().ServiceAccounts("devata").CreateToken(t.Context(), sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: admin.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}}
}

// waitAllowed waits until the API server allows the devata ServiceAccount
// sa each of attrs (RBAC reads new bindings through informers, a moment
// after they are written), as kubectl auth can-i asks.
func waitAllowed(t *testing.T, kube kubernetes.Interface, sa string, attrs ...authorizationv1.ResourceAttributes) {
	t.Helper()
	for _, a := range attrs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:devata:" + sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:devata", "system:authenticated"},
				ResourceAttributes: &a,
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s may still not %s %s %q in %q after 30 s: %s", sa, a.Verb, a.Resource, a.Name, a.Namespace, sar.Status.Reason)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
