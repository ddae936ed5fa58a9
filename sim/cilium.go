package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/netip"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/cilium/api/v1/models"
	"github.com/go-openapi/strfmt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// The cilium agent as the sim plays it. envtest runs no controllers and no
// container runtime, so the sim stands in for three things at once: the
// DaemonSet controller (one agent pod per registered node, named like the
// controller names them), each node's kubelet (the pod's Ready status, and
// exec into its cilium-agent container through the kubelet endpoint), and
// the agent itself (cilium-dbg's replies, marshalled from Cilium's own API
// models and load-balancer table format). Like a real agent, it takes its
// kube-proxy-replacement mode from cilium-config and the CiliumNodeConfigs
// selecting its node, its Kubernetes connectivity from whether KubePrism
// runs where the DaemonSet points it, and its Service frontends from the
// cluster's Services and EndpointSlices. Faults bend each of those.
const (
	ciliumAgentDaemonSet = "cilium"
	ciliumAgentContainer = "cilium-agent"
	ciliumConfigMap      = "cilium-config"
	simOwnedAnnotation   = "sim.devata.dev/agent-of"
)

var ciliumNodeConfigs = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodeconfigs"}

// agentPod is an agent pod the sim runs on a machine.
type agentPod struct {
	namespace, name string
}

func (f *Fleet) agentPodOn(machine string) *agentPod {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.agents[machine]
}

// agentPodName is the pod name the DaemonSet controller would give: the
// DaemonSet's name and a short suffix, stable per node here.
func agentPodName(ds, node string) string {
	h := fnv.New32a()
	h.Write([]byte(node)) //nolint:errcheck

	const alphabet = "bcdfghjklmnpqrstvwxz2456789"

	n := h.Sum32()
	suffix := make([]byte, 5)

	for i := range suffix {
		suffix[i] = alphabet[n%uint32(len(alphabet))]
		n /= uint32(len(alphabet))
	}

	return ds + "-" + string(suffix)
}

// findAgentDaemonSet finds kube-system/cilium, else a "cilium" DaemonSet in
// another namespace; nil when the cluster has none.
func findAgentDaemonSet(ctx context.Context, kc kubernetes.Interface) (*appsv1.DaemonSet, error) {
	list, err := kc.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ciliumAgentDaemonSet})
	if err != nil {
		return nil, err
	}

	var found *appsv1.DaemonSet

	for i := range list.Items {
		if found == nil || list.Items[i].Namespace == metav1.NamespaceSystem {
			found = &list.Items[i]
		}
	}

	return found, nil
}

// syncAgentPods runs one agent pod per node whose kubelet posts, while the
// cluster has a cilium DaemonSet, and keeps each pod's status as its
// machine's faults say; without the DaemonSet it removes the pods it ran.
func (f *Fleet) syncAgentPods(ctx context.Context, kc kubernetes.Interface, posting map[*Machine]string) error {
	ds, err := findAgentDaemonSet(ctx, kc)
	if err != nil {
		return fmt.Errorf("cilium agents: list DaemonSets: %w", err)
	}

	var errs []error

	if ds == nil {
		f.mu.Lock()
		stale := f.agents
		f.agents = map[string]*agentPod{}
		f.mu.Unlock()

		for _, p := range stale {
			if err := kc.CoreV1().Pods(p.namespace).Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}

		return errors.Join(errs...)
	}

	for m, node := range posting {
		p := &agentPod{namespace: ds.Namespace, name: agentPodName(ds.Name, node)}
		if err := syncAgentPod(ctx, kc, ds, p, node, m.snap()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			continue
		}

		f.mu.Lock()
		f.agents[m.name] = p
		f.mu.Unlock()
	}

	return errors.Join(errs...)
}

