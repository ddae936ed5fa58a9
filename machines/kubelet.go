package machines

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// checkKubelet combines Talos' kubelet service with the Kubernetes Node: any
// observed problem is Drifted; otherwise any part that could not be read
// makes it Unknown.
func checkKubelet(_ context.Context, t *target.Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o, name := t.Obs, t.Machine.Name
	var problems, evidence []string
	var unknown error
	fix := ""
	switch {
	case o.KubeletErr != nil:
		unknown = o.KubeletErr
	case !o.Kubelet.Running:
		problems = append(problems, "Talos service kubelet is not running")
	case !o.Kubelet.Healthy:
		problems = append(problems, "Talos service kubelet is running but not healthy")
	default:
		evidence = append(evidence, "Service kubelet running, healthy")
	}
	switch {
	case t.Nodes == nil || t.Nodes.Err != nil:
		if unknown == nil {
			if t.Nodes == nil {
				unknown = fmt.Errorf("the Kubernetes Node was not read")
			} else {
				unknown = t.Nodes.Err
			}
		}
	default:
		node, ok := t.Nodes.ByName[name]
		switch {
		case !ok:
			problems = append(problems, "no Kubernetes Node "+name+" registered")
		default:
			evidence = append(evidence, fmt.Sprintf("Node %s Ready=%t kubelet %s", name, node.Ready, node.KubeletVersion))
			var p []string
			p, fix = nodeProblems(t, node)
			if len(problems) > 0 {
				fix = "" // the kubelet service's own problems come first
			}
			problems = append(problems, p...)
		}
	}
	switch {
	case len(problems) > 0:
		next := t.TalosctlFor("service kubelet") + "; " + t.TalosctlFor("logs kubelet") + "; kubectl describe node " + name
		if fix != "" {
			next = fix
		}
		if node, ok := nodeFacts(t, name); ok && talosapi.NetworkNotReady(node.ReadyReason) {
			next = "no CNI runs on the node yet: with cluster.network.cni none, install Cilium (helm install cilium …), then see the cilium checks; kubectl describe node " + name
		}
		return []drift.Result{drift.Drifted(strings.Join(problems, "; "), "kubelet healthy, Node Ready, "+t.KubernetesVersion, problems[0]).
			WithEvidence(evidence...).
			WithNext(next)}
	case unknown != nil:
		next := t.TalosctlFor("service kubelet")
		switch {
		case t.Nodes == nil || errors.Is(t.Nodes.Err, talosapi.ErrNoKubernetes):
			next = "pass --kubeconfig (or set KUBECONFIG) so the Node can be checked"
		case apierrors.IsForbidden(t.Nodes.Err) || apierrors.IsUnauthorized(t.Nodes.Err):
			// in a pod the identity is its service account, and the kubeconfig hint would mislead
			next = "the Kubernetes identity devata uses (the kubeconfig's user, or in a pod its service account) needs list on nodes: deploy/rbac.yaml's ClusterRole devata-node-reader grants it; kubectl auth can-i list nodes"
		case t.Nodes.Err != nil:
			next = "check that the Kubernetes API answers with the same credentials: kubectl get nodes"
		}
		return []drift.Result{drift.Unknown(unknown, next).WithEvidence(evidence...)}
	}
	return []drift.Result{drift.InSync(evidence...)}
}

// nodeProblems is what is wrong with the machine's registered Node: not
// Ready, another kubelet version, labels or taints the inventory gives it
// that it lacks (those Talos sets, and those devata sets through the
// Kubernetes API: viaKubernetes), those devata set and the inventory no
// longer declares. fix is the next step when every problem is such a
// label or taint (the commands that add or remove them), or "".
func nodeProblems(t *target.Target, node talosapi.NodeFacts) (problems []string, fix string) {
	name := t.Machine.Name
	if !node.Ready {
		problems = append(problems, "Node "+name+" is not Ready ("+node.ReadyReason+")")
	}
	if node.KubeletVersion != t.KubernetesVersion {
		problems = append(problems, fmt.Sprintf("kubelet %s, cluster.kubernetesVersion %s", node.KubeletVersion, t.KubernetesVersion))
	}
	others := len(problems)
	if missing := missingLabels(t.Machine.NodeLabels(), node.Labels); len(missing) > 0 {
		problems = append(problems, "Node lacks labels "+strings.Join(missing, ", "))
		others++ // Talos puts them back when it runs the config
	}
	var fixes []string
	if p, cmds := missingTaints(t.Machine.NodeTaints(), node.Taints); p != "" {
		problems = append(problems, p)
		// a worker's Talos may not change its Node's taints (NodeRestriction): only an administrator can
		fixes = append(fixes, "kubectl taint node "+name+" "+strings.Join(cmds, " ")+" (or move them under viaKubernetes.taints: devata apply sets those through the Kubernetes API)")
	}
	var via []string
	if missing := missingLabels(t.Machine.ViaKubernetesLabels(), node.Labels); len(missing) > 0 {
		problems = append(problems, "Node lacks viaKubernetes labels "+strings.Join(missing, ", "))
		via = append(via, "kubectl label node "+name+" "+strings.Join(missing, " ")+" --overwrite")
	}
	if p, cmds := missingTaints(t.Machine.ViaKubernetesTaints(), node.Taints); p != "" {
		problems = append(problems, "Node lacks viaKubernetes "+strings.TrimPrefix(p, "Node lacks "))
		via = append(via, "kubectl taint node "+name+" "+strings.Join(cmds, " "))
	}
	p, cmds, unreadable := strayKeys(t.Machine, node)
	problems = append(problems, p...)
	via = append(via, cmds...)
	if len(via) > 0 {
		fixes = append(fixes, "devata apply (or the reconcile loop) sets and removes the viaKubernetes ones through the Kubernetes API; by hand: "+strings.Join(via, "; "))
	}
	for _, a := range unreadable {
		problems = append(problems, "Node annotation "+a+" is unreadable (not a JSON list of keys), so devata cannot tell which keys it set")
		fixes = append(fixes, "kubectl annotate node "+name+" "+a+"- (devata apply then owns again the keys the inventory declares; remove by hand any it set that the inventory no longer declares)")
	}
	if others > 0 || len(fixes) == 0 {
		return problems, ""
	}
	return problems, strings.Join(fixes, "; ")
}

