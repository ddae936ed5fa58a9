package netcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/labels"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
)

// Check names, as `devata drift --checks` takes them.
const (
	CheckDeclaration = "cilium-declaration"
	CheckAgent       = "cilium-agent"
	CheckServices    = "cilium-services"
)

// Expect is what the inventory says about Cilium and kube-proxy.
type Expect struct {
	CNI                  string // cluster.network.cni: "none" means Cilium is installed separately
	KubeProxy            bool   // cluster.network.kubeProxy
	KubeProxyReplacement bool   // cluster.cilium.kubeProxyReplacement
	ServiceHost          string // cluster.cilium.k8sServiceHost
	ServicePort          int    // cluster.cilium.k8sServicePort
}

// ExpectFrom reads the expectations of a loaded (defaulted) inventory.
func ExpectFrom(inv *inventory.Inventory) Expect {
	c := inv.Cluster
	e := Expect{CNI: c.Network.CNI, ServiceHost: c.Cilium.K8sServiceHost, ServicePort: c.Cilium.K8sServicePort}
	if c.Network.KubeProxy != nil {
		e.KubeProxy = *c.Network.KubeProxy
	}
	if c.Cilium.KubeProxyReplacement != nil {
		e.KubeProxyReplacement = *c.Cilium.KubeProxyReplacement
	}
	return e
}

// viaKubePrism reports whether the agents reach the API server through the
// node's KubePrism, which Talos serves on localhost.
func (e Expect) viaKubePrism() bool {
	h := strings.Trim(e.ServiceHost, "[]")
	return h == "localhost" || net.ParseIP(h).IsLoopback()
}

// Target is everything the cilium checks need about one node.
type Target struct {
	Machine *inventory.Machine
	Expect  Expect
	// Active is the node's active MachineConfig (v1alpha1) as Talos stores it
	// (machines.Observation.Active); ActiveErr says why it could not be read.
	Active    []byte
	ActiveErr error
	// Obs is what Observe read over the Talos API; nil means not observed.
	Obs *Observation
	// Cluster is the pass's Kubernetes snapshot, shared by every node; nil
	// means Kubernetes was not consulted.
	Cluster *Cluster
	// Agent is what the one exec into the node's agent returned; nil when
	// there was none (see AgentSkipped).
	Agent *AgentObservation
	// AgentSkipped says why the agent was not exec'd into, when it was not.
	AgentSkipped error
}

func (t *Target) addr() string { return t.Machine.Address }

func (t *Target) talosctl(args string) string { return "talosctl -n " + t.addr() + " " + args }

// node is the Kubernetes Node name of the machine, as the kubelet check has it.
func (t *Target) node() string { return t.Machine.Name }

// Checks returns the cilium checks in ladder order. All fail open: a Talos
// rollout does not depend on Cilium, and is often what fixes a declaration
// (cluster.proxy.disabled); the config check guards rollouts.
func Checks() []drift.Check[*Target] {
	return []drift.Check[*Target]{
		{Name: CheckDeclaration, Rung: drift.RungDeclaration, Run: checkDeclaration},
		{Name: CheckAgent, Rung: drift.RungReconciliation, Run: checkAgent},
		{Name: CheckServices, Rung: drift.RungInfrastructure, Run: checkServices},
	}
}

// Problem is one observed disagreement with the inventory: what is wrong and
// the next thing to inspect or run.
type Problem struct {
	Reason string
	Next   string
}

// notExpected is the InSync of a cilium check when the inventory does not ask
// for kube-proxy replacement: there is nothing for it to prove.
func notExpected(t *Target) (drift.Result, bool) {
	if t.Expect.KubeProxyReplacement {
		return drift.Result{}, false
	}
	return drift.InSync("cluster.cilium.kubeProxyReplacement is false: no kube-proxy replacement expected"), true
}

// kubeSide returns why the Kubernetes snapshot cannot be used, if it cannot.
func kubeSide(t *Target) error {
	switch {
	case t.Cluster == nil:
		return errors.New("Kubernetes was not consulted")
	case t.Cluster.Err != nil:
		return t.Cluster.Err
	}
	return nil
}

