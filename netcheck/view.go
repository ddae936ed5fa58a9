package netcheck

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"devata.dev/devata/checks/probe"
	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
)

// Options is what the cilium checks use besides the target: ex reaches
// each node's agent (pods/exec), at most once per machine per pass and
// inside the machine's turn (so --concurrency bounds the execs in flight);
// a nil Exec leaves the agent's own status Unknown. Probe, when set, adds
// the cilium-probe transaction check: per node, two pods (host network, pod
// network) connect to the kubernetes Service ClusterIP; each is deleted
// when it ends. Without it there is no cilium-probe check.
type Options struct {
	Exec  Execer
	Probe *probe.Options
}

// Checks returns the cilium checks in ladder order, cilium-probe last when
// o.Probe asks for it. All fail open: a Talos rollout does not depend on
// Cilium, and is often what fixes a declaration (cluster.proxy.disabled);
// the config check guards rollouts. The Talos side reads on the target's
// connection and reuses the active config the pass holds; the Kubernetes
// side is one Cluster snapshot through the target's client, read by the
// first machine that needs it and shared by the rest of the pass (a nil
// client makes every Kubernetes-side finding Unknown, "no kubeconfig";
// CiliumNodeConfigs are read through a dynamic client on its connection).
func Checks(o Options) []drift.Check[*target.Target] {
	cs := []drift.Check[*target.Target]{
		{Name: CheckDeclaration, Rung: drift.RungDeclaration, Run: o.on(checkDeclaration), Kubernetes: true},
		{Name: CheckAgent, Rung: drift.RungReconciliation, Run: o.on(checkAgent), Kubernetes: true},
		{Name: CheckServices, Rung: drift.RungInfrastructure, Run: o.on(checkServices), Kubernetes: true},
	}
	if o.Probe != nil {
		p := o.Probe.WithDefaults()
		cs = append(cs, drift.Check[*target.Target]{
			Name: CheckProbe, Rung: drift.RungTransaction, Optional: "--probe", Kubernetes: true,
			Run: o.on(func(ctx context.Context, v *view) []drift.Result { return checkProbe(ctx, v, v.kube, p) }),
		})
	}
	return cs
}

// on runs a cilium check on the machine's view.
func (o Options) on(check func(context.Context, *view) []drift.Result) func(context.Context, *target.Target) []drift.Result {
	return func(ctx context.Context, t *target.Target) []drift.Result { return check(ctx, o.viewOf(ctx, t)) }
}

type (
	viewKey    struct{} // a machine's view
	clusterKey struct{} // the pass's Cluster
)

// viewOf is what the cilium checks read of the machine, once per machine.
func (o Options) viewOf(ctx context.Context, t *target.Target) *view {
	return target.Once(t, viewKey{}, func() *view {
		v := &view{Machine: t.Machine, Expect: ExpectFrom(t.Inventory), Talosctl: t.Talosctl, kube: t.Kube}
		mo := t.Obs
		switch {
		case mo == nil:
		case mo.Err != nil:
			v.Obs = &Observation{Err: mo.Err}
		case t.Client == nil:
			v.Obs = &Observation{Err: errors.New("no Talos connection")}
		default:
			v.Obs = Observe(ctx, t.Client)
		}
		if mo != nil {
			v.Active, v.ActiveErr = mo.Active, mo.ConfigErr
		}
		v.Cluster = cluster(ctx, t)
		if v.Expect.KubeProxyReplacement && (t.Runs(CheckAgent) || t.Runs(CheckServices)) {
			v.Agent, v.AgentSkipped = observeAgent(ctx, o.Exec, v, t.Runs(CheckServices))
		}
		return v
	})
}

// cluster is the pass's Cluster snapshot. A read cut short by its
// machine's context (timeout, cancel) is not kept, so the next machine
// reads again.
func cluster(ctx context.Context, t *target.Target) *Cluster {
	return target.Shared(ctx, t, clusterKey{}, func(ctx context.Context) (*Cluster, bool) {
		cl := ObserveCluster(ctx, t.Kube, DynamicFor(t.Kube))
		return cl, ctx.Err() == nil
	})
}

// observeAgent execs into the node's agent, or says why it did not.
func observeAgent(ctx context.Context, ex Execer, t *view, frontends bool) (*AgentObservation, error) {
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
