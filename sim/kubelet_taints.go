package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"devata.dev/devata/internal/talos"
)

// Node taints as machined puts them on the Node (see doc.go, "Node taints").

// specTaints are the config's taints as NodeTaintSpecController reads them
// (v1.14.1 node_taint_spec.go: K8sNodeConfig().Taints(), each split by
// labels.ParseTaint; machinery's provider adds the control plane's
// node-role.kubernetes.io/control-plane:NoSchedule unless scheduling on
// control planes is allowed, as v1.11.0's controller did itself).
func specTaints(cfg config.Config) []corev1.Taint {
	n := cfg.K8sNodeConfig()
	if n == nil {
		return nil
	}
	var out []corev1.Taint
	for _, k := range slices.Sorted(maps.Keys(n.Taints())) {
		value, effect, found := strings.Cut(n.Taints()[k], ":")
		if !found {
			value, effect = "", value
		}
		out = append(out, corev1.Taint{Key: k, Value: value, Effect: corev1.TaintEffect(effect)})
	}
	return out
}

// registerTaints are the taints the kubelet registers its Node with:
// Talos 1.14 passes the config's (kubelet_config.go RegisterWithTaints);
// up to 1.13 only a control plane's own NoSchedule taint (v1.11.0
// kubelet_spec.go), which NodeRestriction allows at creation.
func registerTaints(spec []corev1.Taint, version string, controlPlane bool) []corev1.Taint {
	if minor, _ := talos.Minor(version); minor >= 14 {
		return spec
	}
	if !controlPlane {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(spec), func(t corev1.Taint) bool { return t.Key != constants.LabelNodeRoleControlPlane })
}

// applyTaints plays NodeApplyController.ApplyTaints (node_apply.go, v1.11.0
// and v1.14.1): a spec taint absent from the Node is added and owned, an
// owned one updated, one equal to the spec taken over; an owned taint the
// spec dropped is removed; ownership is kept in the talos.dev/owned-taints
// annotation. A worker writes with its kubelet's credentials, and the
// NodeRestriction admission plugin refuses a node that changes its own
// taints (admitNode: "is not allowed to modify taints"): there the Node
// keeps its taints (Talos' whole update fails and is retried; the sim
// still applies the labels, see doc.go).
func applyTaints(ctx context.Context, nodes typedcorev1.NodeInterface, node *corev1.Node, spec []corev1.Taint, controlPlane bool) (*corev1.Node, error) {
	owned := map[string]bool{}
	if raw := node.Annotations[constants.AnnotationOwnedTaints]; raw != "" {
		var keys []string
		if err := json.Unmarshal([]byte(raw), &keys); err != nil {
			return nil, fmt.Errorf("owned taints annotation: %w", err)
		}
		for _, k := range keys {
			owned[k] = true
		}
	}
	taints := slices.Clone(node.Spec.Taints)
	for _, want := range spec {
		i := slices.IndexFunc(taints, func(t corev1.Taint) bool { return t.Key == want.Key })
		switch {
		case i < 0:
			taints = append(taints, want)
			owned[want.Key] = true
		case owned[want.Key]:
			taints[i].Value, taints[i].Effect = want.Value, want.Effect
		case taints[i].Value == want.Value && taints[i].Effect == want.Effect:
			owned[want.Key] = true
		}
	}
	taints = slices.DeleteFunc(taints, func(t corev1.Taint) bool {
		if !owned[t.Key] || slices.ContainsFunc(spec, func(s corev1.Taint) bool { return s.Key == t.Key }) {
			return false
		}
		delete(owned, t.Key)
		return true
	})
	keys := slices.Sorted(maps.Keys(owned))
	ownedJSON := ""
	if len(keys) > 0 {
		b, _ := json.Marshal(keys)
		ownedJSON = string(b)
	}
	taintsChanged := !slices.Equal(taints, node.Spec.Taints)
	if taintsChanged && !controlPlane {
		return node, nil // NodeRestriction: a worker may not modify its taints
	}
	if !taintsChanged && node.Annotations[constants.AnnotationOwnedTaints] == ownedJSON {
		return node, nil
	}
	node.Spec.Taints = taints
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	if ownedJSON == "" {
		delete(node.Annotations, constants.AnnotationOwnedTaints)
	} else {
		node.Annotations[constants.AnnotationOwnedTaints] = ownedJSON
	}
	node, err := nodes.Update(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update node taints: %w", err)
	}
	return node, nil
}
