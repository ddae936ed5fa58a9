package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/labels"
	corev1 "k8s.io/api/core/v1"
)

// nodeSpec is what machined's NodeLabelSpec, NodeAnnotationSpec and
// NodeTaintSpec controllers derive from the active config
// (controllers/k8s/node_label_spec.go, node_annotation_spec.go,
// node_taint_spec.go Run, in v1.11.0 from Machine().NodeLabels() plus the
// control-plane role label, NodeAnnotations(), NodeTaints() plus the
// control plane's NoSchedule taint unless the cluster schedules on control
// planes; in v1.14.1 the same values through K8sNodeConfig(), whose
// v1alpha1 shim adds the role label and the taint: v1alpha1_k8s_bridge.go).
// Talos' extensions add labels too; the sim runs none.
type nodeSpec struct {
	labels, annotations map[string]string
	taints              []corev1.Taint
}

func nodeSpecOf(cfg config.Provider) nodeSpec {
	spec := nodeSpec{labels: map[string]string{}, annotations: map[string]string{}}
	n := cfg.K8sNodeConfig()
	if n == nil {
		return spec
	}
	maps.Copy(spec.labels, n.Labels())
	maps.Copy(spec.annotations, n.Annotations())
	for _, key := range slices.Sorted(maps.Keys(n.Taints())) {
		value, effect := labels.ParseTaint(n.Taints()[key])
		spec.taints = append(spec.taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
	}
	return spec
}

// applyNodeSpec does to node what machined's NodeApplyController does on
// every pass (controllers/k8s/node_apply.go syncOnce, applyNodeKV,
// ApplyTaints; the same in v1.11.0 and v1.14.1): a label, annotation or
// taint of the spec is set and owned when the Node lacks it or already has
// its value, changed only when Talos owns it, and one Talos owns that left
// the spec is removed; what Talos owns is recorded in the Node's
// talos.dev/owned-labels, owned-annotations and owned-taints annotations
// (JSON arrays of keys, sorted; absent when empty). Labels and taints
// others set stay. It reports whether node changed.
func applyNodeSpec(node *corev1.Node, spec nodeSpec) (bool, error) {
	before := node.DeepCopy()
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}

	ownedLabels, err := ownedKeys(node, constants.AnnotationOwnedLabels)
	if err != nil {
		return false, err
	}
	ownedAnnotations, err := ownedKeys(node, constants.AnnotationOwnedAnnotations)
	if err != nil {
		return false, err
	}

	applyOwnedKV(node.Labels, ownedLabels, spec.labels)
	applyOwnedKV(node.Annotations, ownedAnnotations, spec.annotations)
	// taints: applyTaints (kubelet_taints.go), which plays NodeRestriction
	// refusing a worker's own taint changes

	setOwnedKeys(node, constants.AnnotationOwnedLabels, ownedLabels)
	setOwnedKeys(node, constants.AnnotationOwnedAnnotations, ownedAnnotations)

	changed := !maps.Equal(before.Labels, node.Labels) || !maps.Equal(before.Annotations, node.Annotations)
	if len(before.Labels) == 0 && len(node.Labels) == 0 {
		node.Labels = before.Labels
	}
	if len(before.Annotations) == 0 && len(node.Annotations) == 0 {
		node.Annotations = before.Annotations
	}
	return changed, nil
}

func ownedKeys(node *corev1.Node, annotation string) (map[string]struct{}, error) {
	owned := map[string]struct{}{}
	raw := node.Annotations[annotation]
	if raw == "" {
		return owned, nil
	}
	var keys []string
	if err := json.Unmarshal([]byte(raw), &keys); err != nil {
		// machined fails the pass the same way and retries
		return nil, fmt.Errorf("node %s: annotation %s: %w", node.Name, annotation, err)
	}
	for _, k := range keys {
		owned[k] = struct{}{}
	}
	return owned, nil
}

func setOwnedKeys(node *corev1.Node, annotation string, owned map[string]struct{}) {
	if len(owned) == 0 {
		delete(node.Annotations, annotation)
		return
	}
	raw, _ := json.Marshal(slices.Sorted(maps.Keys(owned))) // a []string always marshals
	node.Annotations[annotation] = string(raw)
}

// applyOwnedKV is node_apply.go applyNodeKV.
func applyOwnedKV(kv map[string]string, owned map[string]struct{}, spec map[string]string) {
	for key, value := range spec {
		current, exists := kv[key]
		switch _, mine := owned[key]; {
		case !exists, current == value:
			kv[key] = value
			owned[key] = struct{}{}
		case mine:
			kv[key] = value
		}
	}
	for key := range owned {
		if _, ok := spec[key]; !ok {
			delete(kv, key)
			delete(owned, key)
		}
	}
}