func syncAgentPod(ctx context.Context, kc kubernetes.Interface, ds *appsv1.DaemonSet, p *agentPod, node string, s snapshot) error {
	pods := kc.CoreV1().Pods(p.namespace)

	pod, err := pods.Get(ctx, p.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		tmpl := ds.Spec.Template.DeepCopy()
		pod = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: p.name, Namespace: p.namespace, Labels: tmpl.Labels,
				Annotations: map[string]string{simOwnedAnnotation: s.name},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
					Controller: new(true), BlockOwnerDeletion: new(true),
				}},
			},
			Spec: tmpl.Spec,
		}
		pod.Spec.NodeName = node

		if pod, err = pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create agent pod %s/%s: %w", p.namespace, p.name, err)
		}
	} else if err != nil {
		return err
	}

	ready, reason, message := corev1.ConditionTrue, "", ""
	if s.faults.CiliumAgentNotReady {
		ready, reason, message = corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [cilium-agent]"
	}

	if prev := podCondition(pod, corev1.PodReady); prev != nil && prev.Status == ready && pod.Status.Phase == corev1.PodRunning {
		return nil
	}

	pod.Status = podRunning(s.host, s.host, s.booted, []corev1.Container{{Name: ciliumAgentContainer, Image: containerImage(pod)}}, ready == corev1.ConditionTrue, reason, message)

	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update agent pod status: %w", err)
	}

	return nil
}

func containerImage(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == ciliumAgentContainer {
			return c.Image
		}
	}

	return ""
}

func fnvSum(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s)) //nolint:errcheck

	return h.Sum64()
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}

	return nil
}

// runInAgent runs a command in the machine's cilium-agent container and
// returns its exit code: cilium-dbg directly, or a `sh -c` script through a
// POSIX shell interpreter whose only programs are cilium-dbg and the shell's
// builtins (echo, true, …); files other than /dev/null cannot be opened.
func (f *Fleet) runInAgent(ctx context.Context, m *Machine, cmd []string, in io.Reader, out, errw io.Writer) int {
	if len(cmd) == 0 {
		fmt.Fprintln(errw, "no command")
		return 126
	}

	switch path.Base(cmd[0]) {
	case "sh", "bash":
		if len(cmd) < 3 || cmd[1] != "-c" {
			fmt.Fprintln(errw, "sh: the simulated agent container takes only sh -c SCRIPT")
			return 2
		}

		return f.runScript(ctx, m, cmd[2], in, out, errw)
	case "cilium-dbg", "cilium":
		return f.ciliumDbg(ctx, m, cmd[1:], out, errw)
	}

	fmt.Fprintf(errw, "exec: %q: executable file not found in $PATH\n", cmd[0])

	return 127
}

func (f *Fleet) runScript(ctx context.Context, m *Machine, script string, in io.Reader, out, errw io.Writer) int {
	file, err := syntax.NewParser().Parse(strings.NewReader(script), "sh")
	if err != nil {
		fmt.Fprintln(errw, err)
		return 2
	}

	r, err := interp.New(
		interp.StdIO(in, out, errw),
		interp.Env(nil),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc {
			return func(ctx context.Context, args []string) error {
				hc := interp.HandlerCtx(ctx)
				if code := f.runInAgent(ctx, m, args, hc.Stdin, hc.Stdout, hc.Stderr); code != 0 {
					return interp.ExitStatus(min(code, 255))
				}

				return nil
			}
		}),
		interp.OpenHandler(func(ctx context.Context, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
			if p == "/dev/null" {
				return devNull{}, nil
			}

			return nil, &os.PathError{Op: "open", Path: p, Err: os.ErrPermission}
		}),
	)
	if err != nil {
		fmt.Fprintln(errw, err)
		return 2
	}

	err = r.Run(ctx, file)

	var status interp.ExitStatus

	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return int(status)
	}

	fmt.Fprintln(errw, err)

	return 1
}

type devNull struct{}

func (devNull) Read([]byte) (int, error)    { return 0, io.EOF }
func (devNull) Write(p []byte) (int, error) { return len(p), nil }
func (devNull) Close() error                { return nil }

