package netcheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Names of the Cilium objects a Helm install creates, and the keys netcheck reads.
const (
	AgentDaemonSet  = "cilium"
	AgentContainer  = "cilium-agent"
	ConfigMapName   = "cilium-config"
	KeyKPR          = "kube-proxy-replacement"
	EnvServiceHost  = "KUBERNETES_SERVICE_HOST"
	EnvServicePort  = "KUBERNETES_SERVICE_PORT"
	kubeProxyName   = "kube-proxy"
	kubeProxyLabels = "k8s-app=kube-proxy"
)

// CiliumNodeConfigs is the resource of Cilium's per-node configuration overrides.
var CiliumNodeConfigs = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodeconfigs"}

// ErrNoKubeconfig is the Err of a Cluster observed without a Kubernetes client.
var ErrNoKubeconfig = errors.New("no kubeconfig: pass --kubeconfig (or set KUBECONFIG) to check the Kubernetes side")

// Cluster is one pass's snapshot of the cluster-wide Kubernetes objects the
// cilium checks read: a handful of LISTs and GETs per pass, whatever the
// number of machines, then evaluated per node. Each fact carries its own
// error, so that a forbidden LIST makes only the findings that need it Unknown.
type Cluster struct {
	// Err is set when Kubernetes could not be consulted at all (no
	// kubeconfig); every Kubernetes-side finding is then Unknown with it.
	Err error

	// Agent is the cilium agent DaemonSet; nil (with AgentErr nil) when the
	// cluster has none.
	Agent    *Agent
	AgentErr error

	// KubeProxyDaemonSets and KubeProxyPods name ("namespace/name") what is
	// left of kube-proxy anywhere in the cluster; KubeProxyPodNodes maps a pod
	// to the node it runs on.
	KubeProxyDaemonSets []string
	KubeProxyPods       []string
	KubeProxyPodNodes   map[string]string
	KubeProxyErr        error

	// Config is the cilium-config ConfigMap's data in the agent's namespace;
	// nil when there is none.
	Config    map[string]string
	ConfigErr error

	// NodeConfigs are the CiliumNodeConfigs; NodeConfigsCRD is false when
	// the cluster does not serve that resource (none can exist then).
	NodeConfigs    []NodeConfig
	NodeConfigsCRD bool
	NodeConfigsErr error

	// NodeLabels are every Node's labels by name: CiliumNodeConfig selectors
	// are evaluated against them.
	NodeLabels map[string]map[string]string
	NodesErr   error

	// AgentPods are the agent DaemonSet's pods by the node they run on.
	AgentPods    map[string]AgentPod
	AgentPodsErr error

	// APIService is the default/kubernetes Service and what its
	// EndpointSlices say its frontends' backends must be.
	APIService    *APIService
	APIServiceErr error
}

// AgentPod is one cilium agent pod.
type AgentPod struct {
	Namespace, Name string
	Phase           corev1.PodPhase
	Ready           bool
	// NotReady says why it is not Ready (the condition's reason and message).
	NotReady string
}

// Ref is "namespace/name".
func (p AgentPod) Ref() string { return p.Namespace + "/" + p.Name }

// APIService is what a node's agent must route for the kubernetes Service.
type APIService struct {
	// Frontends maps each ClusterIP frontend ("10.96.0.1:443/TCP") to the
	// backends ("192.0.2.2:6443/TCP") its EndpointSlices list as ready.
	Frontends map[string][]string
	// Slices name the EndpointSlices read ("default/kubernetes").
	Slices []string
}

// FrontendAddrs are the frontends in a stable order.
func (s *APIService) FrontendAddrs() []string {
	return slices.Sorted(maps.Keys(s.Frontends))
}

// Agent is what netcheck reads from the cilium agent DaemonSet.
type Agent struct {
	Namespace, Name string
	// Env are the agent container's literal environment values; ValueFrom
	// names the variables set through valueFrom, which netcheck does not resolve.
	Env       map[string]string
	ValueFrom []string
	// Selector selects the DaemonSet's pods.
	Selector labels.Selector
}

// NodeConfig is one CiliumNodeConfig: the nodes it selects and the
// cilium-config keys it overrides there.
type NodeConfig struct {
	Namespace, Name string
	Selector        labels.Selector
	Defaults        map[string]string
}

// Ref is "namespace/name".
func (c NodeConfig) Ref() string { return c.Namespace + "/" + c.Name }

