package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// devata sim and the demo run their API server with the inventory's
// service subnets (internal/simfleet, as control_plane_final.go gives
// kube-apiserver --service-cluster-ip-range), so the pinned ClusterIP fits.
// Approximation: a test that starts its own API server keeps envtest's
// range unless it asks for another; when that refuses the kube-dns
// Service's pinned ClusterIP, the sim lets it allocate one where Talos
// would report the error and leave the Service out.

const owningInventoryAnnotation = "config.k8s.io/owning-inventory"

// inventoryKey is cli-utils' ObjMetadata string (fluxcd/cli-utils v1.2.0
// pkg/object/objmetadata.go String): namespace_name_group_kind, an RBAC
// name's colons (system:…) written "__", as a ConfigMap key allows none.
func inventoryKey(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	return strings.Join([]string{u.GetNamespace(), strings.ReplaceAll(u.GetName(), ":", "__"), gvk.Group, gvk.Kind}, "_")
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

	for _, rm := range renderManifests(s) {
		for _, obj := range rm.objs {
			u, err := toUnstructured(obj)
			if err != nil {
				errs = append(errs, err)
				continue
			}

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
				errs = append(errs, fmt.Errorf("manifest %s: %s %s/%s: %w", rm.name, u.GetKind(), u.GetNamespace(), u.GetName(), err))
				continue
			}

			if inv.Data == nil {
				inv.Data = map[string]string{}
			}

			inv.Data[key], changed = "", true
		}
	}

	if changed {
		if _, err := cms.Update(ctx, inv, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("manifests inventory: %w", err))
		}
	}

	return errors.Join(errs...)
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
			if apierrors.IsInvalid(err) {
				// the test bed's service range: let the API server allocate
				unstructured.RemoveNestedField(u.Object, "spec", "clusterIP")
				unstructured.RemoveNestedField(u.Object, "spec", "clusterIPs")
				if data, err = json.Marshal(u.Object); err == nil {
					_, err = kc.CoreV1().Services(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
				}
			}
		}
	default:
		return createAny(ctx, kc, u, data, opts.FieldManager) // manifests_bootstrap.go
	}

	return err
}
