package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Talos' boot-time apply of the bootstrap manifests (v1.14.1
// controllers/k8s/manifest_apply.go ManifestApplyController.apply): in
// manifest name order, each object that the inventory ConfigMap
// (kube-system/talos-bootstrap-manifests-inventory, go-kubernetes v0.2.41
// ssa/internal/inventory/configmap) does not list is created with
// server-side apply, field manager "talos" and the annotation
// config.k8s.io/owning-inventory; one that exists already is only added to
// the inventory. An object the inventory lists is never applied again,
// even when it was deleted or changed since: only talosctl upgrade-k8s (and
// devata after a Kubernetes upgrade) brings it back to the manifest.
// The kube-dns Service pins its ClusterIP (k8stemplates coredns.go
// CoreDNSService, machinery k8s.DNSServiceAddrs: the tenth address of the
// service subnet); an API server whose --service-cluster-ip-range does not
// hold it refuses the Service (Invalid) and, as on Talos, nothing picks
// another address: kube-dns stays absent and the controller fails
// (runManifestApply). devata sim and the demo run their API server with
// the inventory's service subnets (internal/simfleet, as
// control_plane_final.go gives kube-apiserver --service-cluster-ip-range),
// and so must a test that starts its own (internal/testenv
// Options.ServiceSubnets).

const owningInventoryAnnotation = "config.k8s.io/owning-inventory"

// inventoryKey is cli-utils' ObjMetadata string (fluxcd/cli-utils v1.2.0
// pkg/object/objmetadata.go String): namespace_name_group_kind, an RBAC
// name's colons (system:…) written "__", as a ConfigMap key allows none.
func inventoryKey(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	return strings.Join([]string{u.GetNamespace(), strings.ReplaceAll(u.GetName(), ":", "__"), gvk.Group, gvk.Kind}, "_")
}

// manifestApplyController names the controller whose failure the sim logs,
// as cosi-project/runtime's rruntime run.go logs it.
const manifestApplyController = "k8s.ManifestApplyController"

// runManifestApply plays one run of ManifestApplyController (v1.14.1
// manifest_apply.go Run): the apply, then ManifestStatus only when it
// succeeded. An object the API server refuses (Invalid, as the kube-dns
// Service's pinned ClusterIP outside its service range) is left out and
// the others applied (apply: "resource is malformed, continue with other
// manifests"), the inventory still written, and Run returns the error:
// the controller failed (rruntime run.go logs "controller failed" and
// restarts it after a backoff of 500ms growing to 60s), nothing picks
// another address, and Run's ManifestStatus write, after the apply, never
// comes: a control plane whose apply never succeeded has none, one that
// succeeded before keeps what it wrote. The sim applies again every
// kubelet round, logs a failure when its text changes and serves no
// ManifestStatus while the apply fails and never succeeded (fleet-wide:
// one API server).
func (f *Fleet) runManifestApply(ctx context.Context, kc kubernetes.Interface, s snapshot) error {
	err := applyBootstrapManifests(ctx, kc, s)

	failure := ""
	if err != nil {
		failure = err.Error()
	}

	f.mu.Lock()
	was := f.manifestFailure
	f.manifestFailure = failure
	f.manifestsApplied = f.manifestsApplied || err == nil
	f.mu.Unlock()

	if was == failure {
		return err
	}

	if err != nil {
		f.log.Warn("sim: controller failed; it runs again", "controller", manifestApplyController, "error", err)
	} else {
		f.log.Info("sim: bootstrap manifests applied", "controller", manifestApplyController)
	}

	for _, m := range f.Machines() {
		if m.snap().controlPlane() {
			m.sync() // ManifestStatus comes or goes
		}
	}

	return err
}

// manifestApplyFailing: the last run of ManifestApplyController failed
// and none succeeded before it.
func (f *Fleet) manifestApplyFailing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.manifestFailure != "" && !f.manifestsApplied
}

// applyBootstrapManifests creates what the control plane's manifests hold
// and the cluster lacks, as ManifestApplyController does.
func applyBootstrapManifests(ctx context.Context, kc kubernetes.Interface, s snapshot) error {
	cms := kc.CoreV1().ConfigMaps(constants.KubernetesInventoryNamespace)
	inv, err := cms.Get(ctx, constants.KubernetesBootstrapManifestsInventoryName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		inv, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: constants.KubernetesBootstrapManifestsInventoryName, Namespace: constants.KubernetesInventoryNamespace}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("manifests inventory: %w", err)
	}

	var errs []error

	changed := false

	var objs []*unstructured.Unstructured

	for _, rm := range renderManifests(s) {
		for _, obj := range rm.objs {
			u, err := toUnstructured(obj)
			if err != nil {
				errs = append(errs, err)
				continue
			}

			objs = append(objs, u)
		}
	}

	// Namespaces first, then CRDs, each by name, the rest as listed
	// (manifest_apply.go apply: sort.SliceStable).
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		if c := cmp.Compare(bootApplyRank(a), bootApplyRank(b)); c != 0 || bootApplyRank(a) == 2 {
			return c
		}

		return cmp.Compare(a.GetName(), b.GetName())
	})

	for _, u := range objs {
		key := inventoryKey(u)
		if _, ok := inv.Data[key]; ok {
			continue
		}

		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}

		ann[owningInventoryAnnotation] = constants.KubernetesBootstrapManifestsInventoryName
		u.SetAnnotations(ann)

		if err := createIfMissing(ctx, kc, u); err != nil {
			gvk := u.GroupVersionKind()
			errs = append(errs, fmt.Errorf("error creating %s/%s/%s/%s: %w", gvk.Group, gvk.Version, gvk.Kind, u.GetName(), err))
			continue
		}

		if inv.Data == nil {
			inv.Data = map[string]string{}
		}

		inv.Data[key], changed = "", true
	}

	if changed {
		if _, err := cms.Update(ctx, inv, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("manifests inventory: %w", err))
		}
	}

	return errors.Join(errs...)
}

// bootApplyRank is where ManifestApplyController puts an object: a
// Namespace (0), a CRD (1), anything else (2).
func bootApplyRank(u *unstructured.Unstructured) int {
	gvk := u.GroupVersionKind()

	switch {
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return 0
	case gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition":
		return 1
	}

	return 2
}

// createIfMissing applies u with field manager "talos" unless an object of
// its name exists.
func createIfMissing(ctx context.Context, kc kubernetes.Interface, u *unstructured.Unstructured) error {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}

	opts := metav1.PatchOptions{FieldManager: constants.KubernetesFieldManagerName}
	ns, name := u.GetNamespace(), u.GetName()

	switch u.GetKind() {
	case "ServiceAccount":
		if _, err = kc.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = kc.CoreV1().ServiceAccounts(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
		}
	case "ConfigMap":
		if _, err = kc.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = kc.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
		}
	case "ClusterRole":
		if _, err = kc.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = kc.RbacV1().ClusterRoles().Patch(ctx, name, types.ApplyPatchType, data, opts)
		}
	case "ClusterRoleBinding":
		if _, err = kc.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = kc.RbacV1().ClusterRoleBindings().Patch(ctx, name, types.ApplyPatchType, data, opts)
		}
	case "Deployment":
		if _, err = kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = kc.AppsV1().Deployments(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
		}
	case "DaemonSet":
		if _, err = kc.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = kc.AppsV1().DaemonSets(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
		}
	case "Service":
		if _, err = kc.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = kc.CoreV1().Services(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
		}
	default:
		return createAny(ctx, kc, u, data, opts.FieldManager) // manifests_bootstrap.go
	}

	return err
}