// ciliumDbg answers the cilium-dbg commands netcheck and operators use:
// `status -o json`, `service list -o json` and, through `shell --`,
// `db/show frontends` and `db/get frontends ADDRESS` with `-f json`.
func (f *Fleet) ciliumDbg(ctx context.Context, m *Machine, args []string, out, errw io.Writer) int {
	st, err := f.agentState(ctx, m)
	if err != nil {
		fmt.Fprintf(errw, "Error: Unable to reach the agent's API: %v\n", err)
		return 1
	}

	jsonOut := func(args []string) bool {
		for i, a := range args {
			if a == "-ojson" || a == "--output=json" || ((a == "-o" || a == "--output") && i+1 < len(args) && args[i+1] == "json") {
				return true
			}
		}

		return false
	}

	switch {
	case len(args) >= 1 && args[0] == "status":
		if !jsonOut(args[1:]) {
			fmt.Fprintf(out, "KubeProxyReplacement:   %s\nKubernetes:             %s\n", st.kprMode, st.k8sState)
			return 0
		}

		if s := m.snap().faults.CiliumStatusReply; s != "" {
			io.WriteString(out, s) //nolint:errcheck
			return 0
		}

		return writeJSON(out, errw, st.status())
	case len(args) >= 2 && args[0] == "service" && args[1] == "list":
		if !jsonOut(args[2:]) {
			fmt.Fprintln(errw, "the simulated agent prints service list only with -o json")
			return 1
		}

		return writeJSON(out, errw, st.serviceList())
	case len(args) >= 2 && args[0] == "shell" && args[1] == "--":
		if m.snap().faults.CiliumNoShell {
			fmt.Fprintln(errw, "Error: unknown command \"shell\" for \"cilium-dbg\"")
			return 1
		}

		return st.dbQuery(args[2:], out, errw)
	}

	fmt.Fprintf(errw, "Error: unknown command %q for \"cilium-dbg\"\n", strings.Join(args, " "))

	return 1
}

