package reconcile

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"devata.dev/devata/talosapi"
)

// ciliumDaemonSet is the Cilium agent's DaemonSet, found in any namespace
// (kube-system first), as netcheck finds it.
const ciliumDaemonSet = "cilium"

// cniRuns says whether a CNI runs in the cluster, from positive evidence in
// Kubernetes: a Ready pod of the cilium agent DaemonSet, or any Node Ready
// (a kubelet reports Ready only once its runtime's network is, which needs
// a CNI: nodestatus ReadyCondition). While none does, a Node NotReady for
// want of a CNI (cluster.network.cni none before Cilium is installed) is
// expected and a rollout does not wait for it; once one runs, a Node
// NotReady after a reboot waits for its agent, and the rollout waits for
// the Node (issue 32, item 6). why says what was seen. Without a
// kubeconfig devata cannot tell (runs false, why says so); when the API
// server does not answer it assumes a CNI runs and waits for the Node. A
// CNI once seen running is remembered for the rest of the rollout.
//
// unknown says the API server did not answer (runs is then true): a
// caller whose change did not reboot the machine may go on, since nothing
// it did touched the kubelet or its Node.
func (r *Rollout) cniRuns(ctx context.Context) (runs bool, why string, unknown bool) {
	r.mu.Lock()
	seen := r.cniSeen
	r.mu.Unlock()
	if seen != "" {
		return true, seen, false
	}
	if r.Kube == nil {
		return false, "devata has no kubeconfig, so it cannot tell whether a CNI runs: pass --kubeconfig to have it wait for the Node", false
	}
	cctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	runs, why, err := r.lookForCNI(cctx)
	switch {
	case err != nil:
		return true, fmt.Sprintf("could not tell whether a CNI runs (%v), so it waits for the Node", err), true
	case runs:
		r.mu.Lock()
		r.cniSeen = why
		r.mu.Unlock()
	}
	return runs, why, false
}

func (r *Rollout) lookForCNI(ctx context.Context) (bool, string, error) {
	dss, err := r.Kube.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ciliumDaemonSet})
	if err != nil {
		return false, "", fmt.Errorf("list DaemonSets: %w", err)
	}
	for _, ds := range dss.Items {
		if ds.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		pods, err := r.Kube.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, "", fmt.Errorf("list the pods of DaemonSet %s/%s: %w", ds.Namespace, ds.Name, err)
		}
		for _, p := range pods.Items {
			if podReady(&p) {
				return true, fmt.Sprintf("cilium agent pod %s/%s is Ready on %s", p.Namespace, p.Name, p.Spec.NodeName), nil
			}
		}
	}
	nodes, err := r.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.Everything().String()})
	if err != nil {
		return false, "", fmt.Errorf("list Nodes: %w", err)
	}
	for i := range nodes.Items {
		if talosapi.NodeFactsOf(&nodes.Items[i]).Ready {
			return true, "Node " + nodes.Items[i].Name + " is Ready, so its network plugin runs", nil
		}
	}
	return false, "no CNI runs in the cluster (no cilium agent pod Ready, no Node Ready)", nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
