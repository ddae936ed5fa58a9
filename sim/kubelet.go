package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"devata.dev/devata/internal/configview"
)

const nodeLeaseNamespace = "kube-node-lease"

// NetworkNotReadyMessage is the Ready condition's message of a kubelet that
// has no CNI yet, as containerd and the kubelet word it.
const NetworkNotReadyMessage = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"

// RunKubelets plays every configured machine's kubelet towards a Kubernetes
// API server until ctx ends: each machine registers its Node (name from the
// config's hostname, labels from machine.nodeLabels, kubelet version from the
// kubelet image, InternalIP) and checks its Ready condition every interval,
// posting it when it changed, and renews its node Lease, on the kubelet's
// clock (syncKubelet). A machine with the KubeletUnhealthy fault reports
// Ready=False; so does one whose config has cluster.network.cni none until a
// cilium agent pod runs on it (NetworkPluginNotReady, as a real kubelet
// without a CNI); one that is down or unreachable stops posting and, as the
// node lifecycle controller would, its Node goes Ready=Unknown. Unconfigured
// machines have no kubelet and register nothing.
func (f *Fleet) RunKubelets(ctx context.Context, kc kubernetes.Interface, interval time.Duration) {
	every(ctx, interval, func() { f.SyncKubelets(ctx, kc) })
}

// every runs fn now and then every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	fn()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// SyncKubelets does one round of RunKubelets and returns the first error of
// each machine that failed to post, by machine name.
//
// Once Nodes are registered it also runs the cilium agent pods (see
// cilium_pods.go) when the cluster has a cilium DaemonSet, and devata's
// probe pods bound to its nodes (probe.go); their errors are under the keys
// "cilium" and "probes".
func (f *Fleet) SyncKubelets(ctx context.Context, kc kubernetes.Interface) map[string]error {
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	f.mu.Lock()
	f.kube = kc
	f.mu.Unlock()
	errs := map[string]error{}
	machines := f.Machines()
	nodes := make([]string, len(machines))
	failed := make([]error, len(machines))
	// Each kubelet posts on its own, as on a cluster: a few machines at a
	// time, not one after another (a round at 10,000 machines is tens of
	// thousands of requests to the API server).
	forEachMachine(machines, func(i int, m *Machine) { nodes[i], failed[i] = m.syncKubelet(ctx, kc) })
	posting := map[*Machine]string{}
	for i, m := range machines {
		if failed[i] != nil {
			errs[m.name] = failed[i]
			f.log.Debug("sim kubelet", "machine", m.name, "error", failed[i])
			continue
		}
		if nodes[i] != "" {
			posting[m] = nodes[i]
		}
	}
	if err := f.syncAgentPods(ctx, kc, posting); err != nil {
		errs["cilium"] = err
		f.log.Debug("sim cilium agents", "error", err)
	}
	// A node waiting for its CNI is Ready as soon as its agent runs, as the
	// kubelet notices the CNI config the agent writes.
	var waiting []*Machine
	for m := range posting {
		if s := m.snap(); s.cniNone() && f.agentRunning(m.name, s) {
			waiting = append(waiting, m)
		}
	}
	failed = make([]error, len(waiting))
	forEachMachine(waiting, func(i int, m *Machine) { _, failed[i] = m.syncKubelet(ctx, kc) })
	for i, m := range waiting {
		if failed[i] != nil {
			errs[m.name] = failed[i]
		}
	}
	if err := f.syncAddons(ctx, kc, posting); err != nil {
		errs["addons"] = err
		f.log.Debug("sim add-ons", "error", err)
	}
	if err := f.runProbePods(ctx, kc, posting); err != nil {
		errs["probes"] = err
		f.log.Debug("sim probe pods", "error", err)
	}
	if err := f.finishTerminatingPods(ctx, kc, posting); err != nil {
		errs["pods"] = err
		f.log.Debug("sim terminating pods", "error", err)
	}
	return errs
}

// kubeletWorkers is how many machines' kubelets post at once in a round
// (their Nodes, Leases and agent pods). Each machine's requests stay in
// order; the API server is the bound, so more would only queue there.
const kubeletWorkers = 8

// forEachMachine runs fn for every machine, kubeletWorkers at a time, and
// returns when all are done.
func forEachMachine(machines []*Machine, fn func(i int, m *Machine)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(kubeletWorkers, len(machines)) {
		wg.Go(func() {
			for i := range next {
				fn(i, machines[i])
			}
		})
	}
	for i := range machines {
		next <- i
	}
	close(next)
	wg.Wait()
}

