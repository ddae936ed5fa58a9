package reconcile_test

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/reconcile"
)

// An inline or extra manifest may list a custom resource before its CRD
// and objects before their Namespace; talosctl upgrade-k8s applies them
// anyway, in fluxcd's stages (CRDs, Namespaces and ClusterRoles first and
// waited for, then ConfigMaps and Secrets, then the rest, each sorted by
// kind), and so does devata's sync, against a real kube-apiserver. A dry
// run of such a set reports what it would create instead of failing on
// the kind or Namespace that does not exist yet.
func TestSyncManifestsAppliesInTalosctlsStages(t *testing.T) {
	env := testenv.Start(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)

	objs := func(suffix string) []*unstructured.Unstructured {
		group := suffix + ".example.devata.dev"
		ns := "shop-" + suffix
		u := func(o map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: o} }
		return []*unstructured.Unstructured{
			u(map[string]any{"apiVersion": group + "/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "namespace": ns}, "spec": map[string]any{"size": int64(3)}}),
			u(map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "shop", "namespace": ns},
				"spec": map[string]any{
					"selector": map[string]any{"matchLabels": map[string]any{"app": "shop"}},
					"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "shop"}},
						"spec": map[string]any{"containers": []any{map[string]any{"name": "shop", "image": "registry.k8s.io/pause:3.10"}}}},
				}}),
			u(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "shop", "namespace": ns}, "data": map[string]any{"k": "v"}}),
			u(map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": "widgets." + group},
				"spec": map[string]any{
					"group": group, "scope": "Namespaced",
					"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
					"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
						"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
				}}),
			u(map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "widget-reader-" + suffix},
				"rules": []any{map[string]any{"apiGroups": []any{group}, "resources": []any{"widgets"}, "verbs": []any{"get"}}}}),
			u(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}),
		}
	}
	kinds := func(changes []reconcile.ManifestChange) []string {
		var out []string
		for _, c := range changes {
			out = append(out, c.Action+" "+strings.Fields(c.Object)[1])
		}
		return out
	}

	// the dry run of a set whose CRD and Namespace do not exist yet
	changes, err := reconcile.SyncManifests(t.Context(), kube, objs("gadgets"), true)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	want := []string{"created CustomResourceDefinition", "created Namespace", "created ClusterRole", "created ConfigMap", "created Deployment", "created Widget"}
	if got := kinds(changes); !slices.Equal(got, want) {
		t.Errorf("dry run: %v, want %v", got, want)
	}

	// a Namespace the set does not create is still an error in a dry run
	stray := objs("gadgets")[2] // the ConfigMap in shop-gadgets
	if _, err := reconcile.SyncManifests(t.Context(), kube, []*unstructured.Unstructured{stray}, true); err == nil {
		t.Error("the dry run of an object in a Namespace nothing creates passed")
	}

	changes, err = reconcile.SyncManifests(t.Context(), kube, objs("widgets"), false)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if got := kinds(changes); !slices.Equal(got, want) {
		t.Errorf("sync: %v, want %v", got, want)
	}
	if _, err := kube.AppsV1().Deployments("shop-widgets").Get(t.Context(), "shop", metav1.GetOptions{}); err != nil {
		t.Errorf("the Deployment after the sync: %v", err)
	}

	// again: nothing changes, the custom resource included
	changes, err = reconcile.SyncManifests(t.Context(), kube, objs("widgets"), false)
	if err != nil {
		t.Fatalf("second sync: %v", err)
	}
	for _, c := range changes {
		if c.Action != "unchanged" {
			t.Errorf("second sync: %s", c)
		}
	}
	if len(changes) != 6 {
		t.Errorf("second sync reported %d objects, want 6", len(changes))
	}
}