// strayKeys are the labels and taints devata set on the Node (its owned
// annotations) that the inventory no longer declares and the Node still
// carries: apply and the loop remove them (reconcile SetNodeKeys), and until
// then they are drift. A key the inventory now gives Talos instead (nodeLabels,
// nodeTaints) is not stray: the Node should carry it. cmds are the kubectl
// commands that remove them; unreadable names the owned annotations that
// cannot be read (never quoted: their content came from the cluster).
func strayKeys(m *inventory.Machine, node talosapi.NodeFacts) (problems, cmds, unreadable []string) {
	name := m.Name
	owned := func(annotation, raw string) []string {
		keys, err := talosapi.OwnedKeys(raw)
		if err != nil {
			unreadable = append(unreadable, annotation)
		}
		return keys
	}
	var labels []string
	via, talos := m.ViaKubernetesLabels(), m.NodeLabels()
	for _, k := range owned(talosapi.OwnedLabelsAnnotation, node.OwnedLabels) {
		_, declared := via[k]
		_, byTalos := talos[k]
		if _, on := node.Labels[k]; on && !declared && !byTalos {
			labels = append(labels, k)
		}
	}
	var taints, removals []string
	via, talos = m.ViaKubernetesTaints(), m.NodeTaints()
	for _, k := range owned(talosapi.OwnedTaintsAnnotation, node.OwnedTaints) {
		_, declared := via[k]
		_, byTalos := talos[k]
		on, ok := node.Taints[k]
		if !ok || declared || byTalos {
			continue
		}
		taints = append(taints, k)
		// each of the key's effects (NodeFactsOf: value:Effect or Effect, comma-separated)
		for _, t := range strings.Split(on, ",") {
			removals = append(removals, k+":"+t[strings.LastIndex(t, ":")+1:]+"-")
		}
	}
	slices.Sort(labels)
	slices.Sort(taints)
	slices.Sort(removals)
	const why = " that devata set and the inventory no longer declares"
	if len(labels) > 0 {
		problems = append(problems, "Node carries viaKubernetes labels "+strings.Join(labels, ", ")+why)
		cmds = append(cmds, "kubectl label node "+name+" "+strings.Join(labels, "- ")+"-")
	}
	if len(taints) > 0 {
		problems = append(problems, "Node carries viaKubernetes taints "+strings.Join(taints, ", ")+why)
		cmds = append(cmds, "kubectl taint node "+name+" "+strings.Join(removals, " "))
	}
	return problems, cmds, unreadable
}

// missingLabels are the labels of want the Node lacks or has with another
// value, as k=v, sorted.
func missingLabels(want, got map[string]string) []string {
	var missing []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			missing = append(missing, k+"="+v)
		}
	}
	slices.Sort(missing)
	return missing
}

// missingTaints names the taints the inventory gives the machine (its own
// and its groups', as machine.nodeTaints: key to value:Effect or Effect)
// that its Node does not carry with that value and effect, or "". Taints
// others put on the Node (the control plane's own, a cordon's) are theirs.
// The second result is each missing taint as kubectl taint takes it.
func missingTaints(want, got map[string]string) (string, []string) {
	var missing, fix []string
	for k, w := range want {
		value, effect := inventory.ParseTaint(w)
		canonical := effect // as NodeFactsOf writes it
		if value != "" {
			canonical = value + ":" + effect
		}
		desc := inventory.KubectlTaint(k, value, effect)
		if !slices.Contains(strings.Split(got[k], ","), canonical) {
			fix = append(fix, desc)
			if _, ok := got[k]; ok {
				fix[len(fix)-1] += " --overwrite"
				desc += " (the Node has " + got[k] + ")"
			}
			missing = append(missing, desc)
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	slices.Sort(missing)
	slices.Sort(fix)
	return "Node lacks taints " + strings.Join(missing, ", "), fix
}

// nodeFacts is the Node's facts, when the Nodes were observed.
func nodeFacts(t *target.Target, name string) (talosapi.NodeFacts, bool) {
	if t.Nodes == nil || t.Nodes.Err != nil {
		return talosapi.NodeFacts{}, false
	}
	n, ok := t.Nodes.ByName[name]
	return n, ok
}
