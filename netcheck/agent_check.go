package netcheck

import (
	"context"
	"fmt"
	"strings"

	"devata.dev/devata/drift"
)

func podNamespace(ref string) string { ns, _, _ := strings.Cut(ref, "/"); return ns }
func podName(ref string) string      { _, n, _ := strings.Cut(ref, "/"); return n }

// agentExec is the kubectl command that runs args in the agent pod.
func agentExec(pod, args string) string {
	return "kubectl -n " + podNamespace(pod) + " exec " + podName(pod) + " -c " + AgentContainer + " -- " + args
}

const nextExecRBAC = "the cilium checks need create on pods/exec in the agent's namespace: kubectl apply -k deploy/ (the devata-netcheck-exec Role), or check with kubectl auth can-i create pods/exec -n "

// checkAgent proves the node's agent runs kube-proxy-free: its pod Ready,
// and its own status (one exec per pass) reporting kube-proxy replacement
// "True", NodePort, Kubernetes connectivity and no failing controllers.
func checkAgent(_ context.Context, t *view) []drift.Result {
	const desired = "agent pod Ready; status: kube-proxy replacement True, NodePort enabled, Kubernetes Ok, no failing controllers"
	var f drift.Findings
	if r, ok := kubeSideFirst(t, desired); ok {
		return []drift.Result{r}
	}
	pod, ok := agentPodOf(t, &f)
	if !ok {
		return []drift.Result{f.Result(desired, "")}
	}
	if pod.Ready {
		f.Saw("pod " + pod.Ref() + " Ready on node " + t.node())
	} else {
		f.Problem(fmt.Sprintf("agent pod %s on node %s is not Ready (%s, %s)", pod.Ref(), t.node(), pod.Phase, pod.NotReady),
			"kubectl -n "+pod.Namespace+" describe pod "+pod.Name+"; kubectl -n "+pod.Namespace+" logs "+pod.Name+" -c cilium-agent --tail 50")
	}
	a := t.Agent
	switch {
	case a == nil:
		f.Unknown(fmt.Errorf("agent status not read: %w", t.AgentSkipped), agentExec(pod.Ref(), "cilium-dbg status"))
	case a.Err != nil && IsForbidden(a.Err):
		f.Unknown(fmt.Errorf("exec into %s forbidden: %w", pod.Ref(), a.Err), nextExecRBAC+pod.Namespace)
	case a.Err != nil:
		f.Unknown(fmt.Errorf("exec into %s: %w", pod.Ref(), a.Err), "kubectl -n "+pod.Namespace+" exec "+pod.Name+" -c cilium-agent -- cilium-dbg status (is the node's kubelet reachable from the API server?)")
	case a.StatusErr != nil:
		f.Unknown(a.StatusErr, agentExec(pod.Ref(), "cilium-dbg status -o json"))
	default:
		for _, p := range EvaluateAgent(a.Status) {
			next := strings.ReplaceAll(p.Next, "POD", pod.Name)
			next = strings.ReplaceAll(next, "-n kube-system", "-n "+pod.Namespace)
			next = strings.ReplaceAll(next, "talosctl -n NODE", talosctlPrefix(t.Talosctl, t.Machine))
			f.Problem(p.Reason, next)
		}
		st := a.Status
		if !f.HasProblems() {
			f.Saw(fmt.Sprintf("cilium-dbg status: KubeProxyReplacement %s, NodePort enabled, Kubernetes %s, %d controllers none failing",
				st.KubeProxyReplacement.Mode, st.Kubernetes.State, len(st.Controllers)))
		}
	}
	return []drift.Result{f.Result(desired, "")}
}

// agentPodOf finds the node's agent pod; without one, f holds why (Unknown
// or Drifted).
func agentPodOf(t *view, f *drift.Findings) (AgentPod, bool) {
	cl := t.Cluster
	switch {
	case cl.AgentErr != nil:
		f.Unknown(cl.AgentErr, "kubectl get daemonsets -A: the cilium checks need list on daemonsets")
		return AgentPod{}, false
	case cl.Agent == nil:
		f.Problem("no cilium agent DaemonSet in the cluster", "helm -n kube-system status cilium; kubectl get daemonsets -A | grep cilium")
		return AgentPod{}, false
	case cl.AgentPodsErr != nil:
		f.Unknown(cl.AgentPodsErr, "kubectl -n "+cl.Agent.Namespace+" get pods -l "+cl.Agent.Selector.String()+": the cilium checks need list on pods")
		return AgentPod{}, false
	}
	pod, ok := cl.AgentPods[t.node()]
	if !ok {
		f.Problem(fmt.Sprintf("no cilium agent pod on node %s", t.node()),
			"kubectl -n "+cl.Agent.Namespace+" get daemonset "+cl.Agent.Name+" -o wide; kubectl describe node "+t.node()+" (taints, or a nodeSelector that leaves it out?)")
		return AgentPod{}, false
	}
	return pod, true
}

// talosRoleNext replaces next with the role advice when err is a permission error.
func talosRoleNext(err error, next string) string {
	return drift.ReadNext(err, next, "MachineConfig needs os:admin, the rest os:reader", "a talosconfig with that role")
}
