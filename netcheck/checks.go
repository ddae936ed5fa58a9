package netcheck

import (
	"errors"
	"net"
	"strings"

	"k8s.io/client-go/kubernetes"

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

// view is what the cilium checks read of one node: its target's active
// config and the Talos resources Observe read on its connection, the
// pass's Kubernetes snapshot and the node's agent, once per machine
// (viewOf).
type view struct {
	Machine *inventory.Machine
	Expect  Expect
	// Active is the node's active MachineConfig (v1alpha1) as Talos stores it
	// (talosapi.Observation.Active); ActiveErr says why it could not be read.
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
	// Talosctl is how next steps reach the node with talosctl, as devata
	// did (talosapi.Dialer.Talosctl); empty means "talosctl -n ADDRESS".
	Talosctl string

	kube kubernetes.Interface // the target's, for the probe's pods
}

// talosctl is a talosctl command line for the node.
func (t *view) talosctl(args string) string {
	return talosctlPrefix(t.Talosctl, t.Machine) + " " + args
}

func talosctlPrefix(prefix string, m *inventory.Machine) string {
	if prefix == "" {
		return "talosctl -n " + m.Address
	}
	return prefix
}

// node is the Kubernetes Node name of the machine, as the kubelet check has it.
func (t *view) node() string { return t.Machine.Name }

// Problem is one observed disagreement with the inventory: what is wrong and
// the next thing to inspect or run.
type Problem struct {
	Reason string
	Next   string
}

// notExpected is the InSync of a cilium check when the inventory does not ask
// for kube-proxy replacement: there is nothing for it to prove.
func notExpected(t *view) (drift.Result, bool) {
	if t.Expect.KubeProxyReplacement {
		return drift.Result{}, false
	}
	return drift.InSync("cluster.cilium.kubeProxyReplacement is false: no kube-proxy replacement expected"), true
}

// kubeSide returns why the Kubernetes snapshot cannot be used, if it cannot.
func kubeSide(t *view) error {
	switch {
	case t.Cluster == nil:
		return errors.New("Kubernetes was not consulted")
	case t.Cluster.Err != nil:
		return t.Cluster.Err
	}
	return nil
}

// kubeSideFirst is the result of a check that reads Kubernetes before it
// looks at anything else: Unknown when the Kubernetes side was not read,
// even when nothing is expected (nothing was seen), else InSync when the
// inventory expects no kube-proxy replacement; ok is false when the check
// goes on.
func kubeSideFirst(t *view, desired string) (drift.Result, bool) {
	if err := kubeSide(t); err != nil {
		var f drift.Findings
		f.Unknown(err, nextKubeconfig)
		return f.Result(desired, ""), true
	}
	return notExpected(t)
}

const nextKubeconfig = "pass --kubeconfig (or set KUBECONFIG) so the cluster's Cilium objects can be read"
