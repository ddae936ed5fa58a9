package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// probeSelector selects devata's probe pods (probe.Label).
const probeSelector = "app.kubernetes.io/name=devata-probe"

// runProbePods plays the kubelet for devata's probe pods bound to the
// fleet's posting nodes: each runs `agnhost connect IP:PORT` once (or dig,
// for coredns-probe: dnsprobe.go), and the
// sim decides what the connection would do from the node's simulated
// agent. A ClusterIP connects only when the agent runs kube-proxy
// replacement, holds a reconciled frontend for it (Done) with a backend, and
// (on the pod network) the CiliumPodNetworkBroken fault is off; without a
// backend it is refused, otherwise it times out (nothing else in the sim
// translates ClusterIPs). The pod ends Succeeded or Failed with agnhost's
// TIMEOUT/REFUSED as its termination message.
func (f *Fleet) runProbePods(ctx context.Context, kc kubernetes.Interface, posting map[*Machine]string) error {
	byNode := map[string]*Machine{}
	for m, node := range posting {
		byNode[node] = m
	}

	list, err := kc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: probeSelector})
	if err != nil {
		return fmt.Errorf("list probe pods: %w", err)
	}

	var errs []error

	for i := range list.Items {
		p := &list.Items[i]

		m, ok := byNode[p.Spec.NodeName]
		if !ok || p.DeletionTimestamp != nil || (p.Status.Phase != "" && p.Status.Phase != corev1.PodPending) {
			continue
		}

		var code int
		var msg string

		if q, ok := digQuestionOf(p); ok { // coredns-probe (dnsprobe.go)
			code, msg = f.digOutcome(ctx, m, q, byNode)
		} else if msg = f.probeOutcome(ctx, m, p); msg != "" {
			code, msg = 1, msg+"\n"
		}

		now := metav1.Now()
		term := &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: "Completed", Message: msg, StartedAt: now, FinishedAt: now}
		p.Status.Phase = corev1.PodSucceeded

		if code != 0 {
			term.Reason = "Error"
			p.Status.Phase = corev1.PodFailed
		}

		s := m.snap()
		p.Status.HostIP, p.Status.StartTime = s.host, &now
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "probe", Image: containerImageOf(p, "probe"), State: corev1.ContainerState{Terminated: term},
		}}

		if _, err := kc.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("probe pod %s/%s: %w", p.Namespace, p.Name, err))
		}

		m.count("kubelet/probe")
	}

	return errors.Join(errs...)
}

func containerImageOf(p *corev1.Pod, name string) string {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}

	return ""
}

// probeOutcome is "" when the probe connects, else what agnhost prints.
func (f *Fleet) probeOutcome(ctx context.Context, m *Machine, p *corev1.Pod) string {
	if len(p.Spec.Containers) == 0 {
		return "OTHER: no container"
	}

	args := p.Spec.Containers[0].Args

	i := slices.Index(args, "connect")
	if i < 0 || i+1 >= len(args) {
		return fmt.Sprintf("OTHER: the simulated kubelet runs only agnhost connect HOST:PORT, not %q", strings.Join(args, " "))
	}

	target := args[i+1] + "/TCP"

	st, err := f.agentState(ctx, m)
	if err != nil || st.kprMode != "True" {
		return "TIMEOUT"
	}

	if !p.Spec.HostNetwork && m.snap().faults.CiliumPodNetworkBroken {
		return "TIMEOUT"
	}

	for _, fe := range st.frontends {
		if l3n4(fe.ip, fe.port, fe.proto) != target {
			continue
		}

		switch {
		case fe.status != "Done":
			return "TIMEOUT"
		case len(fe.backends) == 0:
			return "REFUSED"
		}

		return ""
	}

	return "TIMEOUT"
}
