package sim

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/configview"
)

// What runs in kube-system besides Cilium, as a Talos cluster has it
// (sources in v1.11.0):
//
//   - internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go
//     ControlPlaneStaticPodController renders kube-apiserver,
//     kube-controller-manager and kube-scheduler as static pods only once
//     the node's etcd service is healthy; the pods carry k8s-app=<name> and
//     tier=control-plane. kubelet_static_pod.go KubeletStaticPodController
//     turns the kubelet's view of them into StaticPodStatus resources
//     (`kube-system/<pod>`), and the kubelet posts a mirror pod
//     `<name>-<node>` for each once the API server answers.
//   - internal/app/machined/pkg/controllers/k8s/manifest_apply.go applies
//     the bootstrap manifests (ManifestStatus lists them): CoreDNS, a
//     Deployment k8s-app=kube-dns with 2 replicas (11-core-dns), and
//     kube-proxy, a DaemonSet k8s-app=kube-proxy (10-kube-proxy), unless
//     cluster.coreDNS or cluster.proxy disables them (manifests.go renders
//     them, manifests_apply.go creates what is missing).
//
// A real cluster's scheduler, Deployment and DaemonSet controllers and
// kubelets then run their pods; the sim plays them: a CoreDNS pod is Ready
// only once its node has a CNI (with cni none, a cilium agent), kube-proxy
// (host network) once its node's kubelet posts.
const (
	coreDNSName     = "coredns"
	coreDNSReplicas = 2
	kubeProxyName   = "kube-proxy"
	kubeSystem      = "kube-system"
)

// staticPod is one control plane static pod a node runs: not ready while
// the kubelet replaces it after a config change (restart.go).
type staticPod struct {
	component, image string
	ready            bool
}

// id is the pod's name, as the kubelet names a static pod: the manifest's
// name, a dash, the node name.
func (p staticPod) id(node string) string { return p.component + "-" + node }

// staticPodsOf lists the control plane static pods the node runs: none
// until its etcd service is healthy.
func staticPodsOf(s snapshot) []staticPod {
	if !s.configured() || !s.controlPlane() || s.active.Cluster() == nil || !serviceHealthy(s, "etcd") {
		return nil
	}

	pods := []staticPod{
		{component: apiServerPod, image: s.active.K8sAPIServerConfig().Image()},
		{component: controllerPod, image: s.active.K8sControllerManagerConfig().Image()},
		{component: schedulerPod, image: s.active.K8sSchedulerConfig().Image()},
	}

	for i := range pods {
		old, restarting := s.restartPhase(pods[i].component)
		if old {
			pods[i].image = s.restarts[pods[i].component].from
		}

		pods[i].ready = !restarting
	}

	return pods
}

// notReady are the reason and message of a pod status whose container is
// starting, as the kubelet words them.
func (p staticPod) notReady() (reason, message string) {
	if p.ready {
		return "", ""
	}

	return "ContainersNotReady", "containers with unready status: [" + p.component + "]"
}

func serviceHealthy(s snapshot, id string) bool {
	for _, svc := range servicesOf(s) {
		if svc.id == id {
			return svc.running && (svc.healthy || svc.unknown)
		}
	}

	return false
}

// staticPodStatuses are the node's StaticPodStatus resources.
func staticPodStatuses(s snapshot) []*k8s.StaticPodStatus {
	var out []*k8s.StaticPodStatus

	for _, p := range staticPodsOf(s) {
		reason, message := p.notReady()
		st := podRunning(s.host, s.host, s.booted, []corev1.Container{{Name: p.component, Image: p.image}}, p.ready, reason, message)

		spec, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			continue // a PodStatus always converts
		}

		r := k8s.NewStaticPodStatus(k8s.NamespaceName, kubeSystem+"/"+p.id(s.hostname()))
		r.TypedSpec().PodStatus = spec
		out = append(out, r)
	}

	return out
}

// podRunning is the status of a running pod whose containers are ready
// or not, as a kubelet posts it.
func podRunning(hostIP, podIP string, since time.Time, containers []corev1.Container, ready bool, reason, message string) corev1.PodStatus {
	cond := corev1.ConditionTrue
	if !ready {
		cond = corev1.ConditionFalse
	}

	now, started := metav1.Now(), metav1.NewTime(since)
	st := corev1.PodStatus{
		Phase:  corev1.PodRunning,
		HostIP: hostIP, PodIP: podIP,
		StartTime: &started,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.ContainersReady, Status: cond, Reason: reason, Message: message, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: cond, Reason: reason, Message: message, LastTransitionTime: now},
		},
	}

	for _, c := range containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Ready: ready, Started: new(true), Image: c.Image,
			ContainerID: fmt.Sprintf("containerd://%064x", fnvSum(hostIP+"/"+c.Name)),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}

	return st
}

