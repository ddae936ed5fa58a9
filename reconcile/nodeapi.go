package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// Node labels and taints through the Kubernetes API (inventory's
// viaKubernetes, issue 36 item 2): those NodeRestriction forbids a worker's
// kubelet, whose credentials Talos writes its labels and taints with, to set.
//
// NodeSpec.Taints is a +listType=atomic list (k8s.io/api v0.37.2 core/v1
// types.go): a server-side apply would own the whole list and take the
// taints Talos, kubectl and the node controller set. So devata does what
// Talos' own NodeApplyController does (v1.14.1
// internal/app/machined/pkg/controllers/k8s/node_apply.go, syncOnce,
// applyNodeKV, ApplyTaints): it records the keys it set in annotations of
// its own, reads the Node, changes only its keys, and Updates with the
// Node's resourceVersion, again on a Conflict.

// Annotations listing the label and taint keys devata set on a Node, as a
// sorted JSON array (Talos' talos.dev/owned-labels, owned-taints); the
// kubelet check reads them too (talosapi.NodeFacts).
const (
	OwnedLabelsAnnotation = talosapi.OwnedLabelsAnnotation
	OwnedTaintsAnnotation = talosapi.OwnedTaintsAnnotation
)

// NodeKeys are the labels and taints one Node should carry from devata:
// taints as the inventory writes them, key to value:Effect or Effect.
type NodeKeys struct {
	Labels, Taints map[string]string
}

// NodeKeysOf are the viaKubernetes labels and taints of m.
func NodeKeysOf(m *inventory.Machine) NodeKeys {
	return NodeKeys{Labels: m.ViaKubernetesLabels(), Taints: m.ViaKubernetesTaints()}
}

// Empty says that nothing is declared.
func (k NodeKeys) Empty() bool { return len(k.Labels) == 0 && len(k.Taints) == 0 }

// NodeKeysChange is what a write of NodeKeys did to one Node (or, in a dry
// run, would do), in the shape of the plan's (plan.NodeKeyChanges).
type NodeKeysChange struct {
	Node           string
	Labels, Taints plan.NodeKeyChanges
	// Adopted says that only devata's annotations changed, nothing
	// visible: a key it declares was already there with its value.
	Adopted bool
}

// Changed says that the Node was (or would be) written.
func (c NodeKeysChange) Changed() bool { return c.Plan().Changed() }

// Plan is the change as the plan writes it.
func (c NodeKeysChange) Plan() plan.NodeKeys {
	return plan.NodeKeys{Machine: c.Node, Labels: c.Labels, Taints: c.Taints, Adopted: c.Adopted}
}

// Lines are the change as apply prints it, one line per kind; would says
// it was not written (a dry run).
func (c NodeKeysChange) Lines(would bool) []string { return c.Plan().Lines(would) }

// SetNodeKeys makes Node name carry want among the labels and taints devata
// owns: it adds or corrects each declared one (taking over one someone else
// set to another value), removes those it set that want no longer has, and
// leaves every other label and taint alone. node is the Node as last read
// (from a LIST), or nil to read it; a Conflict reads it again and retries.
// A dry run computes the change and writes nothing. A Node that does not
// exist is an error apierrors.IsNotFound recognises.
func SetNodeKeys(ctx context.Context, kc kubernetes.Interface, name string, node *corev1.Node, want NodeKeys, dryRun bool) (NodeKeysChange, error) {
	var change NodeKeysChange
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if node == nil {
			n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			node = n
		}
		n := node.DeepCopy()
		node = nil // a retry reads it again
		var err error
		if change, err = applyNodeKeys(n, want); err != nil || !change.Changed() || dryRun {
			return err
		}
		_, err = kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: "devata"})
		return err
	})
	if err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return NodeKeysChange{Node: name}, err
		case apierrors.IsForbidden(err):
			return NodeKeysChange{Node: name}, fmt.Errorf("Node %s: %w: the Kubernetes identity devata uses (the kubeconfig's user, or in a pod its service account) needs get and update on nodes: kubectl auth can-i update nodes", name, err)
		}
		return NodeKeysChange{Node: name}, fmt.Errorf("Node %s: %w", name, err)
	}
	change.Node = name
	return change, nil
}