// ObserveCluster reads the snapshot: DaemonSets and kube-proxy pods in every
// namespace, Nodes, CiliumNodeConfigs (through dyn) and the cilium-config
// ConfigMap, all in flight together except the ConfigMap, which lives in the
// agent's namespace. A nil kube gives a Cluster whose Err is ErrNoKubeconfig;
// a nil dyn makes only the CiliumNodeConfig facts Unknown. It never returns
// an error: failures are in the Cluster.
func ObserveCluster(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) *Cluster {
	if kube == nil {
		return &Cluster{Err: ErrNoKubeconfig}
	}
	cl := &Cluster{}
	var wg sync.WaitGroup
	wg.Go(func() {
		list, err := kube.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			err = fmt.Errorf("list DaemonSets: %w", err)
			cl.AgentErr, cl.KubeProxyErr = err, err
			return
		}
		cl.Agent, cl.KubeProxyDaemonSets = agentOf(list.Items), kubeProxyDaemonSets(list.Items)
	})
	var podsErr error
	wg.Go(func() {
		list, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kubeProxyLabels})
		if err != nil {
			podsErr = fmt.Errorf("list kube-proxy pods: %w", err)
			return
		}
		cl.KubeProxyPodNodes = map[string]string{}
		for _, p := range list.Items {
			ref := p.Namespace + "/" + p.Name
			cl.KubeProxyPods = append(cl.KubeProxyPods, ref)
			cl.KubeProxyPodNodes[ref] = p.Spec.NodeName
		}
	})
	wg.Go(func() {
		list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			cl.NodesErr = fmt.Errorf("list Nodes: %w", err)
			return
		}
		cl.NodeLabels = make(map[string]map[string]string, len(list.Items))
		for _, n := range list.Items {
			cl.NodeLabels[n.Name] = n.Labels
		}
	})
	wg.Go(func() { cl.NodeConfigs, cl.NodeConfigsCRD, cl.NodeConfigsErr = listNodeConfigs(ctx, dyn) })
	wg.Go(func() { cl.APIService, cl.APIServiceErr = observeAPIService(ctx, kube) })
	wg.Wait()
	if cl.KubeProxyErr == nil {
		cl.KubeProxyErr = podsErr
	}
	slices.Sort(cl.KubeProxyPods)

	if cl.AgentErr != nil {
		cl.ConfigErr = fmt.Errorf("cilium-config not read: %w", cl.AgentErr)
		cl.AgentPodsErr = fmt.Errorf("agent pods not read: %w", cl.AgentErr)
		return cl
	}
	ns := metav1.NamespaceSystem
	if cl.Agent != nil {
		ns = cl.Agent.Namespace
	}
	// The ConfigMap and the agent's pods live in the agent's namespace.
	wg.Go(func() {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			cl.ConfigErr = fmt.Errorf("get ConfigMap %s/%s: %w", ns, ConfigMapName, err)
		default:
			cl.Config = cm.Data
			if cl.Config == nil {
				cl.Config = map[string]string{}
			}
		}
	})
	if cl.Agent != nil {
		wg.Go(func() { cl.AgentPods, cl.AgentPodsErr = agentPods(ctx, kube, cl.Agent) })
	}
	wg.Wait()
	return cl
}

// agentPods lists the agent DaemonSet's pods by node.
func agentPods(ctx context.Context, kube kubernetes.Interface, a *Agent) (map[string]AgentPod, error) {
	list, err := kube.CoreV1().Pods(a.Namespace).List(ctx, metav1.ListOptions{LabelSelector: a.Selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list the agent's pods in %s: %w", a.Namespace, err)
	}
	out := make(map[string]AgentPod, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		ap := AgentPod{Namespace: p.Namespace, Name: p.Name, Phase: p.Status.Phase, NotReady: "no Ready condition"}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ap.Ready, ap.NotReady = c.Status == corev1.ConditionTrue, strings.TrimSpace(c.Reason+": "+c.Message)
			}
		}
		if ap.Ready {
			ap.NotReady = ""
		}
		// Two pods on a node (a rollout): keep a Ready one.
		if prev, ok := out[p.Spec.NodeName]; ok && prev.Ready {
			continue
		}
		out[p.Spec.NodeName] = ap
	}
	return out, nil
}

// observeAPIService reads default/kubernetes and its EndpointSlices and
// derives, per ClusterIP frontend, the backends an agent must hold.
func observeAPIService(ctx context.Context, kube kubernetes.Interface) (*APIService, error) {
	svc, err := kube.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Service default/kubernetes: %w", err)
	}
	eps, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices of default/kubernetes: %w", err)
	}
	out := &APIService{Frontends: map[string][]string{}}
	for _, es := range eps.Items {
		out.Slices = append(out.Slices, es.Namespace+"/"+es.Name)
	}
	slices.Sort(out.Slices)
	for _, ip := range svc.Spec.ClusterIPs {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			out.Frontends[L3n4(ip, int(sp.Port), string(sp.Protocol))] = backendsOf(eps.Items, addr.Is4(), sp.Name)
		}
	}
	return out, nil
}

