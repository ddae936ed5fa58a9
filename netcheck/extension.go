package netcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// Extension plugs the cilium checks into a checks.FleetCheck: the Talos
// side reads on the connection the machine checks opened and reuses the
// active config they already hold; the Kubernetes side is one Cluster
// snapshot, read by the first machine that needs it and shared by the rest.
// Build one Extension per pass (as a FleetCheck is built per pass): the
// snapshot lives as long as the Extension. A nil kube makes every
// Kubernetes-side finding Unknown ("no kubeconfig"); CiliumNodeConfigs are
// read through a dynamic client on kube's connection. Each node's agent is
// exec'd into at most once per pass, through ex, inside the machine's turn
// (so --concurrency bounds the execs in flight); a nil ex leaves the agent's
// own status Unknown.
func Extension(kube kubernetes.Interface, ex Execer, inv *inventory.Inventory, opts ...Option) machines.Extension {
	return ExtensionWith(kube, DynamicFor(kube), ex, inv, opts...)
}

// Option changes what an Extension runs.
type Option func(*extOptions)

type extOptions struct {
	probe *ProbeOptions
}

// WithProbe adds the cilium-probe transaction check: per node, two pods
// (host network, pod network) connect to the kubernetes Service ClusterIP;
// each is deleted when it ends. Without it there is no cilium-probe check.
func WithProbe(o ProbeOptions) Option {
	return func(e *extOptions) { o := o.withDefaults(); e.probe = &o }
}

// ExtensionWith is Extension with the dynamic client given.
func ExtensionWith(kube kubernetes.Interface, dyn dynamic.Interface, ex Execer, inv *inventory.Inventory, opts ...Option) machines.Extension {
	var eo extOptions
	for _, opt := range opts {
		opt(&eo)
	}
	checks := Checks()
	if eo.probe != nil {
		checks = append(checks, ProbeCheck(kube, *eo.probe))
	}
	return &extension{checks: checks, ex: ex, expect: ExpectFrom(inv), snap: &snapshot{kube: kube, dyn: dyn}}
}

type extension struct {
	checks []drift.Check[*Target]
	ex     Execer
	expect Expect
	snap   *snapshot
}

func (e *extension) Checks() []drift.Info { return drift.Infos(e.checks) }

func (e *extension) Run(ctx context.Context, c *client.Client, mt *target.Target, want []string) []drift.Result {
	o := mt.Obs
	var no *Observation
	switch {
	case o.Err != nil:
		no = &Observation{Err: o.Err}
	case c == nil:
		no = &Observation{Err: errors.New("no Talos connection")}
	default:
		no = Observe(ctx, c)
	}
	t := &Target{Machine: mt.Machine, Expect: e.expect, Active: o.Active, ActiveErr: o.ConfigErr, Obs: no, Cluster: e.snap.get(ctx), Talosctl: mt.Talosctl}
	if e.expect.KubeProxyReplacement && (slices.Contains(want, CheckAgent) || slices.Contains(want, CheckServices)) {
		t.Agent, t.AgentSkipped = observeAgent(ctx, e.ex, t, slices.Contains(want, CheckServices))
	}
	var out []drift.Result
	for _, ch := range e.checks {
		if slices.Contains(want, ch.Name) {
			out = append(out, ch.Evaluate(ctx, mt.Machine.Name, t)...)
		}
	}
	return out
}

// snapshot reads the Cluster once for every machine of a pass. Machines wait
// for the first read rather than each starting their own; a read cut short
// by its machine's context (timeout, cancel) is not kept, so the next
// machine reads again.
type snapshot struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface

	mu sync.Mutex
	cl *Cluster
}

func (s *snapshot) get(ctx context.Context) *Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		return s.cl
	}
	cl := ObserveCluster(ctx, s.kube, s.dyn)
	if ctx.Err() == nil {
		s.cl = cl
	}
	return cl
}

// observeAgent execs into the node's agent, or says why it did not.
func observeAgent(ctx context.Context, ex Execer, t *Target, frontends bool) (*AgentObservation, error) {
	if err := kubeSide(t); err != nil {
		return nil, err
	}
	cl := t.Cluster
	switch {
	case ex == nil:
		return nil, errors.New("no pods/exec transport")
	case cl.AgentErr != nil:
		return nil, cl.AgentErr
	case cl.Agent == nil:
		return nil, errors.New("no cilium agent DaemonSet")
	case cl.AgentPodsErr != nil:
		return nil, cl.AgentPodsErr
	}
	pod, ok := cl.AgentPods[t.node()]
	switch {
	case !ok:
		return nil, errors.New("no agent pod on node " + t.node())
	case pod.Phase != corev1.PodRunning:
		return nil, fmt.Errorf("agent pod %s is %s, not Running", pod.Ref(), pod.Phase)
	}
	var addrs []string
	if frontends && cl.APIService != nil {
		addrs = cl.APIService.FrontendAddrs()
	}
	return ObserveAgent(ctx, ex, pod, addrs), nil
}