// applyNodeKeys changes n in place to carry want among devata's keys.
func applyNodeKeys(n *corev1.Node, want NodeKeys) (NodeKeysChange, error) {
	var c NodeKeysChange
	ownedLabels, err := ownedKeys(n, OwnedLabelsAnnotation)
	if err != nil {
		return c, err
	}
	ownedTaints, err := ownedKeys(n, OwnedTaintsAnnotation)
	if err != nil {
		return c, err
	}
	beforeLabels, beforeTaints := slices.Sorted(maps.Keys(ownedLabels)), slices.Sorted(maps.Keys(ownedTaints))
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	applyLabels(n, ownedLabels, want.Labels, &c)
	applyTaints(n, ownedTaints, want.Taints, &c)
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	afterLabels, afterTaints := setOwnedKeys(n, OwnedLabelsAnnotation, ownedLabels), setOwnedKeys(n, OwnedTaintsAnnotation, ownedTaints)
	visible := len(c.Labels.Set)+len(c.Labels.Removed)+len(c.Taints.Set)+len(c.Taints.Removed) > 0
	c.Adopted = !visible && (!slices.Equal(beforeLabels, afterLabels) || !slices.Equal(beforeTaints, afterTaints))
	return c, nil
}

// applyLabels is Talos' applyNodeKV, but for a label someone else set to
// another value: the inventory declares it for devata, so devata takes it
// over (Talos leaves it).
func applyLabels(n *corev1.Node, owned map[string]bool, want map[string]string, c *NodeKeysChange) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		v := want[k]
		cur, exists := n.Labels[k]
		switch {
		case exists && cur == v:
		case exists && !owned[k]:
			c.Labels.TakenOver = append(c.Labels.TakenOver, k)
			fallthrough
		default:
			n.Labels[k] = v
			c.Labels.Set = append(c.Labels.Set, labelEntry(k, v))
		}
		owned[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(owned)) {
		if _, ok := want[k]; ok {
			continue
		}
		delete(owned, k)
		if _, ok := n.Labels[k]; ok {
			delete(n.Labels, k)
			c.Labels.Removed = append(c.Labels.Removed, k)
		}
	}
}

// applyTaints is Talos' ApplyTaints, by key as there, but a declared taint
// someone else set with another value or effect is taken over (its key's
// other taints replaced by the declared one).
func applyTaints(n *corev1.Node, owned map[string]bool, want map[string]string, c *NodeKeysChange) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		value, effect := inventory.ParseTaint(want[k])
		desired := corev1.Taint{Key: k, Value: value, Effect: corev1.TaintEffect(effect)}
		var same []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key == k {
				same = append(same, t)
			}
		}
		wasOwned := owned[k]
		owned[k] = true
		if len(same) == 1 && same[0].Value == value && same[0].Effect == desired.Effect {
			continue
		}
		if len(same) > 0 && !wasOwned {
			c.Taints.TakenOver = append(c.Taints.TakenOver, k)
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == k })
		n.Spec.Taints = append(n.Spec.Taints, desired)
		c.Taints.Set = append(c.Taints.Set, inventory.KubectlTaint(desired.Key, desired.Value, string(desired.Effect)))
	}
	for _, k := range slices.Sorted(maps.Keys(owned)) {
		if _, ok := want[k]; ok {
			continue
		}
		delete(owned, k)
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == k })
		if len(n.Spec.Taints) < before {
			c.Taints.Removed = append(c.Taints.Removed, k)
		}
	}
}

// labelEntry is a label as apply prints it: k=v, or k alone when its
// value is empty (node-role.kubernetes.io/worker).
func labelEntry(k, v string) string {
	if v == "" {
		return k
	}
	return k + "=" + v
}

// ownedKeys reads an owned-keys annotation.
func ownedKeys(n *corev1.Node, annotation string) (map[string]bool, error) {
	keys, err := talosapi.OwnedKeys(n.Annotations[annotation])
	if err != nil {
		return nil, fmt.Errorf("annotation %s %w: remove it (kubectl annotate node %s %s-) and devata writes it again", annotation, err, n.Name, annotation)
	}
	out := map[string]bool{}
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}

// setOwnedKeys writes an owned-keys annotation (none when empty), as
// Talos' marshalOwnedAnnotation, and returns the keys.
func setOwnedKeys(n *corev1.Node, annotation string, owned map[string]bool) []string {
	keys := slices.Sorted(maps.Keys(owned))
	if len(keys) == 0 {
		delete(n.Annotations, annotation)
		return keys
	}
	b, _ := json.Marshal(keys) // a []string always marshals
	n.Annotations[annotation] = string(b)
	return keys
}
