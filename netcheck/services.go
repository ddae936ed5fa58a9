package netcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"devata.dev/devata/drift"
)

// checkServices proves Services are routed by the agent and by nothing
// else: no kube-proxy DaemonSet anywhere and no kube-proxy pod on this node
// (Talos never deletes manifests it created, so a cluster switched to
// proxy.disabled keeps both, and their iptables rules, until someone
// deletes them); and the agent's frontends for the kubernetes Service hold
// exactly the backends its EndpointSlices list, reconciled.
func checkServices(_ context.Context, t *view) []drift.Result {
	var f drift.Findings
	cl := t.Cluster
	if r, ok := kubeSideFirst(t, servicesDesired); ok {
		return []drift.Result{r}
	}
	switch {
	case cl.KubeProxyErr != nil:
		f.Unknown(cl.KubeProxyErr, "kubectl get daemonsets,pods -A -l k8s-app=kube-proxy: the cilium checks need list on daemonsets and pods")
	default:
		for _, ref := range cl.KubeProxyDaemonSets {
			ns, name, _ := strings.Cut(ref, "/")
			f.Problem("kube-proxy DaemonSet "+ref+" still present",
				"Talos never deletes manifests it created: confirm cluster.proxy.disabled ("+t.talosctl("get machineconfig v1alpha1 -o yaml")+"), then kubectl -n "+ns+" delete daemonset "+name+"; its iptables rules stay until each node reboots")
		}
		for _, ref := range cl.KubeProxyPods {
			if cl.KubeProxyPodNodes[ref] != t.node() {
				continue
			}
			ns, name, _ := strings.Cut(ref, "/")
			f.Problem("kube-proxy pod "+ref+" runs on node "+t.node(),
				"kubectl -n "+ns+" get pod "+name+" -o yaml (who owns it?); delete its DaemonSet, or the pod if it is static")
		}
		if !f.HasProblems() {
			f.Saw(fmt.Sprintf("no kube-proxy DaemonSet in the cluster, no kube-proxy pod on node %s", t.node()))
		}
	}
	compareFrontends(t, &f)
	return []drift.Result{f.Result(servicesDesired, "")}
}

const servicesDesired = "no kube-proxy; the agent's frontends for default/kubernetes hold its EndpointSlices' backends, reconciled"

// stuckAfter is how long a frontend may stay Pending before it counts as
// stuck: the agent reconciles a change within seconds.
const stuckAfter = time.Minute

// compareFrontends compares the agent's frontends for the kubernetes
// Service with what its EndpointSlices say.
func compareFrontends(t *view, f *drift.Findings) {
	cl, a := t.Cluster, t.Agent
	switch {
	case cl.APIServiceErr != nil:
		f.Unknown(cl.APIServiceErr, "kubectl get service,endpointslices -n default -l kubernetes.io/service-name=kubernetes: the cilium checks need get on services and list on endpointslices")
		return
	case a == nil:
		f.Unknown(fmt.Errorf("frontends not read: %w", t.AgentSkipped), "see the cilium-agent result")
		return
	case a.Err != nil:
		f.Unknown(fmt.Errorf("frontends not read: %w", a.Err), "see the cilium-agent result")
		return
	case a.FrontendsErr != nil:
		f.Unknown(a.FrontendsErr, agentExec(a.Pod, "cilium-dbg shell -- db/show frontends"))
		return
	}
	svc := cl.APIService
	if len(svc.Frontends) == 0 {
		f.Unknown(errors.New("Service default/kubernetes has no ClusterIP"), "kubectl -n default get service kubernetes -o yaml")
		return
	}
	source := "db/get frontends"
	if a.FromServiceList {
		source = "service list (no statedb shell: stuck frontends not visible)"
	}
	for _, addr := range svc.FrontendAddrs() {
		want := svc.Frontends[addr]
		row, ok := a.Frontends[addr]
		if !ok {
			f.Problem(fmt.Sprintf("agent %s has no frontend for the kubernetes Service ClusterIP %s", a.Pod, addr),
				agentExec(a.Pod, "cilium-dbg shell -- db/show frontends")+"; kubectl -n "+podNamespace(a.Pod)+" logs "+podName(a.Pod)+" -c cilium-agent | grep -i 'default/kubernetes'")
			continue
		}
		got := row.BackendAddrs()
		missing, extra := setDiff(want, got), setDiff(got, want)
		for _, b := range missing {
			f.Problem(fmt.Sprintf("frontend %s lacks backend %s that EndpointSlice %s lists", addr, b, strings.Join(svc.Slices, ",")),
				agentExec(a.Pod, "cilium-dbg shell -- db/get frontends "+addr)+"; the agent's EndpointSlice watch may be stuck: kubectl -n "+podNamespace(a.Pod)+" logs "+podName(a.Pod)+" -c cilium-agent, then delete the pod")
		}
		for _, b := range extra {
			f.Problem(fmt.Sprintf("frontend %s routes to backend %s that no EndpointSlice lists", addr, b),
				agentExec(a.Pod, "cilium-dbg shell -- db/get frontends "+addr)+"; kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes -o yaml")
		}
		switch kind := row.Status.Kind; {
		case kind == "Error":
			msg := ""
			if row.Status.Error != nil {
				msg = ": " + *row.Status.Error
			}
			f.Problem(fmt.Sprintf("frontend %s failed to reconcile into the BPF maps%s", addr, msg),
				agentExec(a.Pod, "cilium-dbg shell -- db/show frontends")+"; kubectl -n "+podNamespace(a.Pod)+" logs "+podName(a.Pod)+" -c cilium-agent | grep -i frontend")
		case kind == "Pending" && !row.Status.UpdatedAt.IsZero() && time.Since(row.Status.UpdatedAt) > stuckAfter:
			f.Problem(fmt.Sprintf("frontend %s stuck Pending since %s", addr, row.Status.UpdatedAt.UTC().Format(time.RFC3339)),
				agentExec(a.Pod, "cilium-dbg shell -- db/show frontends")+"; kubectl -n "+podNamespace(a.Pod)+" logs "+podName(a.Pod)+" -c cilium-agent | grep -i reconcil")
		}
		if len(missing)+len(extra) == 0 {
			f.Saw(fmt.Sprintf("agent %s %s: frontend %s → %s (%s)", a.Pod, source, addr, strings.Join(got, ","), orDash(row.Status.Kind)))
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// setDiff is what a has and b lacks, case-insensitively.
func setDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y string) bool { return strings.EqualFold(x, y) }) {
			out = append(out, x)
		}
	}
	return out
}