// syncAddons plays, for the machines whose kubelet posts, the mirror pods
// of their control plane static pods, and CoreDNS and kube-proxy as the
// bootstrap manifests and a real cluster's controllers would run them.
func (f *Fleet) syncAddons(ctx context.Context, kc kubernetes.Interface, posting map[*Machine]string) error {
	var errs []error

	var cluster snapshot // a control plane's config says which add-ons Talos applied

	nodes := make([]string, 0, len(posting))
	byNode := map[string]snapshot{}
	netReady := map[string]bool{}

	for m, node := range posting {
		s := m.snap()
		nodes = append(nodes, node)
		byNode[node] = s

		if s.controlPlane() && s.etcdID != 0 && s.active.Cluster() != nil {
			cluster = s
		}

		netReady[node] = !s.cniNone() || f.agentRunning(m.name, s)

		for _, p := range staticPodsOf(s) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: p.id(node), Namespace: kubeSystem,
					Labels:      map[string]string{"k8s-app": p.component, "tier": "control-plane"},
					Annotations: map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.mirror": "sim", simOwnedAnnotation: s.name},
				},
				Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, PriorityClassName: "system-cluster-critical", Containers: []corev1.Container{{Name: p.component, Image: p.image}}},
			}
			reason, message := p.notReady()
			if err := ensurePod(ctx, kc, pod, podRunning(s.host, s.host, s.booted, pod.Spec.Containers, p.ready, reason, message)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			}
		}
	}

	if cluster.active == nil {
		return errors.Join(errs...) // no API server has applied manifests yet
	}

	slices.Sort(nodes)

	// what Talos applied at boot (manifests_apply.go); the controllers then
	// run what the objects in the API server say, whoever changed them since
	errs = append(errs, f.runManifestApply(ctx, kc, cluster))

	cc := cluster.active
	if dns := cc.K8sCoreDNSConfig(); dns != nil && dns.Enabled() {
		errs = append(errs, syncCoreDNS(ctx, kc, podSubnet(cluster), nodes, byNode, netReady))
	}

	if configview.KubeProxy(cc) {
		errs = append(errs, syncKubeProxy(ctx, kc, nodes, posting))
	}

	return errors.Join(errs...)
}

// podSubnet is the cluster's first pod subnet (10.244.0.0/16 by default).
func podSubnet(s snapshot) netip.Prefix {
	if n := s.active.K8sNetworkConfig(); n != nil {
		for _, p := range n.PodCIDRs() {
			if p.Addr().Is4() {
				return p
			}
		}
	}

	return netip.MustParsePrefix("10.244.0.0/16")
}

// coreDNSReplicaSet gets or creates the Deployment's ReplicaSet, which owns
// the pods (what kubectl drain looks for: a pod no controller owns is not
// evicted without --force).
func coreDNSReplicaSet(ctx context.Context, kc kubernetes.Interface, dep *appsv1.Deployment, labels map[string]string) (*appsv1.ReplicaSet, error) {
	rsName := coreDNSName + "-sim"
	rs, err := kc.AppsV1().ReplicaSets(kubeSystem).Get(ctx, rsName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		rs, err = kc.AppsV1().ReplicaSets(kubeSystem).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: rsName, Namespace: kubeSystem, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "Deployment", dep.Name, dep.UID)}},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: dep.Spec.Replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: dep.Spec.Template,
			},
		}, metav1.CreateOptions{})
	}

	if err != nil {
		return nil, fmt.Errorf("coredns replicaset: %w", err)
	}

	return rs, nil
}

// schedulableNodes is the scheduler's NodeUnschedulable filter: a replica is
// not placed on a cordoned node (the sim moves one there to another, where a
// real cluster would leave it until a drain evicts it). With every node
// cordoned, it is all of nodes.
func schedulableNodes(ctx context.Context, kc kubernetes.Interface, nodes []string) []string {
	schedulable := slices.DeleteFunc(slices.Clone(nodes), func(name string) bool {
		n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable
	})
	if len(schedulable) == 0 {
		return nodes
	}

	return schedulable
}