func writeJSON(out, errw io.Writer, v any) int {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintln(errw, err)
		return 1
	}

	out.Write(append(data, '\n')) //nolint:errcheck

	return 0
}

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
		if mc == nil || mc.Machine() == nil || !mc.Machine().Features().KubePrism().Enabled() {
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

func (st *agentState) status() *models.StatusResponse {
	now := strfmt.DateTime(time.Now().UTC())
	ctrl := func(name string, failing bool) *models.ControllerStatus {
		c := &models.ControllerStatus{Name: name, Status: &models.ControllerStatusStatus{SuccessCount: 12, LastSuccessTimestamp: now}}
		if failing {
			c.Status.ConsecutiveFailureCount, c.Status.FailureCount = 3, 3
			c.Status.LastFailureMsg, c.Status.LastFailureTimestamp = "simulated failure", now
		}

		return c
	}

	resp := &models.StatusResponse{
		Cilium: &models.Status{State: models.StatusStateOk, Msg: "Ok   1.20.2 (simulated)"},
		KubeProxyReplacement: &models.KubeProxyReplacement{
			Mode:    st.kprMode,
			Devices: []string{"eth0"},
			Features: &models.KubeProxyReplacementFeatures{
				NodePort: &models.KubeProxyReplacementFeaturesNodePort{
					Enabled: st.kprMode == models.KubeProxyReplacementModeTrue, Mode: "SNAT", Algorithm: "Random",
					Acceleration: "None", PortMin: 30000, PortMax: 32767,
				},
				ExternalIPs: &models.KubeProxyReplacementFeaturesExternalIPs{Enabled: st.kprMode == models.KubeProxyReplacementModeTrue},
				HostPort:    &models.KubeProxyReplacementFeaturesHostPort{Enabled: st.kprMode == models.KubeProxyReplacementModeTrue},
				SocketLB:    &models.KubeProxyReplacementFeaturesSocketLB{Enabled: st.kprMode == models.KubeProxyReplacementModeTrue},
			},
		},
		Kubernetes: &models.K8sStatus{State: st.k8sState, Msg: st.k8sMsg, K8sAPIVersions: []string{"cilium/v2::CiliumNode", "core/v1::Pods", "discovery/v1::EndpointSlice"}},
	}
	if resp.Kubernetes.Msg == "" {
		resp.Kubernetes.Msg = st.k8sMinor
	}

	resp.Controllers = append(resp.Controllers, ctrl("sync-lb-maps-with-k8s-services", false), ctrl("endpoint-gc", false))
	for _, name := range st.failing {
		resp.Controllers = append(resp.Controllers, ctrl(name, true))
	}

	return resp
}

// serviceList is `cilium-dbg service list -o json`: Cilium's REST models,
// protocols upper-case as the agent writes them (the model's enum says
// lower-case; the agent does not validate its own replies).
func (st *agentState) serviceList() []*models.Service {
	out := make([]*models.Service, 0, len(st.frontends))

	for i, fe := range st.frontends {
		spec := &models.ServiceSpec{
			ID:              int64(i + 1),
			FrontendAddress: &models.FrontendAddress{IP: fe.ip, Port: fe.port, Protocol: fe.proto, Scope: models.FrontendAddressScopeExternal},
			Flags:           &models.ServiceSpecFlags{Type: models.ServiceSpecFlagsTypeClusterIP, Namespace: fe.svcNamespace, Name: fe.svcName, TrafficPolicy: "Cluster"},
		}
		for _, b := range fe.backends {
			ip, w := b.ip, uint16(100)
			spec.BackendAddresses = append(spec.BackendAddresses, &models.BackendAddress{
				IP: &ip, Port: b.port, Protocol: b.proto, NodeName: b.node, State: models.BackendAddressStateActive, Weight: &w,
			})
		}

		out = append(out, &models.Service{Spec: spec, Status: &models.ServiceStatus{Realized: spec}})
	}

	return out
}

// dbFrontend is one row of Cilium's frontends table as `db/show frontends
// -f json` writes it (pkg/loadbalancer.Frontend; no API model exists).
type dbFrontend struct {
	Address     string      `json:"Address"`
	Type        string      `json:"Type"`
	ServiceName string      `json:"ServiceName"`
	PortName    string      `json:"PortName"`
	ServicePort uint16      `json:"ServicePort"`
	Status      dbStatus    `json:"Status"`
	Backends    []dbBackend `json:"Backends"`
	ID          int         `json:"ID"`
	RedirectTo  *string     `json:"RedirectTo"`
}

type dbStatus struct {
	UpdatedAt time.Time `json:"updated-at"`
	Error     *string   `json:"error,omitempty"`
	ID        uint64    `json:"id,omitempty"`
	Kind      string    `json:"kind"`
}

type dbBackend struct {
	ServiceName string   `json:"ServiceName"`
	Address     string   `json:"Address"`
	PortNames   []string `json:"PortNames"`
	Weight      int      `json:"Weight"`
	NodeName    string   `json:"NodeName"`
	Zone        *string  `json:"Zone"`
	ClusterID   int      `json:"ClusterID"`
	Source      string   `json:"Source"`
	State       int      `json:"State"`
	Unhealthy   bool     `json:"Unhealthy"`
}

func l3n4(ip string, port uint16, proto string) string {
	return net.JoinHostPort(ip, strconv.Itoa(int(port))) + "/" + proto
}

func (fe simFrontend) row(id int) dbFrontend {
	r := dbFrontend{
		Address: l3n4(fe.ip, fe.port, fe.proto), Type: "ClusterIP", ServiceName: fe.svcNamespace + "/" + fe.svcName,
		PortName: fe.portName, ServicePort: fe.port, ID: id,
		Status: dbStatus{UpdatedAt: fe.since.UTC(), Kind: fe.status},
	}
	if fe.errMsg != "" {
		r.Status.Error = &fe.errMsg
	}

	for _, b := range fe.backends {
		var names []string
		if fe.portName != "" {
			names = []string{fe.portName}
		}

		r.Backends = append(r.Backends, dbBackend{
			ServiceName: r.ServiceName, Address: l3n4(b.ip, b.port, b.proto), PortNames: names,
			Weight: 100, NodeName: b.node, Source: "k8s",
		})
	}

	return r
}

// dbQuery is `cilium-dbg shell -- db/show frontends -f json` and
// `db/get frontends ADDRESS -f json`: one indented JSON object per row,
// nothing for no match.
func (st *agentState) dbQuery(args []string, out, errw io.Writer) int {
	var cmd, table, key, format string

	var rest []string

	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-f" || a == "--format":
			if i+1 < len(args) {
				format = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		default:
			rest = append(rest, a)
		}
	}

	if len(rest) > 0 {
		cmd = rest[0]
	}

	if len(rest) > 1 {
		table = rest[1]
	}

	if len(rest) > 2 {
		key = rest[2]
	}

	if table != "frontends" || (cmd != "db/show" && cmd != "db/get") || (cmd == "db/get" && key == "") {
		fmt.Fprintf(errw, "the simulated agent's shell answers only db/show frontends and db/get frontends ADDRESS, not %q\n", strings.Join(args, " "))
		return 1
	}

	if format != "json" {
		fmt.Fprintln(errw, "the simulated agent's shell writes only -f json")
		return 1
	}

	for i, fe := range st.frontends {
		r := fe.row(i + 1)
		if cmd == "db/get" && r.Address != key {
			continue
		}

		if code := writeJSON(out, errw, r); code != 0 {
			return code
		}

		if cmd == "db/get" {
			break
		}
	}

	return 0
}
