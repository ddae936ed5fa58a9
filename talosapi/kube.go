package talosapi

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NodeFacts are the small facts the kubelet check needs from a Kubernetes Node.
type NodeFacts struct {
	Ready          bool
	ReadyReason    string
	KubeletVersion string
	Labels         map[string]string
	// Taints are the Node's taints as Talos writes them: key to value:Effect,
	// or Effect alone when the value is empty.
	Taints map[string]string
	// OwnedLabels and OwnedTaints are the Node's annotations
	// OwnedLabelsAnnotation and OwnedTaintsAnnotation as it has them ("" when
	// absent), unread: OwnedKeys reads them, and the check says when one
	// cannot be.
	OwnedLabels, OwnedTaints string
}

// Nodes is one observation of every Node in the cluster, read with a single
// paginated LIST per pass rather than a GET per machine.
type Nodes struct {
	ByName map[string]NodeFacts
	// Err is set when the Nodes could not be listed (no kubeconfig, unreachable,
	// forbidden): every Kubernetes-side fact is then Unknown.
	Err error
}

// NetworkNotReady reports a Node NotReady only because no CNI runs on it
// (the kubelet's NetworkPluginNotReady): what every Node of a cluster with
// cluster.network.cni none shows until Cilium is installed.
func NetworkNotReady(readyReason string) bool {
	return strings.Contains(readyReason, "NetworkPluginNotReady") || strings.Contains(readyReason, "cni plugin not initialized")
}

// KubeClient builds a client from a kubeconfig file.
func KubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := KubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// KubeConfig loads a kubeconfig into a client config with devata's rate
// limits (a pass makes a handful of requests, plus one exec per node).
// kubeconfig is one file, which must exist, or a list of them as KUBECONFIG
// holds it (a:b, filepath.SplitList): merged as kubectl merges them, each
// name (context, cluster, user, current-context) from the first file that
// sets it; missing files in a list are skipped.
func KubeConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(kubeconfigRules(kubeconfig), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// kubeconfigRules are client-go's loading rules for a --kubeconfig or
// KUBECONFIG value. Not NewDefaultClientConfigLoadingRules: it reads the
// process's own KUBECONFIG (devata's caller resolved that already, maybe
// from a flag or settings file instead) and migrates files under ~/.kube.
func kubeconfigRules(kubeconfig string) *clientcmd.ClientConfigLoadingRules {
	paths := filepath.SplitList(kubeconfig)
	if len(paths) == 1 {
		return &clientcmd.ClientConfigLoadingRules{ExplicitPath: paths[0]}
	}
	return &clientcmd.ClientConfigLoadingRules{Precedence: paths}
}

// NodeFactsOf reads the facts from a Node.
func NodeFactsOf(n *corev1.Node) NodeFacts {
	f := NodeFacts{KubeletVersion: n.Status.NodeInfo.KubeletVersion, Labels: n.Labels, ReadyReason: "no Ready condition",
		OwnedLabels: n.Annotations[OwnedLabelsAnnotation], OwnedTaints: n.Annotations[OwnedTaintsAnnotation]}
	for _, tn := range n.Spec.Taints {
		if f.Taints == nil {
			f.Taints = map[string]string{}
		}
		// a key may repeat with another effect; keep each as Talos would write it
		v := string(tn.Effect)
		if tn.Value != "" {
			v = tn.Value + ":" + v
		}
		if prev, ok := f.Taints[tn.Key]; ok {
			v = prev + "," + v
		}
		f.Taints[tn.Key] = v
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			f.Ready = c.Status == corev1.ConditionTrue
			f.ReadyReason = c.Reason
			if c.Message != "" {
				f.ReadyReason += ": " + c.Message
			}
		}
	}
	return f
}

// ErrNoKubernetes is Nodes.Err when there was no Kubernetes client to read them with.
var ErrNoKubernetes = errors.New("no kubeconfig given: pass --kubeconfig or set KUBECONFIG to check Nodes")

// ObserveNodes lists the cluster's Nodes. A nil client gives Err saying why.
func ObserveNodes(ctx context.Context, kc kubernetes.Interface) Nodes {
	if kc == nil {
		return Nodes{Err: ErrNoKubernetes}
	}
	out := Nodes{ByName: map[string]NodeFacts{}}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := kc.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return Nodes{Err: fmt.Errorf("list Nodes: %w", err)}
		}
		for i := range list.Items {
			out.ByName[list.Items[i].Name] = NodeFactsOf(&list.Items[i])
		}
		if list.Continue == "" {
			return out
		}
		opts.Continue = list.Continue
	}
}

// CiliumAgentDaemonSet names Cilium's agent DaemonSet as "namespace/name":
// kube-system/cilium as Helm installs it, else a "cilium" DaemonSet in
// another namespace (as the cilium checks find it); "" when the cluster
// has none. It lists only DaemonSets of that name.
func CiliumAgentDaemonSet(ctx context.Context, kube kubernetes.Interface) (string, error) {
	if kube == nil {
		return "", ErrNoKubernetes
	}
	list, err := kube.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=cilium"})
	if err != nil {
		return "", fmt.Errorf("list DaemonSets: %w", err)
	}
	found := ""
	for _, ds := range list.Items {
		if found == "" || ds.Namespace == metav1.NamespaceSystem {
			found = ds.Namespace + "/" + ds.Name
		}
	}
	return found, nil
}