// syncCoreDNS keeps the CoreDNS Deployment Talos applies and its pods,
// placed on the posting nodes in name order, Ready only on a node with a
// CNI.
func syncCoreDNS(ctx context.Context, kc kubernetes.Interface, subnet netip.Prefix, nodes []string, byNode map[string]snapshot, netReady map[string]bool) error {
	labels := map[string]string{"k8s-app": "kube-dns"}

	dep, err := kc.AppsV1().Deployments(kubeSystem).Get(ctx, coreDNSName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // not applied, or deleted since: nothing runs
	}

	if err != nil {
		return fmt.Errorf("coredns deployment: %w", err)
	}

	containers := templateContainers(dep.Spec.Template.Spec.Containers)

	if len(nodes) == 0 {
		return nil
	}

	rs, err := coreDNSReplicaSet(ctx, kc, dep, labels)
	if err != nil {
		return err
	}

	schedulable := schedulableNodes(ctx, kc, nodes)

	var errs []error

	ready := int32(0)
	replicas := int(*dep.Spec.Replicas)
	var endpoints []discoveryv1.Endpoint

	for i := range replicas {
		node := schedulable[i%len(schedulable)]
		s, ok := byNode[node], netReady[node]
		reason, message := "", ""

		if !ok {
			reason, message = "ContainersNotReady", "containers with unready status: [coredns]"
		} else {
			ready++
		}

		ip := subnet.Addr()
		for range 10 + i {
			ip = ip.Next()
		}

		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", coreDNSName, i), Namespace: kubeSystem, Labels: labels, Annotations: map[string]string{simOwnedAnnotation: node},
				OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "ReplicaSet", rs.Name, rs.UID)}},
			Spec: corev1.PodSpec{NodeName: node, Containers: containers},
		}
		if err := ensurePod(ctx, kc, pod, podRunning(s.host, ip.String(), s.booted, containers, ok, reason, message)); err != nil {
			errs = append(errs, err)
		}
		endpoints = append(endpoints, discoveryv1.Endpoint{Addresses: []string{ip.String()}, NodeName: new(node),
			Conditions: discoveryv1.EndpointConditions{Ready: new(ok)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: kubeSystem, Name: pod.Name}})
	}
	errs = append(errs, syncKubeDNSService(ctx, kc, labels, endpoints))

	dep.Status = appsv1.DeploymentStatus{Replicas: int32(replicas), UpdatedReplicas: int32(replicas), ReadyReplicas: ready, AvailableReplicas: ready, UnavailableReplicas: int32(replicas) - ready, ObservedGeneration: dep.Generation}
	if _, err := kc.AppsV1().Deployments(kubeSystem).UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("coredns deployment status: %w", err))
	}

	return errors.Join(errs...)
}

// syncKubeDNSService keeps the kube-dns Service Talos applies with CoreDNS
// (v1.11.0 k8stemplates/coredns.go CoreDNSService: selector
// k8s-app=kube-dns, ports dns/UDP, dns-tcp/TCP 53 and metrics 9153) and
// the EndpointSlice kube-controller-manager's EndpointSlice controller
// would keep for it: an endpoint per CoreDNS pod, ready as the pod is.
// The ClusterIP is the one the manifest pins (the service subnet's tenth
// address); an API server whose range lacks it has no kube-dns
// (manifests_apply.go).
func syncKubeDNSService(ctx context.Context, kc kubernetes.Interface, selector map[string]string, endpoints []discoveryv1.Endpoint) error {
	const name = "kube-dns"
	ports := []corev1.ServicePort{
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP},
	}
	svc, err := kc.CoreV1().Services(kubeSystem).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // not applied (manifests_apply.go), or deleted since
	}
	if err != nil {
		return fmt.Errorf("kube-dns service: %w", err)
	}
	var epPorts []discoveryv1.EndpointPort
	for _, p := range ports {
		epPorts = append(epPorts, discoveryv1.EndpointPort{Name: new(p.Name), Port: new(p.Port), Protocol: new(p.Protocol)})
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-sim", Namespace: kubeSystem,
			Labels:          map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
			OwnerReferences: []metav1.OwnerReference{controllerRef("v1", "Service", svc.Name, svc.UID)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   endpoints,
		Ports:       epPorts,
	}
	es, err := kc.DiscoveryV1().EndpointSlices(kubeSystem).Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = kc.DiscoveryV1().EndpointSlices(kubeSystem).Create(ctx, want, metav1.CreateOptions{})
	case err == nil && equality.Semantic.DeepEqual(es.Endpoints, want.Endpoints) && equality.Semantic.DeepEqual(es.Ports, want.Ports):
		// unchanged: no write per kubelet round
	case err == nil:
		es.Endpoints, es.Ports = want.Endpoints, want.Ports
		_, err = kc.DiscoveryV1().EndpointSlices(kubeSystem).Update(ctx, es, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("kube-dns endpointslice: %w", err)
	}
	return nil
}