const nextKubeconfig = "pass --kubeconfig (or set KUBECONFIG) so the cluster's Cilium objects can be read"

// checkDeclaration proves the node is declared kube-proxy-free everywhere
// that decides it: the active Talos config, Talos' applied manifests and
// KubePrism, the agent DaemonSet, cilium-config and CiliumNodeConfigs.
func checkDeclaration(_ context.Context, t *Target) []drift.Result {
	if t.Obs != nil && t.Obs.Err != nil {
		// unreachable: Unknown even when nothing is expected (an Unknown
		// is never reported as InSync)
		return []drift.Result{drift.Unknown(t.Obs.Err, "check that "+t.Machine.Name+" is up and its Talos API reachable: "+t.talosctl("version"))}
	}
	if r, ok := notExpected(t); ok {
		return []drift.Result{r}
	}
	var f drift.Findings
	e := t.Expect
	desired := fmt.Sprintf("cni %s, proxy disabled, kube-proxy-replacement true, agent → %s:%d", e.CNI, e.ServiceHost, e.ServicePort)
	declareTalosConfig(t, &f)
	declareTalosResources(t, &f)
	declareKubernetes(t, &f)
	return []drift.Result{f.Result(desired, "")}
}

func declareTalosConfig(t *Target, f *drift.Findings) {
	if t.ActiveErr != nil {
		f.Unknown(t.ActiveErr, talosRoleNext(t.ActiveErr, t.talosctl("get machineconfig v1alpha1 -o yaml")))
		return
	}
	if t.Active == nil {
		f.Unknown(errors.New("the active MachineConfig was not read"), t.talosctl("get machineconfig v1alpha1 -o yaml"))
		return
	}
	cfg, err := configloader.NewFromBytes(t.Active)
	if err != nil {
		f.Unknown(fmt.Errorf("active config does not load: %w", err), t.talosctl("get machineconfig v1alpha1 -o yaml"))
		return
	}
	cc := cfg.Cluster()
	if cc == nil {
		f.Problem("active config has no cluster section", "devata apply --machines "+t.Machine.Name)
		return
	}
	cni := ""
	if n := cc.Network(); n != nil && n.CNI() != nil {
		cni = n.CNI().Name()
	}
	if cni != t.Expect.CNI {
		f.Problem(fmt.Sprintf("active config has cluster.network.cni.name %q, inventory %q", cni, t.Expect.CNI),
			"devata apply --machines "+t.Machine.Name+" (then "+t.talosctl("get machineconfig v1alpha1 -o yaml")+")")
	} else {
		f.Saw("MachineConfig cluster.network.cni.name " + cni)
	}
	// Talos applies the kube-proxy manifest from control planes only; a
	// worker's config has no cluster.proxy section (it reads as enabled).
	if !t.Machine.IsControlPlane() {
		f.Saw("cluster.proxy is decided by the control planes' configs")
		return
	}
	proxyOn := cc.Proxy() != nil && cc.Proxy().Enabled()
	if proxyOn != t.Expect.KubeProxy {
		f.Problem(fmt.Sprintf("active config has cluster.proxy.disabled %t, inventory kubeProxy %t", !proxyOn, t.Expect.KubeProxy),
			"devata apply --machines "+t.Machine.Name+"; Talos then stops applying kube-proxy but never deletes it: see cilium-services")
	} else {
		f.Saw(fmt.Sprintf("MachineConfig cluster.proxy.disabled %t", !proxyOn))
	}
}

