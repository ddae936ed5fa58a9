package netcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks/probe"
	"devata.dev/devata/drift"
)

// CheckProbe is the transaction check: it runs only with --probe.
const CheckProbe = "cilium-probe"

// ProbeResult is one connect probe's outcome.
type ProbeResult struct {
	// Pod is "namespace/name" of the pod that ran (and was deleted).
	Pod string
	// Reached is true when the pod connected to the target.
	Reached bool
	// Message is what the pod said when it did not (agnhost: TIMEOUT,
	// REFUSED, OTHER: …), with its exit code.
	Message string
	// Err says why there is no outcome: the pod could not be created
	// (forbidden, rejected by Pod Security), or did not finish in time.
	Err error
}

// Probe runs one short-lived pod pinned to node (on the host network or the
// pod network) that opens a TCP connection to target ("10.96.0.1:443")
// with agnhost connect, waits for it to end and always deletes it
// (probe.Run).
func Probe(ctx context.Context, kube kubernetes.Interface, opts probe.Options, node, target string, hostNetwork bool) ProbeResult {
	network := "pod"
	if hostNetwork {
		network = "host"
	}
	r := probe.Run(ctx, kube, opts, probe.Spec{
		Node: node, Network: network, HostNetwork: hostNetwork,
		Args:        []string{"connect", target, "--timeout=5s"},
		Annotations: map[string]string{"devata.dev/probe-target": target},
	})
	out := ProbeResult{Pod: r.Pod, Err: r.Err, Reached: r.Succeeded}
	if !r.Succeeded && r.Message != "" {
		out.Message = r.Failure()
	}
	return out
}

// probeTarget is the kubernetes Service frontend the probes connect to:
// the first ClusterIP (IPv4 sorts first) and its port.
func probeTarget(cl *Cluster) (string, bool) {
	if cl.APIService == nil {
		return "", false
	}
	for _, a := range cl.APIService.FrontendAddrs() {
		addr, _, _ := strings.Cut(a, "/")
		return addr, true
	}
	return "", false
}

// The cilium-probe check (Checks with Options.Probe) is the transaction
// rung, failing open like the other cilium checks. It creates pods through
// the target's Kubernetes client (and deletes them), so it runs only when
// asked for.

// checkProbe runs the transaction: from this node, one pod on the host
// network and one on the pod network connect to the kubernetes Service's
// ClusterIP, which only Cilium's kube-proxy replacement routes once
// kube-proxy is gone.
func checkProbe(ctx context.Context, t *view, kube kubernetes.Interface, opts probe.Options) []drift.Result {
	opts = opts.WithDefaults()
	const desired = "from the host and the pod network, the kubernetes Service ClusterIP accepts a connection"
	var f drift.Findings
	if r, ok := kubeSideFirst(t, desired); ok {
		return []drift.Result{r}
	}
	if t.Cluster.APIServiceErr != nil {
		f.Unknown(t.Cluster.APIServiceErr, "kubectl -n default get service kubernetes")
		return []drift.Result{f.Result(desired, "")}
	}
	target, ok := probeTarget(t.Cluster)
	if !ok {
		f.Unknown(errors.New("Service default/kubernetes has no ClusterIP to probe"), "kubectl -n default get service kubernetes -o yaml")
		return []drift.Result{f.Result(desired, "")}
	}
	var results [2]ProbeResult
	var wg sync.WaitGroup
	for i, host := range []bool{true, false} {
		wg.Go(func() { results[i] = Probe(ctx, kube, opts, t.node(), target, host) })
	}
	wg.Wait()
	for i, where := range []string{"host network", "pod network"} {
		r := results[i]
		switch {
		case r.Err != nil:
			f.Unknown(r.Err, probe.Next(r.Err, opts, t.node()))
		case r.Reached:
			f.Saw(fmt.Sprintf("%s on node %s: connected to %s (Service default/kubernetes), pod %s", where, t.node(), target, r.Pod))
		default:
			next := "cilium-dbg shell -- db/get frontends " + target + "/TCP"
			if pod, ok := t.Cluster.AgentPods[t.node()]; ok {
				next = agentExec(pod.Ref(), next) + "; " + agentExec(pod.Ref(), "cilium-dbg monitor --type drop")
			}
			f.Problem(fmt.Sprintf("from the %s on node %s, %s (Service default/kubernetes) did not accept a connection: %s", where, t.node(), target, r.Message), next)
		}
	}
	return []drift.Result{f.Result(desired, "")}
}
