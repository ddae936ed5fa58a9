package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// devata applies the bootstrap manifests in the order talosctl
// upgrade-k8s' server-side apply does (Talos v1.14.1
// pkg/cluster/kubernetes/talos_managed.go syncManifestsSSA →
// go-kubernetes v0.2.41 ssa.Manager.Apply → fluxcd/pkg/ssa v0.77.0
// ResourceManager.ApplyAllStaged), not in the order the Manifest
// resources list them: an inline or extra manifest may hold a custom
// resource before its CRD, or objects before their Namespace.
//
//  1. cluster definitions: CustomResourceDefinitions, Namespaces and
//     ClusterRoles (utils.IsClusterDefinition), then a wait until they
//     are ready (a CRD Established, a Namespace Active);
//  2. class definitions: every kind whose name ends in "Class"
//     (utils.IsClassDefinition), ready as soon as applied;
//  3. ConfigMaps and Secrets (talosctl's CustomStageKinds: objects that
//     name them by checksum roll after they change);
//  4. everything else.
//
// Within a stage, objects sort as fluxcd's SortableUnstructureds: by
// kind in its ReconcileOrder (kinds it does not list between its First
// and Last lists), then group and kind, namespace and name.

// manifestStage is one stage of the staged apply; ready says its objects
// are waited for before the next stage.
type manifestStage struct {
	objects []*unstructured.Unstructured
	ready   bool
}

// manifestStages splits objects into the stages above, each sorted; it
// leaves out stages with nothing in them.
func manifestStages(objects []*unstructured.Unstructured) []manifestStage {
	stages := make([]manifestStage, 4)
	stages[0].ready = true
	for _, o := range objects {
		i := 3
		switch {
		case isClusterDefinition(o):
			i = 0
		case strings.HasSuffix(o.GetKind(), "Class"):
			i = 1
		case isCustomStage(o):
			i = 2
		}
		stages[i].objects = append(stages[i].objects, o)
	}
	var out []manifestStage
	for _, s := range stages {
		if len(s.objects) == 0 {
			continue
		}
		slices.SortStableFunc(s.objects, compareForApply)
		out = append(out, s)
	}
	return out
}

// isClusterDefinition: a CRD, a Namespace or a ClusterRole.
func isClusterDefinition(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	switch {
	case isCRD(gvk):
		return true
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return true
	case gvk.Group == "rbac.authorization.k8s.io" && gvk.Kind == "ClusterRole":
		return true
	}
	return false
}

func isCRD(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition"
}

// isCustomStage: a ConfigMap or a Secret (core group).
func isCustomStage(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	return gvk.Group == "" && (gvk.Kind == "ConfigMap" || gvk.Kind == "Secret")
}

// applyFirst and applyLast are fluxcd's ReconcileOrder.
var (
	applyFirst = []string{
		"CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterClass", "RuntimeClass",
		"PriorityClass", "StorageClass", "VolumeSnapshotClass", "IngressClass", "GatewayClass",
		"ClusterRoleBinding", "ResourceQuota", "ServiceAccount", "Role", "RoleBinding",
		"ConfigMap", "Secret", "Service", "LimitRange", "Deployment", "StatefulSet", "CronJob",
		"PodDisruptionBudget",
	}
	applyLast = []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
)

// kindRank places a kind: the First list below zero in its order, the
// Last list above, every other kind at zero.
func kindRank(kind string) int {
	if i := slices.Index(applyFirst, kind); i >= 0 {
		return i - len(applyFirst)
	}
	if i := slices.Index(applyLast, kind); i >= 0 {
		return i + 1
	}
	return 0
}

func compareForApply(a, b *unstructured.Unstructured) int {
	ga, gb := a.GroupVersionKind(), b.GroupVersionKind()
	if ga.Group != gb.Group || ga.Kind != gb.Kind {
		if c := cmp.Compare(kindRank(ga.Kind), kindRank(gb.Kind)); c != 0 {
			return c
		}
		if c := cmp.Compare(ga.Group, gb.Group); c != 0 {
			return c
		}
		return cmp.Compare(ga.Kind, gb.Kind)
	}
	if c := cmp.Compare(a.GetNamespace(), b.GetNamespace()); c != 0 {
		return c
	}
	return cmp.Compare(a.GetName(), b.GetName())
}

// readyPoll is how often waitReady reads a definition's status.
const readyPoll = 250 * time.Millisecond

// waitReady waits, as long as ctx lets it, until every CRD in objs is
// Established and every Namespace Active (fluxcd's WaitForSet, kstatus
// Current); other cluster definitions are ready once applied. A CRD's
// API group is looked up again afterwards: discovery answered for it
// before it was served.
func (s *ssa) waitReady(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if !isCRD(gvk) && (gvk.Group != "" || gvk.Kind != "Namespace") {
			continue
		}
		path, err := s.path(gvk, "", o.GetName())
		if err != nil {
			return &ManifestError{Object: o, Err: err}
		}
		var last string
		for {
			st, err := s.definitionState(ctx, path, o)
			if err != nil {
				last = err.Error()
			} else if st == "" {
				break
			} else {
				last = st
			}
			select {
			case <-ctx.Done():
				return &ManifestError{Object: o, Err: fmt.Errorf("%s %s not ready before the sync's deadline: %s", gvk.Kind, o.GetName(), last)}
			case <-time.After(readyPoll):
			}
		}
	}
	return nil
}

// servedKinds are the group-versions and kind a CRD defines and serves.
func servedKinds(crd *unstructured.Unstructured) []schema.GroupVersionKind {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var out []schema.GroupVersionKind
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if served, _ := m["served"].(bool); served && name != "" {
			out = append(out, schema.GroupVersionKind{Group: group, Version: name, Kind: kind})
		}
	}
	return out
}

// definitionState reads a CRD or Namespace and says what it still waits
// for ("" when ready). A CRD is ready once Established and discovery
// serves each version it defines: discovery may have answered for its
// group before, so that is asked again.
func (s *ssa) definitionState(ctx context.Context, path string, o *unstructured.Unstructured) (string, error) {
	gvk := o.GroupVersionKind()
	raw, err := s.kube.Discovery().RESTClient().Get().AbsPath(path).SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		return "", apiAnswer(raw, err)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(raw); err != nil {
		return "", err
	}
	if !isCRD(gvk) {
		if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != "Active" {
			return "phase " + cmp.Or(phase, "unset"), nil
		}
		return "", nil
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	established := false
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			established = true
		}
	}
	if !established {
		return "not Established", nil
	}
	for _, served := range servedKinds(o) {
		delete(s.resources, served.GroupVersion())
		if _, err := s.path(served, "", "x"); err != nil {
			return "not yet in discovery: " + err.Error(), nil
		}
	}
	return "", nil
}

// definedLater says whether obj's kind, or its namespace, comes from a
// CRD or Namespace among objs that the API server does not serve yet: a
// dry run cannot apply it before they exist.
func definedLater(obj *unstructured.Unstructured, objs []*unstructured.Unstructured) bool {
	gvk := obj.GroupVersionKind()
	for _, d := range objs {
		dg := d.GroupVersionKind()
		switch {
		case isCRD(dg):
			group, _, _ := unstructured.NestedString(d.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(d.Object, "spec", "names", "kind")
			if group == gvk.Group && kind == gvk.Kind {
				return true
			}
		case dg.Group == "" && dg.Kind == "Namespace":
			if obj.GetNamespace() != "" && d.GetName() == obj.GetNamespace() {
				return true
			}
		}
	}
	return false
}
