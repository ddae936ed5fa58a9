package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
)

// NodeWriter writes machines' viaKubernetes labels and taints on their
// Nodes (SetNodeKeys): for apply after its rollout and for the loop. Nothing
// of it goes to Talos.
type NodeWriter struct {
	// Kube is the cluster's API with the admin kubeconfig; nil writes
	// nothing (Run says ErrNoKubeconfig when something is declared).
	Kube kubernetes.Interface
	// DryRun computes every change and writes none.
	DryRun bool
	// IgnoreHold names held machines that may be written anyway (apply
	// --machines NAME --ignore-hold).
	IgnoreHold map[string]bool
}

// NodeWrite is one machine's outcome.
type NodeWrite struct {
	Machine string
	// Change is what was written (or, in a dry run or on a held machine,
	// what would be).
	Change NodeKeysChange
	// Held is the machine's hold when it kept a change from being written.
	Held *inventory.Hold
	// Pending says that the machine declares labels or taints but has no
	// Node yet: the next apply or the loop sets them.
	Pending bool
	Err     error
}

// ErrNoKubeconfig is Run's error when machines declare viaKubernetes
// labels or taints and there is no Kubernetes client to write them with.
var ErrNoKubeconfig = errors.New("no kubeconfig: pass --kubeconfig (or set KUBECONFIG) with the cluster's admin kubeconfig (talosctl kubeconfig) so devata can set them on the Nodes")

// Run writes each machine's declared labels and taints, reading the Nodes
// with one LIST, and writes only the Nodes that differ. A machine that
// declares none still has the keys devata set before removed. Only the
// machines with something to say are returned; err gathers the failures.
func (w NodeWriter) Run(ctx context.Context, machines []*inventory.Machine) ([]NodeWrite, error) {
	declared := false
	for _, m := range machines {
		declared = declared || !NodeKeysOf(m).Empty()
	}
	if w.Kube == nil {
		if declared {
			return nil, ErrNoKubeconfig
		}
		return nil, nil
	}
	nodes, err := listNodes(ctx, w.Kube)
	if err != nil {
		if !declared {
			return nil, nil // nothing declared, nothing known to remove
		}
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	var out []NodeWrite
	var errs *multierror.Error
	for _, m := range machines {
		r, ok := w.one(ctx, m, nodes)
		if !ok {
			continue
		}
		if r.Err != nil {
			errs = multierror.Append(errs, fmt.Errorf("%s: %w", m.Name, r.Err))
		}
		out = append(out, r)
	}
	return out, errs.ErrorOrNil()
}

// one is machine m's write; ok is false when there is nothing to say.
func (w NodeWriter) one(ctx context.Context, m *inventory.Machine, nodes map[string]*corev1.Node) (NodeWrite, bool) {
	want := NodeKeysOf(m)
	node, registered := nodes[m.Name]
	if !registered {
		return NodeWrite{Machine: m.Name, Pending: true}, !want.Empty()
	}
	_, ownsLabels := node.Annotations[OwnedLabelsAnnotation]
	_, ownsTaints := node.Annotations[OwnedTaintsAnnotation]
	if want.Empty() && !ownsLabels && !ownsTaints {
		return NodeWrite{}, false
	}
	hold := m.ActiveHold()
	if w.IgnoreHold[m.Name] {
		hold = nil
	}
	c, err := SetNodeKeys(ctx, w.Kube, m.Name, node, want, w.DryRun || hold != nil)
	switch {
	case apierrors.IsNotFound(err):
		return NodeWrite{Machine: m.Name, Pending: true}, !want.Empty()
	case err != nil:
		return NodeWrite{Machine: m.Name, Err: err}, true
	case !c.Changed():
		return NodeWrite{}, false
	}
	return NodeWrite{Machine: m.Name, Change: c, Held: hold}, true
}

// Plan is the outcome as the plan writes it.
func (r NodeWrite) Plan() plan.NodeKeys {
	k := r.Change.Plan()
	k.Machine = r.Machine
	switch {
	case r.Err != nil:
		k.Error = r.Err.Error()
	case r.Pending:
		k.Pending = true
	case r.Held != nil:
		k.Held = r.Held.Reason
	}
	return k
}

// Lines are the outcome as apply and the loop print it: what was set
// (would be, in a dry run), what a hold kept, what waits for its Node.
func (r NodeWrite) Lines(dryRun bool) []string { return r.Plan().Lines(dryRun) }

// NodeKeysPlan are the outcomes as the plan writes them.
func NodeKeysPlan(ws []NodeWrite) []plan.NodeKeys {
	out := make([]plan.NodeKeys, len(ws))
	for i, w := range ws {
		out[i] = w.Plan()
	}
	return out
}

// listNodes reads every Node with a paginated LIST.
func listNodes(ctx context.Context, kc kubernetes.Interface) (map[string]*corev1.Node, error) {
	out := map[string]*corev1.Node{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := kc.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			out[list.Items[i].Name] = &list.Items[i]
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
}
