package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cilium/cilium/api/v1/models"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

var ciliumNodeConfigs = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodeconfigs"}

// agentState is what the simulated agent on one machine knows.
type agentState struct {
	kprMode   string
	k8sState  string
	k8sMsg    string
	failing   []string // controllers
	frontends []simFrontend
	k8sMinor  string
}

type simFrontend struct {
	ip, proto, portName string
	port                uint16
	svcNamespace        string
	svcName             string
	status              string // Done, Pending, Error
	errMsg              string
	since               time.Time // of the status
	backends            []simBackend
}

type simBackend struct {
	ip, proto, node string
	port            uint16
}

func (f *Fleet) kubeClient() kubernetes.Interface {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.kube
}

// agentState reads what a real agent would have read from the cluster.
func (f *Fleet) agentState(ctx context.Context, m *Machine) (*agentState, error) {
	kc := f.kubeClient()
	if kc == nil {
		return nil, errors.New("no Kubernetes API server")
	}

	s := m.snap()
	node := s.hostname()
	st := &agentState{kprMode: models.KubeProxyReplacementModeFalse, k8sState: models.K8sStatusStateOk}

	ds, err := findAgentDaemonSet(ctx, kc)
	if err != nil || ds == nil {
		return nil, fmt.Errorf("agent DaemonSet: %v", err)
	}

	// kube-proxy-replacement: cilium-config, then CiliumNodeConfigs that
	// select the node, in name order (later ones win, as in Cilium).
	cfg := map[string]string{}
	if cm, err := kc.CoreV1().ConfigMaps(ds.Namespace).Get(ctx, ciliumConfigMap, metav1.GetOptions{}); err == nil {
		cfg = cm.Data
	}

	kpr := cfg["kube-proxy-replacement"]

	if n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		if v, ok := nodeConfigOverride(ctx, dynamic.New(kc.Discovery().RESTClient()), ds.Namespace, n.Labels, "kube-proxy-replacement"); ok {
			kpr = v
		}
	}

	if kpr == "true" {
		st.kprMode = models.KubeProxyReplacementModeTrue
	}

	// Kubernetes connectivity: the agent dials KUBERNETES_SERVICE_HOST/PORT;
	// on localhost that is KubePrism, which runs only where Talos enables it.
	host := containerEnv(ds, "KUBERNETES_SERVICE_HOST")
	if ip := net.ParseIP(strings.Trim(host, "[]")); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		mc := s.active
		if mc == nil || mc.K8sKubePrismConfig() == nil {
			port := containerEnv(ds, "KUBERNETES_SERVICE_PORT")
			st.k8sState = models.K8sStatusStateFailure
			st.k8sMsg = fmt.Sprintf("Get \"https://%s/version\": dial tcp 127.0.0.1:%s: connect: connection refused", net.JoinHostPort(host, port), port)
		}
	}

	if v, err := kc.Discovery().ServerVersion(); err == nil {
		st.k8sMinor = v.Major + "." + v.Minor + " (" + v.GitVersion + ") [linux/amd64]"
	}

	st.failing = slices.Sorted(slices.Values(s.faults.CiliumControllersFailing))

	if st.k8sState == models.K8sStatusStateOk {
		if st.frontends, err = frontends(ctx, kc, s.faults); err != nil {
			return nil, err
		}
	}

	return st, nil
}

func containerEnv(ds *appsv1.DaemonSet, name string) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != ciliumAgentContainer {
			continue
		}

		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}

	return ""
}

func nodeConfigOverride(ctx context.Context, dyn dynamic.Interface, ns string, nodeLabels map[string]string, key string) (string, bool) {
	list, err := dyn.Resource(ciliumNodeConfigs).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", false
	}

	val, found := "", false

	for _, u := range list.Items {
		var spec struct {
			NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
			Defaults     map[string]string     `json:"defaults"`
		}

		raw, _ := u.Object["spec"].(map[string]any)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil || spec.NodeSelector == nil {
			continue
		}

		sel, err := metav1.LabelSelectorAsSelector(spec.NodeSelector)
		if err != nil || !sel.Matches(labels.Set(nodeLabels)) {
			continue
		}

		if v, ok := spec.Defaults[key]; ok {
			val, found = v, true
		}
	}

	return val, found
}

// frontends are the agent's ClusterIP frontends: one per Service ClusterIP
// and port, with the ready endpoints of the Service's EndpointSlices as
// backends, as Cilium's load-balancer tables hold them.
func frontends(ctx context.Context, kc kubernetes.Interface, faults Faults) ([]simFrontend, error) {
	svcs, err := kc.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Services: %w", err)
	}

	eps, err := kc.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices: %w", err)
	}

	var out []simFrontend

	for _, svc := range svcs.Items {
		ref := svc.Namespace + "/" + svc.Name
		for _, ip := range svc.Spec.ClusterIPs {
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				continue // None
			}

			for _, sp := range svc.Spec.Ports {
				fe := simFrontend{
					ip: ip, port: uint16(sp.Port), proto: strings.ToUpper(string(sp.Protocol)), portName: sp.Name,
					svcNamespace: svc.Namespace, svcName: svc.Name, status: "Done", since: time.Now(),
				}
				fe.backends = backendsOf(eps.Items, &svc, sp, addr.Is4())

				if slices.Contains(faults.CiliumBackendsMissing, ref) && len(fe.backends) > 0 {
					fe.backends = fe.backends[:len(fe.backends)-1]
				}

				if msg, ok := faults.CiliumFrontendsStuck[ref]; ok {
					// Stuck: in that state since long before this request.
					fe.status, fe.errMsg, fe.since = "Pending", "", time.Now().Add(-10*time.Minute)
					if msg != "" {
						fe.status, fe.errMsg = "Error", msg
					}
				}

				out = append(out, fe)
			}
		}
	}

	return out, nil
}

func backendsOf(eps []discoveryv1.EndpointSlice, svc *corev1.Service, sp corev1.ServicePort, ipv4 bool) []simBackend {
	var out []simBackend

	for _, es := range eps {
		if es.Namespace != svc.Namespace || es.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}

		if (es.AddressType == discoveryv1.AddressTypeIPv4) != ipv4 {
			continue
		}

		for _, p := range es.Ports {
			if p.Port == nil || (p.Name != nil && *p.Name != sp.Name) {
				continue
			}

			proto := "TCP"
			if p.Protocol != nil {
				proto = string(*p.Protocol)
			}

			for _, e := range es.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}

				node := ""
				if e.NodeName != nil {
					node = *e.NodeName
				}

				for _, a := range e.Addresses {
					out = append(out, simBackend{ip: a, port: uint16(*p.Port), proto: strings.ToUpper(proto), node: node})
				}
			}
		}
	}

	return out
}