func declareTalosResources(t *Target, f *drift.Findings) {
	o := t.Obs
	if o == nil {
		f.Unknown(errors.New("Talos resources were not observed"), t.talosctl("get manifeststatus"))
		return
	}
	switch {
	case o.ManifestsErr != nil:
		f.Unknown(o.ManifestsErr, talosRoleNext(o.ManifestsErr, t.talosctl("get manifeststatus -o yaml")))
	case !o.ManifestsFound:
		f.Saw("no ManifestStatus (this node applies no bootstrap manifests)")
	default:
		if i := slices.IndexFunc(o.Manifests, func(m string) bool { return strings.Contains(m, "kube-proxy") }); i >= 0 && !t.Expect.KubeProxy {
			f.Problem("Talos applies the kube-proxy manifest "+o.Manifests[i],
				"set cluster.proxy.disabled (inventory kubeProxy: false) and devata apply --machines "+t.Machine.Name+"; "+t.talosctl("get manifeststatus -o yaml"))
		} else {
			f.Saw("ManifestStatus without kube-proxy")
		}
	}
	if !t.Expect.viaKubePrism() {
		return
	}
	if o.KubePrismErr != nil {
		f.Unknown(o.KubePrismErr, talosRoleNext(o.KubePrismErr, t.talosctl("get kubeprismstatuses")))
		return
	}
	for _, p := range EvaluateKubePrism(t.Expect, o.KubePrism, o.KubePrismFound, t.talosctl("")) {
		f.Problem(p.Reason, p.Next)
	}
	if o.KubePrismFound {
		f.Saw(fmt.Sprintf("KubePrismStatuses %s healthy %t", o.KubePrism.Host, o.KubePrism.Healthy))
	}
}

// EvaluateKubePrism checks Talos' KubePrism status on a node whose agent is
// pointed at localhost (e.ServiceHost): it must run, be healthy and listen on
// e.ServicePort. talosctl is the node's "talosctl -n ADDR " prefix for the
// next steps. An unread status (err) is the caller's business.
func EvaluateKubePrism(e Expect, kp KubePrism, found bool, talosctl string) []Problem {
	target := fmt.Sprintf("%s:%d", e.ServiceHost, e.ServicePort)
	if !found {
		return []Problem{{
			Reason: "KubePrism is not running on the node, but the cilium agent is pointed at " + target,
			Next:   talosctl + "get kubeprismconfig; enable machine.features.kubePrism (port " + strconv.Itoa(e.ServicePort) + ") in a patch and devata apply",
		}}
	}
	var ps []Problem
	if !kp.Healthy {
		ps = append(ps, Problem{
			Reason: "KubePrism at " + kp.Host + " is not healthy: the cilium agent cannot reach the API server through " + target,
			Next:   talosctl + "get kubeprismendpoints -o yaml (are the control planes' API servers up?); " + talosctl + "logs kubelet",
		})
	}
	if _, port, err := net.SplitHostPort(kp.Host); err == nil && port != strconv.Itoa(e.ServicePort) {
		ps = append(ps, Problem{
			Reason: "KubePrism listens on " + kp.Host + ", the inventory's k8sServicePort is " + strconv.Itoa(e.ServicePort),
			Next:   "set machine.features.kubePrism.port or cluster.cilium.k8sServicePort so they agree; " + talosctl + "get kubeprismconfig -o yaml",
		})
	}
	return ps
}

