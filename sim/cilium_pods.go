package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// agentPod is an agent pod the sim runs on a machine. boot is the boot of
// the machine it last saw, fresh whether the pod was created during that
// boot: a new pod's agent runs at once (the sim's approximation of a first
// install), one that was there before a reboot only CNIStartDelay after
// the boot. running is what its last posted status said: the agent runs
// (its pod Ready, unless a CiliumAgentNotReady fault holds it).
type agentPod struct {
	namespace, name string
	boot            time.Time
	fresh, running  bool
}

func (f *Fleet) agentPodOn(machine string) *agentPod {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.agents[machine]
}

// agentRunning reports whether the cilium agent runs on the machine in
// its boot s.booted, and so has written the CNI config the kubelet's
// runtime network status waits for (see Options.CNIStartDelay).
func (f *Fleet) agentRunning(machine string, s snapshot) bool {
	p := f.agentPodOn(machine)

	return p != nil && p.boot.Equal(s.booted) && p.running
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

	machines := make([]*Machine, 0, len(posting))
	for m := range posting {
		machines = append(machines, m)
	}

	failed := make([]error, len(machines))

	// the DaemonSet controller and the kubelets act per node: a few at a time
	forEachMachine(machines, func(i int, m *Machine) {
		node := posting[m]
		s := m.snap()
		p := &agentPod{namespace: ds.Namespace, name: agentPodName(ds.Name, node), boot: s.booted}

		if prev := f.agentPodOn(m.name); prev != nil && prev.namespace == p.namespace && prev.name == p.name && prev.boot.Equal(s.booted) {
			p.fresh = prev.fresh
		}

		created, running, err := syncAgentPod(ctx, kc, ds, p, node, s, f.cniDelay)
		if err != nil {
			failed[i] = fmt.Errorf("%s: %w", m.name, err)

			return
		}

		p.fresh, p.running = p.fresh || created, running

		f.mu.Lock()
		f.agents[m.name] = p
		f.mu.Unlock()
	})

	return errors.Join(append(errs, failed...)...)
}

// syncAgentPod creates the agent pod when it is missing (created) and
// keeps its status: after a reboot its container runs again but is not
// Ready until the agent is up, delay after the boot (or while a
// CiliumAgentStarting fault holds it); a CiliumAgentNotReady fault keeps
// it not Ready. running says the agent runs (whatever the fault).
func syncAgentPod(ctx context.Context, kc kubernetes.Interface, ds *appsv1.DaemonSet, p *agentPod, node string, s snapshot, delay time.Duration) (created, running bool, _ error) {
	pods := kc.CoreV1().Pods(p.namespace)

	pod, err := pods.Get(ctx, p.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		created = true
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

		made, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			// another sync of the fleet (the kubelets' loop, an explicit
			// SyncKubelets) created it meanwhile: carry on with that one
			created = false
			if pod, err = pods.Get(ctx, p.name, metav1.GetOptions{}); err != nil {
				return false, false, fmt.Errorf("agent pod %s/%s: %w", p.namespace, p.name, err)
			}
		case err != nil:
			return false, false, fmt.Errorf("create agent pod %s/%s: %w", p.namespace, p.name, err)
		default:
			pod = made
		}
	} else if err != nil {
		return false, false, err
	}

	ready, reason, message := corev1.ConditionTrue, "", ""
	starting := s.faults.CiliumAgentStarting || (!created && !p.fresh && time.Since(s.booted) < delay)

	if s.faults.CiliumAgentNotReady || starting {
		ready, reason, message = corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [cilium-agent]"
	}

	if prev := podCondition(pod, corev1.PodReady); prev != nil && prev.Status == ready && pod.Status.Phase == corev1.PodRunning &&
		pod.Status.StartTime != nil && pod.Status.StartTime.Equal(&metav1.Time{Time: s.booted.Truncate(time.Second)}) {
		return created, !starting, nil
	}

	pod.Status = podRunning(s.host, s.host, s.booted, []corev1.Container{{Name: ciliumAgentContainer, Image: containerImage(pod)}}, ready == corev1.ConditionTrue, reason, message)

	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return created, false, fmt.Errorf("update agent pod status: %w", err)
	}

	return created, !starting, nil
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
