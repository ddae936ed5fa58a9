package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/talosapi"
)

// waitNodes waits until every machine's Node is registered and Ready. With
// cluster.network.cni none no Node can be Ready before the operator installs
// Cilium, which needs the API server this step waits for: then every Node
// registered and NotReady only for want of a CNI is enough, unless Cilium's
// agent DaemonSet is there already (a rebuild from a snapshot): then the
// agents make them Ready and it waits for that. Besides a line for
// each new state, every heartbeat.Every it says what it waits for.
func (s *Sequence) waitNodes(ctx context.Context) (string, error) {
	if s.opts.SkipNodes {
		return "skipped (--skip-nodes)", nil
	}
	path := s.NodesKubeconfig()
	kube, err := talosapi.KubeClient(path)
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(s.opts.Wait)
	last := ""
	beat := heartbeat.Start(s.say, 0, s.opts.Wait, "every Node to register and be Ready (kubeconfig "+path+")")
	defer beat.Stop()
	for {
		nctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		nodes := talosapi.ObserveNodes(nctx, kube)
		cancel()
		waiting, noCNI, agent := s.nodesWaiting(ctx, kube, nodes)
		if len(waiting) == 0 && noCNI > 0 {
			return fmt.Sprintf("%d Nodes registered; %d NotReady until a CNI runs (cluster.network.cni: none): install Cilium next", len(s.inv.Machines), noCNI), nil
		}
		if len(waiting) == 0 {
			return fmt.Sprintf("%d Nodes registered and Ready", len(s.inv.Machines)), nil
		}
		beat.Saw(strings.Join(waiting, "; "))
		if msg := strings.Join(waiting, "; "); msg != last {
			s.say("    waiting (kubeconfig %s): %s", path, msg)
			last = msg
		}
		if time.Now().After(deadline) {
			if agent != "" {
				ns, name, _ := strings.Cut(agent, "/")
				return "", fmt.Errorf("nodes not Ready within %s: %s; see why Cilium's agents do not run there: kubectl --kubeconfig %s -n %s rollout status daemonset/%s, then kubectl -n %s get pods -o wide", s.opts.Wait, strings.Join(waiting, "; "), path, ns, name, ns)
			}
			return "", fmt.Errorf("nodes not Ready within %s: %s (pass --skip-nodes when no Kubernetes API is reachable from here)", s.opts.Wait, strings.Join(waiting, "; "))
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
}

// nodesWaiting says what the Nodes still wait for: not registered, not
// Ready, or NotReady for want of a CNI (noCNI, with cluster.network.cni
// none). When that is all and Cilium's agent DaemonSet is there already
// (agent), those wait for its agents too.
func (s *Sequence) nodesWaiting(ctx context.Context, kube kubernetes.Interface, nodes talosapi.Nodes) (waiting []string, noCNI int, agent string) {
	if nodes.Err != nil {
		return []string{nodes.Err.Error()}, 0, ""
	}
	for i := range s.inv.Machines {
		name := s.inv.Machines[i].Name
		n, ok := nodes.ByName[name]
		switch {
		case !ok:
			waiting = append(waiting, name+" not registered")
		case !n.Ready && s.CNINone() && talosapi.NetworkNotReady(n.ReadyReason):
			noCNI++
		case !n.Ready:
			waiting = append(waiting, name+" not Ready ("+n.ReadyReason+")")
		}
	}
	if len(waiting) > 0 || noCNI == 0 {
		return waiting, noCNI, ""
	}
	// A cluster rebuilt from a snapshot (or one whose operator installed
	// Cilium before this run) has its agent DaemonSet already: the Nodes
	// become Ready without the operator, so wait for them as for any
	// other, and say for what.
	if agent = CiliumAgent(ctx, kube, s.opts.Timeout); agent != "" {
		for i := range s.inv.Machines {
			if n := nodes.ByName[s.inv.Machines[i].Name]; !n.Ready {
				waiting = append(waiting, s.inv.Machines[i].Name+" not Ready until Cilium's agent (DaemonSet "+agent+") runs there")
			}
		}
	}
	return waiting, noCNI, agent
}

// CiliumAgent names Cilium's agent DaemonSet ("kube-system/cilium") when
// the cluster has one, else "": also when it could not be listed (within
// timeout, when positive), so a credential that may not list DaemonSets
// keeps the advice to install one.
func CiliumAgent(ctx context.Context, kube kubernetes.Interface, timeout time.Duration) string {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	agent, err := talosapi.CiliumAgentDaemonSet(ctx, kube)
	if err != nil {
		return ""
	}
	return agent
}
