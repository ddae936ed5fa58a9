package inventory

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"devata.dev/devata/internal/talos"
)

// Machine groups (issue 36): a group's selector picks machines by their own
// labels and role; the group's patches apply between the role's and the
// machine's, its labels and taints merge under the machine's own.

// Selects reports whether the group's selector picks m: m's role when the
// selector names one, and every matchLabels entry among m's own labels.
func (g *Group) Selects(m *Machine) bool {
	if g.Selector.Role != "" && g.Selector.Role != m.Role {
		return false
	}
	for k, v := range g.Selector.MatchLabels {
		if got, ok := m.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Group returns the group of that name, or nil.
func (inv *Inventory) Group(name string) *Group {
	for i := range inv.Groups {
		if inv.Groups[i].Name == name {
			return &inv.Groups[i]
		}
	}
	return nil
}

// GroupPatches are the patch files m's groups apply, in the groups' order.
func (inv *Inventory) GroupPatches(m *Machine) []string {
	var out []string
	for _, name := range m.Groups {
		if g := inv.Group(name); g != nil {
			out = append(out, g.Patches...)
		}
	}
	return out
}

// NodeLabels are the Kubernetes node labels m is rendered with: its groups',
// then its own over them.
func (m *Machine) NodeLabels() map[string]string {
	if m.nodeLabels != nil {
		return m.nodeLabels
	}
	return m.Labels
}

// NodeTaints are the Kubernetes node taints m is rendered with (key to
// value:Effect or Effect, as Talos' machine.nodeTaints): its groups', then
// its own over them.
func (m *Machine) NodeTaints() map[string]string {
	if m.nodeTaints != nil {
		return m.nodeTaints
	}
	return m.Taints
}

// ViaKubernetesLabels are the node labels devata sets on m's Node through
// the Kubernetes API (viaKubernetes.labels): its groups', then its own over
// them. They are never rendered.
func (m *Machine) ViaKubernetesLabels() map[string]string {
	if m.kubeLabels != nil {
		return m.kubeLabels
	}
	return m.ViaKubernetes.Labels
}

// ViaKubernetesTaints are the node taints devata sets on m's Node through
// the Kubernetes API (key to value:Effect or Effect), as ViaKubernetesLabels.
func (m *Machine) ViaKubernetesTaints() map[string]string {
	if m.kubeTaints != nil {
		return m.kubeTaints
	}
	return m.ViaKubernetes.Taints
}

// ParseTaint splits a taint as Talos writes it ("value:Effect", or "Effect"
// alone) as machinery's labels.ParseTaint does.
func ParseTaint(s string) (value, effect string) {
	value, effect, found := strings.Cut(s, ":")
	if !found {
		return "", value
	}
	return value, effect
}

// validateGroups checks the groups, resolves which machines each selects
// (Machine.Groups) and merges their labels and taints, naming two groups
// that set one label or taint differently on a machine.
func (v *validator) validateGroups() {
	names := map[string]string{}
	for i := range v.inv.Groups {
		v.validateGroup(i, names)
	}
	v.resolveGroups()
	v.validateRolloutOrders() // rollout.go
}

// validateGroup checks groups[i]'s own fields; names maps the group names
// seen so far to their paths.
func (v *validator) validateGroup(i int, names map[string]string) {
	g := &v.inv.Groups[i]
	p := fmt.Sprintf("groups[%d]", i)
	if v.dns1123Label(p+".name", g.Name) {
		if first, dup := names[g.Name]; dup {
			v.errorf(p+".name", "duplicate group name %q (also %s)", g.Name, first)
		}
		names[g.Name] = p
	}
	switch g.Selector.Role {
	case "", RoleControlPlane, RoleWorker:
	default:
		v.errorf(p+".selector.role", "must be controlplane or worker, got %q", g.Selector.Role)
	}
	if g.Selector.Role == "" && len(g.Selector.MatchLabels) == 0 {
		v.errorf(p+".selector", "an empty selector would pick every machine: give matchLabels or a role (cluster.patches already apply to every machine)")
	}
	v.labelMap(p+".selector.matchLabels", g.Selector.MatchLabels)
	v.labelMap(p+".labels", g.Labels)
	v.taintMap(p+".taints", g.Taints)
	v.labelMap(p+".viaKubernetes.labels", g.ViaKubernetes.Labels)
	v.taintMap(p+".viaKubernetes.taints", g.ViaKubernetes.Taints)
	v.patches(p+".patches", g.Patches)
	if g.Rollout.MaxUnavailable < 0 {
		v.errorf(p+".rollout.maxUnavailable", "%d: give how many of the group's workers may change at once (1 or more), or leave it out for the global --max-unavailable", g.Rollout.MaxUnavailable)
	}
	v.validateHoldAndWindows(p, g.Hold, g.MaintenanceWindows)
	if len(g.Labels) == 0 && len(g.Taints) == 0 && len(g.ViaKubernetes.Labels) == 0 && len(g.ViaKubernetes.Taints) == 0 && len(g.Patches) == 0 && g.Rollout.MaxUnavailable == 0 && len(g.Rollout.Order) == 0 && g.Hold == nil && len(g.MaintenanceWindows) == 0 {
		v.warnf(p, "group %s sets no patches, labels, taints or rollout limit or order: it changes nothing", g.Name)
	}
}

// setBy is a label's or taint's value and the group that set it first.
type setBy struct{ value, group string }

// groupConflict is two groups setting one label or taint differently.
type groupConflict struct {
	gi                int
	what, key, first  string
	firstVal, thisVal string
}

// groupClashes gathers the conflicts, each once, with the machines it is on.
type groupClashes struct {
	order []groupConflict
	on    map[groupConflict][]string
}

func (c *groupClashes) add(k groupConflict, machine string) {
	if _, ok := c.on[k]; !ok {
		c.order = append(c.order, k)
	}
	c.on[k] = append(c.on[k], machine)
}

// resolveGroups resolves which machines each group selects and merges the
// groups' labels, taints, holds and windows onto each machine.
func (v *validator) resolveGroups() {
	inv := v.inv
	clashes := &groupClashes{on: map[groupConflict][]string{}}
	matched := make([]int, len(inv.Groups))
	for i := range inv.Machines {
		m := &inv.Machines[i]
		m.Groups, m.nodeLabels, m.nodeTaints, m.groupHold, m.groupWindows = nil, nil, nil, nil, nil
		m.kubeLabels, m.kubeTaints = nil, nil
		labels, taints := map[string]setBy{}, map[string]setBy{}
		kubeLabels, kubeTaints := map[string]setBy{}, map[string]setBy{}
		for gi := range inv.Groups {
			g := &inv.Groups[gi]
			if !g.Selects(m) {
				continue
			}
			matched[gi]++
			joinGroup(m, g)
			mergeGroupKeys(clashes, m.Name, gi, g, [4]map[string]setBy{labels, taints, kubeLabels, kubeTaints})
		}
		if len(m.Groups) == 0 {
			continue
		}
		m.nodeLabels = merged(labels, m.Labels, func(s setBy) string { return s.value })
		m.nodeTaints = merged(taints, m.Taints, func(s setBy) string { return s.value })
		m.kubeLabels = merged(kubeLabels, m.ViaKubernetes.Labels, func(s setBy) string { return s.value })
		m.kubeTaints = merged(kubeTaints, m.ViaKubernetes.Taints, func(s setBy) string { return s.value })
	}
	for _, c := range clashes.order {
		ms := clashes.on[c]
		on := strings.Join(ms[:min(len(ms), 5)], ", ")
		if len(ms) > 5 {
			on += fmt.Sprintf(" and %d more", len(ms)-5)
		}
		v.errorf(fmt.Sprintf("groups[%d].%ss[%q]", c.gi, c.what, c.key), "groups %s and %s set %s %s differently (%q and %q) on machines they both select (%s): set it in one group, or on the machines themselves, whose own %ss win",
			c.first, inv.Groups[c.gi].Name, c.what, c.key, c.firstVal, c.thisVal, on, c.what)
	}
	for gi, n := range matched {
		if n == 0 {
			v.warnf(fmt.Sprintf("groups[%d].selector", gi), "group %s selects no machine: check matchLabels against the machines' own labels (labels groups give are not matched)", inv.Groups[gi].Name)
		}
	}
}

// joinGroup records that g selects m: its name, its hold (the first
// group's) and its maintenance windows.
func joinGroup(m *Machine, g *Group) {
	m.Groups = append(m.Groups, g.Name)
	if g.Hold != nil && m.groupHold == nil {
		m.groupHold = &Hold{Reason: "group " + g.Name + ": " + g.Hold.Reason}
	}
	for _, w := range g.MaintenanceWindows {
		if !slices.Contains(m.groupWindows, w) {
			m.groupWindows = append(m.groupWindows, w)
		}
	}
}

// mergeGroupKeys adds groups[gi]'s labels, taints and viaKubernetes labels
// and taints (seen, in that order) to those machine got from earlier groups,
// recording a clash where one sets a key differently.
func mergeGroupKeys(clashes *groupClashes, machine string, gi int, g *Group, seen [4]map[string]setBy) {
	for _, kv := range []struct {
		what string
		set  map[string]string
		seen map[string]setBy
	}{{"label", g.Labels, seen[0]}, {"taint", g.Taints, seen[1]}, {"viaKubernetes.label", g.ViaKubernetes.Labels, seen[2]}, {"viaKubernetes.taint", g.ViaKubernetes.Taints, seen[3]}} {
		for _, k := range slices.Sorted(maps.Keys(kv.set)) {
			val := kv.set[k]
			if first, ok := kv.seen[k]; ok && first.value != val {
				clashes.add(groupConflict{gi, kv.what, k, first.group, first.value, val}, machine)
				continue
			}
			kv.seen[k] = setBy{val, g.Name}
		}
	}
}

func merged[T any](fromGroups map[string]T, own map[string]string, value func(T) string) map[string]string {
	out := make(map[string]string, len(fromGroups)+len(own))
	for k, s := range fromGroups {
		out[k] = value(s)
	}
	maps.Copy(out, own)
	return out
}

// labelMap checks label keys and values as Kubernetes does.
func (v *validator) labelMap(path string, labels map[string]string) {
	for k, val := range labels {
		lp := fmt.Sprintf("%s[%q]", path, k)
		for _, msg := range validation.IsQualifiedName(k) {
			v.errorf(lp, "invalid label key: %s", msg)
		}
		for _, msg := range validation.IsValidLabelValue(val) {
			v.errorf(lp, "invalid label value %q: %s", val, msg)
		}
	}
}

// taintEffects are the effects Talos accepts (machinery constants.ValidEffects).
var taintEffects = []string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}

// taintMap checks taints as machinery's labels.ValidateTaints does (v1.11.0
// and v1.14.1 alike): a qualified key, an effect Talos knows, a value that
// is a label value.
func (v *validator) taintMap(path string, taints map[string]string) {
	for k, s := range taints {
		tp := fmt.Sprintf("%s[%q]", path, k)
		for _, msg := range validation.IsQualifiedName(k) {
			v.errorf(tp, "invalid taint key: %s", msg)
		}
		val, effect := ParseTaint(s)
		if !slices.Contains(taintEffects, effect) {
			v.errorf(tp, "%q: the effect must be one of %s, written value:Effect or Effect alone, e.g. \"true:NoSchedule\"", s, strings.Join(taintEffects, ", "))
			continue
		}
		for _, msg := range validation.IsValidLabelValue(val) {
			v.errorf(tp, "invalid taint value %q: %s", val, msg)
		}
	}
}

// validateNodeRestriction refuses, on workers, the node labels and taints
// Talos cannot put on the Node. machined's NodeApplyController (node_apply.go,
// getK8sClient, in v1.11.0 and v1.14.1) writes a control plane's labels and
// taints with an admin certificate, but a worker's with the kubelet's own
// kubeconfig, which the NodeRestriction admission plugin
// (plugin/pkg/admission/noderestriction, admitNode) holds to the labels a
// kubelet may set, and forbids any change to the taints of an existing Node.
// Talos 1.14 also registers the kubelet with its taints (kubelet_config.go:
// RegisterWithTaints), which NodeRestriction allows at creation; Talos up to
// 1.13 does not (v1.13.9 has no RegisterWithTaints from the config), so a
// worker's taints never reach its Node.
func (v *validator) validateNodeRestriction() {
	minor, _ := talos.Minor(v.inv.Cluster.TalosVersion)
	for i := range v.inv.Machines {
		m := &v.inv.Machines[i]
		if m.Role != RoleWorker {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(m.NodeLabels())) {
			reason := KubeletForbiddenLabel(k)
			if reason == "" {
				continue
			}
			v.errorf(v.labelSource(i, m, k), "label %s on worker %s: %s; Talos labels a worker's Node with its kubelet's credentials: use a label of your own domain (e.g. example.com/%s) or one under node.kubernetes.io/, set it with kubectl label node %s, or move it under viaKubernetes.labels to have devata set it through the Kubernetes API", k, m.Name, reason, labelName(k), m.Name)
		}
		if minor < 14 {
			for _, k := range slices.Sorted(maps.Keys(m.NodeTaints())) {
				v.errorf(v.taintSource(i, m, k), "taint %s on worker %s: Talos 1.%d taints a worker's Node with its kubelet's credentials, and NodeRestriction forbids a node to modify its own taints, so the Node would never carry it: move the cluster to Talos 1.14 (its kubelet registers with its taints), drop it here and run kubectl taint node %s %s, or move it under viaKubernetes.taints to have devata set it through the Kubernetes API", k, m.Name, minor, m.Name, kubectlTaint(k, m.NodeTaints()[k]))
			}
		}
	}
}

// labelSource is the field that gives machine i label k: its own, or the first group's.
func (v *validator) labelSource(i int, m *Machine, k string) string {
	if _, own := m.Labels[k]; own {
		return fmt.Sprintf("machines[%d].labels[%q]", i, k)
	}
	for gi := range v.inv.Groups {
		if g := &v.inv.Groups[gi]; slices.Contains(m.Groups, g.Name) {
			if _, ok := g.Labels[k]; ok {
				return fmt.Sprintf("groups[%d].labels[%q]", gi, k)
			}
		}
	}
	return fmt.Sprintf("machines[%d]", i)
}

// taintSource is the field that gives machine i taint k.
func (v *validator) taintSource(i int, m *Machine, k string) string {
	if _, own := m.Taints[k]; own {
		return fmt.Sprintf("machines[%d].taints[%q]", i, k)
	}
	for gi := range v.inv.Groups {
		if g := &v.inv.Groups[gi]; slices.Contains(m.Groups, g.Name) {
			if _, ok := g.Taints[k]; ok {
				return fmt.Sprintf("groups[%d].taints[%q]", gi, k)
			}
		}
	}
	return fmt.Sprintf("machines[%d]", i)
}

// kubectlTaint is a taint as kubectl taint takes it, from its key and
// its value as the inventory writes it.
func kubectlTaint(key, talos string) string {
	value, effect := ParseTaint(talos)
	return KubectlTaint(key, value, effect)
}

// KubectlTaint is a taint as kubectl taint takes it: key=value:Effect, or
// key:Effect when its value is empty.
func KubectlTaint(key, value, effect string) string {
	if value == "" {
		return key + ":" + effect
	}
	return key + "=" + value + ":" + effect
}

func labelName(k string) string {
	if _, name, ok := strings.Cut(k, "/"); ok {
		return name
	}
	return k
}

// kubeletLabels are the kubernetes.io labels a kubelet may set on its own
// Node (k8s.io/kubelet pkg/apis well_known_labels.go, kubeletLabels, v0.37.2).
var kubeletLabels = []string{
	corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
	corev1.LabelInstanceType, corev1.LabelInstanceTypeStable,
	corev1.LabelOSStable, corev1.LabelArchStable,
	"beta.kubernetes.io/os", "beta.kubernetes.io/arch",
}

// kubeletLabelNamespaces are the label namespaces a kubelet may set anything
// in (kubeletLabelNamespaces there).
var kubeletLabelNamespaces = []string{corev1.LabelNamespaceSuffixKubelet, corev1.LabelNamespaceSuffixNode}

// KubeletForbiddenLabel says why the NodeRestriction admission plugin
// forbids a kubelet to set label key on its own Node, or "" when it may
// (plugin/pkg/admission/noderestriction admission.go, getForbiddenLabels,
// Kubernetes v1.37.2).
func KubeletForbiddenLabel(key string) string {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return ""
	}
	if ns == corev1.LabelNamespaceNodeRestriction || strings.HasSuffix(ns, "."+corev1.LabelNamespaceNodeRestriction) {
		return "NodeRestriction forbids a kubelet every label under " + corev1.LabelNamespaceNodeRestriction + "/ (only an administrator may set them)"
	}
	kube := ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
	if !kube || slices.Contains(kubeletLabels, key) {
		return ""
	}
	for _, allowed := range kubeletLabelNamespaces {
		if ns == allowed || strings.HasSuffix(ns, "."+allowed) {
			return ""
		}
	}
	return "NodeRestriction lets a kubelet set no kubernetes.io or k8s.io label but the well-known ones (topology.kubernetes.io/zone, …) and those under kubelet.kubernetes.io/ and node.kubernetes.io/"
}

// PatchLayer is one layer of a machine's patches: where they come from
// ("cluster", "role controlplane", "group storage", "machine") and the files.
type PatchLayer struct {
	From  string   `json:"from"`
	Files []string `json:"files"`
}

// PatchLayers are m's patches as rendering applies them: the cluster's, its
// role's, each of its groups' in the inventory's order, its own. A layer
// without files is left out.
func (inv *Inventory) PatchLayers(m *Machine) []PatchLayer {
	role := inv.Cluster.Workers.Patches
	if m.IsControlPlane() {
		role = inv.Cluster.ControlPlane.Patches
	}
	layers := []PatchLayer{{"cluster", inv.Cluster.Patches}, {"role " + m.Role, role}}
	for _, name := range m.Groups {
		if g := inv.Group(name); g != nil {
			layers = append(layers, PatchLayer{"group " + name, g.Patches})
		}
	}
	layers = append(layers, PatchLayer{"machine", m.Patches})
	return slices.DeleteFunc(layers, func(l PatchLayer) bool { return len(l.Files) == 0 })
}