// backendsOf is the backends of the Service port named portName in the
// EndpointSlices of one address family: the ready endpoints' addresses with
// the slice port of that name (an unnamed slice port matches any), sorted
// and without duplicates.
func backendsOf(items []discoveryv1.EndpointSlice, is4 bool, portName string) []string {
	backends := []string{}
	for _, es := range items {
		if (es.AddressType == discoveryv1.AddressTypeIPv4) != is4 {
			continue
		}
		for _, p := range es.Ports {
			if p.Port == nil || (p.Name != nil && *p.Name != portName) {
				continue
			}
			proto := string(corev1.ProtocolTCP)
			if p.Protocol != nil {
				proto = string(*p.Protocol)
			}
			for _, e := range es.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				for _, a := range e.Addresses {
					backends = append(backends, L3n4(a, int(*p.Port), proto))
				}
			}
		}
	}
	slices.Sort(backends)
	return slices.Compact(backends)
}

// L3n4 writes an address as Cilium's load-balancer tables do
// ("10.96.0.1:443/TCP", "[fd00::1]:443/TCP"), protocol upper-case.
func L3n4(ip string, port int, proto string) string {
	return net.JoinHostPort(ip, strconv.Itoa(port)) + "/" + strings.ToUpper(proto)
}

// agentOf finds the agent DaemonSet: kube-system/cilium as Helm installs it,
// else a "cilium" DaemonSet in another namespace (a chart installed elsewhere).
func agentOf(dss []appsv1.DaemonSet) *Agent {
	var found *appsv1.DaemonSet
	for i := range dss {
		ds := &dss[i]
		if ds.Name != AgentDaemonSet {
			continue
		}
		if found == nil || ds.Namespace == metav1.NamespaceSystem {
			found = ds
		}
	}
	if found == nil {
		return nil
	}
	a := &Agent{Namespace: found.Namespace, Name: found.Name, Env: map[string]string{}, Selector: labels.Nothing()}
	if sel, err := metav1.LabelSelectorAsSelector(found.Spec.Selector); err == nil && found.Spec.Selector != nil {
		a.Selector = sel
	}
	cs := found.Spec.Template.Spec.Containers
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == AgentContainer })
	if i < 0 {
		if len(cs) == 0 {
			return a
		}
		i = 0
	}
	for _, e := range cs[i].Env {
		if e.ValueFrom != nil {
			a.ValueFrom = append(a.ValueFrom, e.Name)
			continue
		}
		a.Env[e.Name] = e.Value
	}
	return a
}

func kubeProxyDaemonSets(dss []appsv1.DaemonSet) []string {
	var out []string
	for _, ds := range dss {
		if ds.Name == kubeProxyName || ds.Labels["k8s-app"] == kubeProxyName {
			out = append(out, ds.Namespace+"/"+ds.Name)
		}
	}
	slices.Sort(out)
	return out
}

// listNodeConfigs lists every CiliumNodeConfig. A cluster that does not serve
// the resource has none; that is not an error.
func listNodeConfigs(ctx context.Context, dyn dynamic.Interface) ([]NodeConfig, bool, error) {
	if dyn == nil {
		return nil, false, errors.New("no dynamic client: CiliumNodeConfigs not read")
	}
	list, err := dyn.Resource(CiliumNodeConfigs).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list CiliumNodeConfigs: %w", err)
	}
	out := make([]NodeConfig, 0, len(list.Items))
	for i := range list.Items {
		nc, err := nodeConfigOf(&list.Items[i])
		if err != nil {
			return nil, true, err
		}
		out = append(out, nc)
	}
	return out, true, nil
}

func nodeConfigOf(u *unstructured.Unstructured) (NodeConfig, error) {
	nc := NodeConfig{Namespace: u.GetNamespace(), Name: u.GetName()}
	var spec struct {
		NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
		Defaults     map[string]string     `json:"defaults"`
	}
	raw, _, _ := unstructured.NestedMap(u.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		return nc, fmt.Errorf("CiliumNodeConfig %s: spec: %w", nc.Ref(), err)
	}
	nc.Defaults = spec.Defaults
	// Cilium requires a nodeSelector; a missing one selects nothing, an
	// empty one every node (LabelSelectorAsSelector's rules).
	if spec.NodeSelector == nil {
		nc.Selector = labels.Nothing()
		return nc, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(spec.NodeSelector)
	if err != nil {
		return nc, fmt.Errorf("CiliumNodeConfig %s: nodeSelector: %w", nc.Ref(), err)
	}
	nc.Selector = sel
	return nc, nil
}

// DynamicFor returns a dynamic client on kube's connection, for callers that
// hold only a kubernetes.Interface; nil when kube has no REST client (a fake).
func DynamicFor(kube kubernetes.Interface) dynamic.Interface {
	if kube == nil {
		return nil
	}
	rc := kube.Discovery().RESTClient()
	if rc == nil {
		return nil
	}
	return dynamic.New(rc)
}