func declareKubernetes(t *Target, f *drift.Findings) {
	if err := kubeSide(t); err != nil {
		f.Unknown(err, nextKubeconfig)
		return
	}
	cl, e, node := t.Cluster, t.Expect, t.node()
	switch {
	case cl.AgentErr != nil:
		f.Unknown(cl.AgentErr, "kubectl get daemonsets -A: netcheck needs list on daemonsets")
	case cl.Agent == nil:
		f.Problem("no cilium agent DaemonSet in the cluster", "helm -n kube-system status cilium; kubectl get daemonsets -A -l k8s-app=cilium")
	default:
		a := cl.Agent
		ref := a.Namespace + "/" + a.Name
		next := "kubectl -n " + a.Namespace + " get daemonset " + a.Name + " -o yaml; set k8sServiceHost/k8sServicePort in the Helm values (helm upgrade cilium … --reuse-values)"
		for _, kv := range []struct{ env, want string }{{EnvServiceHost, e.ServiceHost}, {EnvServicePort, strconv.Itoa(e.ServicePort)}} {
			got, ok := a.Env[kv.env]
			switch {
			case slices.Contains(a.ValueFrom, kv.env):
				f.Unknown(fmt.Errorf("DaemonSet %s sets %s through valueFrom, which netcheck does not resolve", ref, kv.env), next)
			case !ok:
				f.Problem(fmt.Sprintf("DaemonSet %s container %s has no %s (inventory %s)", ref, AgentContainer, kv.env, kv.want), next)
			case got != kv.want:
				f.Problem(fmt.Sprintf("DaemonSet %s has %s=%s, inventory %s", ref, kv.env, got, kv.want), next)
			default:
				f.Saw(fmt.Sprintf("DaemonSet %s %s=%s", ref, kv.env, got))
			}
		}
	}
	ns := "kube-system"
	if cl.Agent != nil {
		ns = cl.Agent.Namespace
	}
	switch {
	case cl.ConfigErr != nil:
		f.Unknown(cl.ConfigErr, "kubectl -n "+ns+" get configmap "+ConfigMapName+": netcheck needs get on configmaps")
	case cl.Config == nil:
		f.Problem("no ConfigMap "+ns+"/"+ConfigMapName, "helm -n "+ns+" status cilium")
	case cl.Config[KeyKPR] != "true":
		f.Problem(fmt.Sprintf("ConfigMap %s/%s has %s=%q, want \"true\"", ns, ConfigMapName, KeyKPR, cl.Config[KeyKPR]),
			"set kubeProxyReplacement=true in the Helm values (helm upgrade cilium … --reuse-values --set kubeProxyReplacement=true), then restart the agents: kubectl -n "+ns+" rollout restart daemonset "+AgentDaemonSet)
	default:
		f.Saw(fmt.Sprintf("ConfigMap %s/%s %s=true", ns, ConfigMapName, KeyKPR))
	}
	declareNodeConfigs(cl, node, f)
}

// declareNodeConfigs finds the CiliumNodeConfigs that override
// kube-proxy-replacement on this node: Cilium applies them on top of
// cilium-config, so one of them turns KPR off for the nodes it selects.
func declareNodeConfigs(cl *Cluster, node string, f *drift.Findings) {
	const next = "kubectl get ciliumnodeconfigs -A: netcheck needs list on ciliumnodeconfigs.cilium.io"
	switch {
	case cl.NodeConfigsErr != nil:
		f.Unknown(cl.NodeConfigsErr, next)
		return
	case !cl.NodeConfigsCRD:
		f.Saw("no CiliumNodeConfig resource served")
		return
	}
	var overriding []NodeConfig
	for _, nc := range cl.NodeConfigs {
		if _, ok := nc.Defaults[KeyKPR]; ok {
			overriding = append(overriding, nc)
		}
	}
	if len(overriding) == 0 {
		f.Saw(fmt.Sprintf("%d CiliumNodeConfigs, none overrides %s", len(cl.NodeConfigs), KeyKPR))
		return
	}
	if cl.NodesErr != nil {
		f.Unknown(fmt.Errorf("CiliumNodeConfigs override %s but the Nodes were not read: %w", KeyKPR, cl.NodesErr), "kubectl get nodes --show-labels: netcheck needs list on nodes")
		return
	}
	nodeLabels, ok := cl.NodeLabels[node]
	if !ok {
		f.Unknown(fmt.Errorf("CiliumNodeConfigs override %s but no Node %s is registered to match their selectors against", KeyKPR, node), "kubectl get node "+node)
		return
	}
	matched := false
	for _, nc := range overriding {
		if !nc.Selector.Matches(labels.Set(nodeLabels)) {
			continue
		}
		matched = true
		if v := nc.Defaults[KeyKPR]; v != "true" {
			f.Problem(fmt.Sprintf("CiliumNodeConfig %s sets %s=%q on node %s", nc.Ref(), KeyKPR, v, node),
				"kubectl -n "+nc.Namespace+" get ciliumnodeconfig "+nc.Name+" -o yaml: remove the override (or narrow its nodeSelector), then delete the node's cilium agent pod so it restarts with cilium-config")
		} else {
			f.Saw(fmt.Sprintf("CiliumNodeConfig %s sets %s=true", nc.Ref(), KeyKPR))
		}
	}
	if !matched {
		f.Saw(fmt.Sprintf("no CiliumNodeConfig overriding %s selects node %s", KeyKPR, node))
	}
}