// syncKubelet posts the machine's Node and returns its name when the
// kubelet is up.
func (m *Machine) syncKubelet(ctx context.Context, kc kubernetes.Interface) (string, error) {
	s := m.snap()
	if !s.configured() {
		return "", nil
	}
	nodeName := s.name
	if h := configview.Hostname(s.active); h != "" {
		nodeName = h
	}
	// The kubelet registers with the API server, which runs (as a static
	// pod on the control planes) only once etcd does.
	if !m.fleet.hasEtcd() {
		return "", nil
	}
	// machined runs while the machine is up; the kubelet not while an
	// upgrade stopped it
	machined := !s.down && !s.faults.Unreachable
	posting := machined && !s.ephemeralDown() && !s.kubeletRestarting()
	// the labels the kubelet sets itself (kubelet_node_status.go
	// initialNode, updateDefaultLabels); machined's NodeApplyController
	// sets the config's (applyNodeSpec)
	labels := map[string]string{
		"kubernetes.io/hostname": nodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}

	nodes := kc.CoreV1().Nodes()
	node, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if !posting {
			return "", nil
		}
		node, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: labels}, Spec: corev1.NodeSpec{Taints: registerTaints(specTaints(s.active), s.version, s.controlPlane())}}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("register node: %w", err)
		}
	case err != nil:
		return "", err
	}
	if posting {
		changed := setLabels(node, labels)
		applied, err := applyNodeSpec(node, nodeSpecOf(s.active))
		if err != nil {
			return "", err
		}
		if changed || applied {
			if node, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
				return "", fmt.Errorf("update node labels, annotations and taints: %w", err)
			}
		}
	}

	if machined {
		if node, err = applyTaints(ctx, nodes, node, specTaints(s.active), s.controlPlane()); err != nil {
			return "", err
		}
	}
	if machined {
		if node, err = applyCordoned(ctx, nodes, node, s.upgrading); err != nil {
			return "", err
		}
	}

	ready, err := m.postStatus(ctx, nodes, node, s, posting, nodeName)
	if err != nil {
		return "", err
	}
	m.noteNode(nodeFacts{seen: true, ready: ready})
	if !posting {
		return "", nil
	}
	if !m.due(&m.leaseRenewed, leaseRenewInterval) {
		return nodeName, nil
	}
	if err := renewLease(ctx, kc, node); err != nil {
		return "", err
	}
	m.noted(&m.leaseRenewed)
	return nodeName, nil
}

// postStatus sets the Node's status as the machine's kubelet would see it
// and posts it on the kubelet's clock; it says whether the Node is Ready.
func (m *Machine) postStatus(ctx context.Context, nodes typedcorev1.NodeInterface, node *corev1.Node, s snapshot, posting bool, nodeName string) (bool, error) {
	reported := node.Status.DeepCopy()
	ready := m.readyCondition(s, posting, findCondition(node, corev1.NodeReady))
	node.Status.Conditions = []corev1.NodeCondition{ready}
	if posting {
		node.Status.NodeInfo.KubeletVersion = kubeletVersion(s.kubeletImage())
		node.Status.NodeInfo.OSImage = "Talos (" + s.version + ")"
		node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture = "linux", "amd64"
		node.Status.NodeInfo.ContainerRuntimeVersion = "containerd://2.1.4"
		node.Status.NodeInfo.BootID = s.bootID()
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: s.host}, {Type: corev1.NodeHostName, Address: nodeName}}
		port, err := m.kubelet()
		if err != nil {
			return false, err
		}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	}
	if nodeStatusChanged(reported, &node.Status) || m.due(&m.statusReported, nodeStatusReportFrequency) {
		if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return false, fmt.Errorf("update node status: %w", err)
		}
		m.noted(&m.statusReported)
	}
	return ready.Status == corev1.ConditionTrue, nil
}

// The kubelet's own clock (kubelet.go, kubelet_node_status.go
// tryUpdateNodeStatus): it posts its Node's status when the status changed
// (nodeStatusHasChanged: the conditions' heartbeat times aside) or
// nodeStatusReportFrequency after its last report, and renews its Lease
// every nodeLeaseRenewIntervalFraction (0.25) of the lease duration (40 s).
const (
	nodeStatusReportFrequency = 5 * time.Minute
	leaseRenewInterval        = 10 * time.Second
)

// due says the kubelet's last report at *last is at least every old.
func (m *Machine) due(last *time.Time, every time.Duration) bool {
	m.kubeletMu.Lock()
	defer m.kubeletMu.Unlock()
	return time.Since(*last) >= every
}