// syncKubeProxy keeps the kube-proxy DaemonSet Talos applies and a pod on
// every posting node (host network: Ready while the kubelet posts).
func syncKubeProxy(ctx context.Context, kc kubernetes.Interface, nodes []string, posting map[*Machine]string) error {
	labels := map[string]string{"k8s-app": kubeProxyName, "tier": "node"}

	ds, err := kc.AppsV1().DaemonSets(kubeSystem).Get(ctx, kubeProxyName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // not applied, or deleted since: nothing runs
	}

	if err != nil {
		return fmt.Errorf("kube-proxy daemonset: %w", err)
	}

	containers := templateContainers(ds.Spec.Template.Spec.Containers)

	machines := make([]*Machine, 0, len(posting))
	for m := range posting {
		machines = append(machines, m)
	}

	errs := make([]error, len(machines))

	// the DaemonSet controller and the kubelets act per node: a few at a time
	forEachMachine(machines, func(i int, m *Machine) {
		node, s := posting[m], m.snap()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName + "-" + node, Namespace: kubeSystem, Labels: labels, Annotations: map[string]string{simOwnedAnnotation: s.name},
				OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "DaemonSet", ds.Name, ds.UID)}},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: containers},
		}
		errs[i] = ensurePod(ctx, kc, pod, podRunning(s.host, s.host, s.booted, containers, true, "", ""))
	})

	n := int32(len(nodes))
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: n, CurrentNumberScheduled: n, NumberReady: n, NumberAvailable: n, UpdatedNumberScheduled: n, ObservedGeneration: ds.Generation}
	if _, err := kc.AppsV1().DaemonSets(kubeSystem).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("kube-proxy daemonset status: %w", err))
	}

	return errors.Join(errs...)
}

// ensurePod creates the pod if it is missing (or bound to another node)
// and posts the status when its readiness or node changed.
func ensurePod(ctx context.Context, kc kubernetes.Interface, want *corev1.Pod, st corev1.PodStatus) error {
	pods := kc.CoreV1().Pods(want.Namespace)

	// a pod moved to another node, or a static pod whose manifest changed
	// (the kubelet replaces an outdated mirror pod), is made anew
	pod, err := pods.Get(ctx, want.Name, metav1.GetOptions{})
	if err == nil && (pod.Spec.NodeName != want.Spec.NodeName || !sameImages(pod.Spec.Containers, want.Spec.Containers)) {
		if err := pods.Delete(ctx, want.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("move pod %s/%s: %w", want.Namespace, want.Name, err)
		}

		err = apierrors.NewNotFound(corev1.Resource("pods"), want.Name)
	}

	if apierrors.IsNotFound(err) {
		if pod, err = pods.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s/%s: %w", want.Namespace, want.Name, err)
		}
	} else if err != nil {
		return err
	}

	if prev, next := podCondition(pod, corev1.PodReady), podReady(st); prev != nil && next != nil && prev.Status == next.Status && pod.Status.Phase == st.Phase && pod.Status.HostIP == st.HostIP {
		return nil
	}

	pod.Status = st
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update pod %s/%s status: %w", want.Namespace, want.Name, err)
	}

	return nil
}

// templateContainers are a pod template's containers as the sim's pods
// run them: name and image (a Deployment or DaemonSet controller rolls its
// pods onto a changed template).
func templateContainers(cs []corev1.Container) []corev1.Container {
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Image: c.Image}
	}

	return out
}

// sameImages: the containers run the same images, in order.
func sameImages(a, b []corev1.Container) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Container) bool { return x.Name == y.Name && x.Image == y.Image })
}

func podReady(st corev1.PodStatus) *corev1.PodCondition {
	return podCondition(&corev1.Pod{Status: st}, corev1.PodReady)
}

// controllerRef is the controller owner reference a controller sets on what
// it creates (metav1.NewControllerRef).
func controllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: new(true), BlockOwnerDeletion: new(true)}
}