// checkServices proves Services are routed by the agent and by nothing
// else: no kube-proxy DaemonSet anywhere and no kube-proxy pod on this node
// (Talos never deletes manifests it created, so a cluster switched to
// proxy.disabled keeps both, and their iptables rules, until someone
// deletes them); and the agent's frontends for the kubernetes Service hold
// exactly the backends its EndpointSlices list, reconciled.
func checkServices(_ context.Context, t *Target) []drift.Result {
	var f drift.Findings
	cl := t.Cluster
	if err := kubeSide(t); err != nil {
		// not consulted: Unknown even when nothing is expected
		f.Unknown(err, nextKubeconfig)
		return []drift.Result{f.Result(servicesDesired, "")}
	}
	if r, ok := notExpected(t); ok {
		return []drift.Result{r}
	}
	switch {
	case cl.KubeProxyErr != nil:
		f.Unknown(cl.KubeProxyErr, "kubectl get daemonsets,pods -A -l k8s-app=kube-proxy: netcheck needs list on daemonsets and pods")
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
func compareFrontends(t *Target, f *drift.Findings) {
	cl, a := t.Cluster, t.Agent
	switch {
	case cl.APIServiceErr != nil:
		f.Unknown(cl.APIServiceErr, "kubectl get service,endpointslices -n default -l kubernetes.io/service-name=kubernetes: netcheck needs get on services and list on endpointslices")
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

func podNamespace(ref string) string { ns, _, _ := strings.Cut(ref, "/"); return ns }
func podName(ref string) string      { _, n, _ := strings.Cut(ref, "/"); return n }

// agentExec is the kubectl command that runs args in the agent pod.
func agentExec(pod, args string) string {
	return "kubectl -n " + podNamespace(pod) + " exec " + podName(pod) + " -c " + AgentContainer + " -- " + args
}

const nextExecRBAC = "netcheck needs create on pods/exec in the agent's namespace: kubectl apply -k deploy/ (the devata-netcheck-exec Role), or check with kubectl auth can-i create pods/exec -n "

// checkAgent proves the node's agent runs kube-proxy-free: its pod Ready,
// and its own status (one exec per pass) reporting kube-proxy replacement
// "True", NodePort, Kubernetes connectivity and no failing controllers.
func checkAgent(_ context.Context, t *Target) []drift.Result {
	const desired = "agent pod Ready; status: kube-proxy replacement True, NodePort enabled, Kubernetes Ok, no failing controllers"
	var f drift.Findings
	if err := kubeSide(t); err != nil {
		// not consulted: Unknown even when nothing is expected
		f.Unknown(err, nextKubeconfig)
		return []drift.Result{f.Result(desired, "")}
	}
	if r, ok := notExpected(t); ok {
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
			next = strings.ReplaceAll(next, "talosctl -n NODE", "talosctl -n "+t.addr())
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
func agentPodOf(t *Target, f *drift.Findings) (AgentPod, bool) {
	cl := t.Cluster
	switch {
	case cl.AgentErr != nil:
		f.Unknown(cl.AgentErr, "kubectl get daemonsets -A: netcheck needs list on daemonsets")
		return AgentPod{}, false
	case cl.Agent == nil:
		f.Problem("no cilium agent DaemonSet in the cluster", "helm -n kube-system status cilium; kubectl get daemonsets -A | grep cilium")
		return AgentPod{}, false
	case cl.AgentPodsErr != nil:
		f.Unknown(cl.AgentPodsErr, "kubectl -n "+cl.Agent.Namespace+" get pods -l "+cl.Agent.Selector.String()+": netcheck needs list on pods")
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
	if client.StatusCode(err) == codes.PermissionDenied {
		return "the talosconfig's certificate lacks the role this read needs (MachineConfig needs os:admin, the rest os:reader): use a talosconfig with that role"
	}
	return next
}
