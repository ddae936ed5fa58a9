package netcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"k8s.io/apimachinery/pkg/labels"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/configview"
)

// checkDeclaration proves the node is declared kube-proxy-free everywhere
// that decides it: the active Talos config, Talos' applied manifests and
// KubePrism, the agent DaemonSet, cilium-config and CiliumNodeConfigs.
func checkDeclaration(_ context.Context, t *view) []drift.Result {
	if t.Obs != nil && t.Obs.Err != nil {
		// unreachable: Unknown even when nothing is expected (an Unknown
		// is never reported as InSync)
		return []drift.Result{drift.Unreachable(t.Machine.Name, t.Obs.Err, t.talosctl("version"))}
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

func declareTalosConfig(t *view, f *drift.Findings) {
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
	if cfg.Cluster() == nil {
		f.Problem("active config has no cluster section", "devata apply --machines "+t.Machine.Name)
		return
	}
	cni := configview.CNI(cfg)
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
	proxyOn := configview.KubeProxy(cfg)
	if proxyOn != t.Expect.KubeProxy {
		f.Problem(fmt.Sprintf("active config has cluster.proxy.disabled %t, inventory kubeProxy %t", !proxyOn, t.Expect.KubeProxy),
			"devata apply --machines "+t.Machine.Name+"; Talos then stops applying kube-proxy but never deletes it: see cilium-services")
	} else {
		f.Saw(fmt.Sprintf("MachineConfig cluster.proxy.disabled %t", !proxyOn))
	}
}

func declareTalosResources(t *view, f *drift.Findings) {
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

func declareKubernetes(t *view, f *drift.Findings) {
	if err := kubeSide(t); err != nil {
		f.Unknown(err, nextKubeconfig)
		return
	}
	cl, e, node := t.Cluster, t.Expect, t.node()
	switch {
	case cl.AgentErr != nil:
		f.Unknown(cl.AgentErr, "kubectl get daemonsets -A: the cilium checks need list on daemonsets")
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
				f.Unknown(fmt.Errorf("DaemonSet %s sets %s through valueFrom, which devata does not resolve", ref, kv.env), next)
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
		f.Unknown(cl.ConfigErr, "kubectl -n "+ns+" get configmap "+ConfigMapName+": the cilium checks need get on configmaps")
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
	const next = "kubectl get ciliumnodeconfigs -A: the cilium checks need list on ciliumnodeconfigs.cilium.io"
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
		f.Unknown(fmt.Errorf("CiliumNodeConfigs override %s but the Nodes were not read: %w", KeyKPR, cl.NodesErr), "kubectl get nodes --show-labels: the cilium checks need list on nodes")
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