// noted records a report at *last, now.
func (m *Machine) noted(last *time.Time) {
	m.kubeletMu.Lock()
	defer m.kubeletMu.Unlock()
	*last = time.Now()
}

// nodeStatusChanged is the kubelet's nodeStatusHasChanged: any field of the
// status but the conditions' heartbeat times.
func nodeStatusChanged(was, is *corev1.NodeStatus) bool {
	if len(was.Conditions) != len(is.Conditions) {
		return true
	}
	a, b := was.DeepCopy(), is.DeepCopy()
	slices.SortStableFunc(a.Conditions, func(x, y corev1.NodeCondition) int { return strings.Compare(string(x.Type), string(y.Type)) })
	slices.SortStableFunc(b.Conditions, func(x, y corev1.NodeCondition) int { return strings.Compare(string(x.Type), string(y.Type)) })
	for i := range a.Conditions {
		a.Conditions[i].LastHeartbeatTime, b.Conditions[i].LastHeartbeatTime = metav1.Time{}, metav1.Time{}
	}
	return !apiequality.Semantic.DeepEqual(a, b)
}

// setLabels sets labels on node and says whether any changed.
func setLabels(node *corev1.Node, labels map[string]string) bool {
	changed := false
	for k, v := range labels {
		if node.Labels[k] != v {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k], changed = v, true
		}
	}
	return changed
}

// readyCondition is the Node's Ready condition as the kubelet posts it
// (Unknown once it stopped posting), keeping prev's transition time while
// the status holds.
func (m *Machine) readyCondition(s snapshot, posting bool, prev *corev1.NodeCondition) corev1.NodeCondition {
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now}
	switch {
	case !posting:
		ready.Status, ready.Reason, ready.Message = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
	case s.faults.KubeletUnhealthy:
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "KubeletNotReady", "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s"
	case s.cniNone() && !m.fleet.agentRunning(m.name, s):
		// cluster.network.cni none: no CNI until Cilium's agent runs here,
		// after every boot again (Options.CNIStartDelay): the kubelet's
		// runtime network status is containerd's NetworkReady
		// (kubelet.go updateRuntimeUp, runtimeState.networkErrors), which
		// nodestatus.ReadyCondition turns into Ready=False.
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "KubeletNotReady", NetworkNotReadyMessage
	}
	if prev != nil && prev.Status == ready.Status {
		ready.LastTransitionTime = prev.LastTransitionTime
	} else {
		ready.LastTransitionTime = now
	}
	return ready
}

// applyCordoned cordons the Node while its machine upgrades and uncordons
// it once it boots, as machined's NodeApplyController does
// (node_cordoned_spec.go: cordoned in stage upgrading; node_apply.go
// ApplyCordoned: only a node Talos cordoned itself, by its annotation, is
// uncordoned).
func applyCordoned(ctx context.Context, nodes typedcorev1.NodeInterface, node *corev1.Node, cordon bool) (*corev1.Node, error) {
	_, byTalos := node.Annotations[constants.AnnotationCordonedKey]

	switch {
	case cordon && !node.Spec.Unschedulable:
		node.Spec.Unschedulable = true
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[constants.AnnotationCordonedKey] = constants.AnnotationCordonedValue
	case !cordon && node.Spec.Unschedulable && byTalos:
		node.Spec.Unschedulable = false
		delete(node.Annotations, constants.AnnotationCordonedKey)
	default:
		return node, nil
	}

	node, err := nodes.Update(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("cordon node: %w", err)
	}

	return node, nil
}

// noteNode records the Node as Talos' NodeStatus controller would see it,
// and refreshes MachineStatus when that changed.
func (m *Machine) noteNode(n nodeFacts) {
	m.mu.Lock()
	changed := m.node != n
	m.node = n
	m.mu.Unlock()
	if changed {
		m.sync()
	}
}

func renewLease(ctx context.Context, kc kubernetes.Interface, node *corev1.Node) error {
	leases := kc.CoordinationV1().Leases(nodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodeLeaseNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", nodeLeaseNamespace, err)
		}
		holder, duration := node.Name, int32(40)
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:            node.Name,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, RenewTime: &now},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew node lease: %w", err)
	}
	return nil
}

func findCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// kubeletVersion is the tag of the kubelet image, as the kubelet reports it.
func kubeletVersion(image string) string {
	if i := strings.LastIndex(image, ":"); i >= 0 && !strings.Contains(image[i:], "/") {
		return image[i+1:]
	}
	return "unknown"
}
