package netcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/drift"
)

// CheckProbe is the transaction check: it runs only with --probe.
const CheckProbe = "cilium-probe"

// Probe defaults.
const (
	DefaultProbeNamespace = "devata-probe"
	DefaultProbeImage     = "registry.k8s.io/e2e-test-images/agnhost:2.53"
	DefaultProbeTimeout   = time.Minute

	// ProbeLabel marks probe pods (app.kubernetes.io/name=devata-probe).
	ProbeLabel = "devata-probe"
)

// ProbeOptions configure the transaction: where the probe pods run, with
// which image (it must have agnhost's `connect` subcommand), and how long a
// pod may take from creation to its end before the probe gives up.
type ProbeOptions struct {
	Namespace string
	Image     string
	Timeout   time.Duration
}

func (o ProbeOptions) withDefaults() ProbeOptions {
	if o.Namespace == "" {
		o.Namespace = DefaultProbeNamespace
	}
	if o.Image == "" {
		o.Image = DefaultProbeImage
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultProbeTimeout
	}
	return o
}

// ProbeResult is one probe pod's outcome.
type ProbeResult struct {
	// Pod is "namespace/name" of the pod that ran (and was deleted).
	Pod string
	// Reached is true when the pod connected to the target.
	Reached bool
	// Message is what the pod said when it did not (agnhost: TIMEOUT,
	// REFUSED, OTHER: …), with its exit code.
	Message string
	// Err says why there is no outcome: the pod could not be created
	// (forbidden, rejected by Pod Security), or did not finish in time.
	Err error
}

// Probe runs one short-lived pod pinned to node (on the host network or the
// pod network) that opens a TCP connection to target ("10.96.0.1:443"),
// waits for it to end and always deletes it, even when ctx ends first. A
// delete that fails is the result's Err when nothing else went wrong, so
// that a pod left behind is said (res is named for that: the deferred
// delete sets it after the return statement ran).
func Probe(ctx context.Context, kube kubernetes.Interface, opts ProbeOptions, node, target string, hostNetwork bool) (res ProbeResult) {
	opts = opts.withDefaults()
	pod := probePod(opts, node, target, hostNetwork)
	pods := kube.CoreV1().Pods(opts.Namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return ProbeResult{Err: fmt.Errorf("create probe pod in %s: %w", opts.Namespace, err)}
	}
	res = ProbeResult{Pod: created.Namespace + "/" + created.Name}
	defer func() {
		// Always cleaned up: on a context of its own, so that a cancelled
		// pass still deletes what it created.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := pods.Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) && res.Err == nil {
			res.Err = fmt.Errorf("delete probe pod %s: %w (delete it by hand: kubectl -n %s delete pod -l app.kubernetes.io/name=%s)", res.Pod, err, opts.Namespace, ProbeLabel)
		}
	}()

	wctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := created
	for {
		switch last.Status.Phase {
		case corev1.PodSucceeded:
			res.Reached = true
			return res
		case corev1.PodFailed:
			res.Message = terminated(last)
			return res
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				res.Err = fmt.Errorf("probe pod %s: %w", res.Pod, context.Cause(ctx))
			} else {
				res.Err = fmt.Errorf("probe pod %s did not finish within %s (%s)", res.Pod, opts.Timeout, waiting(last))
			}
			return res
		case <-tick.C:
		}
		// Read on the caller's context: near the probe's own deadline the
		// client's rate limiter would refuse to wait on wctx.
		p, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				res.Err = fmt.Errorf("get probe pod %s: %w", res.Pod, err)
				return res
			}
			continue
		}
		last = p
	}
}

// probePod is the probe pod: agnhost connect to target, pinned to node,
// unprivileged, deleted by the API server after opts.Timeout at the latest.
func probePod(opts ProbeOptions, node, target string, hostNetwork bool) *corev1.Pod {
	kind := "pod"
	if hostNetwork {
		kind = "host"
	}
	nonRoot, uid, noEscalation := true, int64(65534), false
	sc := &corev1.SecurityContext{
		RunAsNonRoot: &nonRoot, RunAsUser: &uid, AllowPrivilegeEscalation: &noEscalation,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	deadline := int64(opts.Timeout / time.Second)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "devata-probe-" + kind + "-",
			Namespace:    opts.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name": ProbeLabel, "app.kubernetes.io/managed-by": "devata",
				"devata.dev/probe-network": kind,
			},
			Annotations: map[string]string{"devata.dev/probe-node": node, "devata.dev/probe-target": target},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node, // no scheduler in the way: this node, or nothing
			HostNetwork:                   hostNetwork,
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: new(int64),
			AutomountServiceAccountToken:  new(false),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "probe", Image: opts.Image,
				Args:                     []string{"connect", target, "--timeout=5s"},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext:          sc,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
				},
			}},
		},
	}
}

// terminated is how a failed probe container ended.
func terminated(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = t.Reason
			}
			return fmt.Sprintf("%s (exit %d)", msg, t.ExitCode)
		}
	}
	if p.Status.Reason != "" {
		return strings.TrimSpace(p.Status.Reason + ": " + p.Status.Message)
	}
	return "failed"
}

// waiting says where a pod that did not finish was stuck.
func waiting(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return "waiting: " + strings.TrimSpace(w.Reason+" "+w.Message)
		}
	}
	if len(p.Status.ContainerStatuses) == 0 && (p.Status.Phase == "" || p.Status.Phase == corev1.PodPending) {
		return "never started: is the node's kubelet up?"
	}
	return "phase " + string(p.Status.Phase)
}

// probeTarget is the kubernetes Service frontend the probes connect to:
// the first ClusterIP (IPv4 sorts first) and its port.
func probeTarget(cl *Cluster) (string, bool) {
	if cl.APIService == nil {
		return "", false
	}
	for _, a := range cl.APIService.FrontendAddrs() {
		addr, _, _ := strings.Cut(a, "/")
		return addr, true
	}
	return "", false
}

// The cilium-probe check (Checks with Options.Probe) is the transaction
// rung, failing open like the other cilium checks. It creates pods through
// the target's Kubernetes client (and deletes them), so it runs only when
// asked for.

// checkProbe runs the transaction: from this node, one pod on the host
// network and one on the pod network connect to the kubernetes Service's
// ClusterIP, which only Cilium's kube-proxy replacement routes once
// kube-proxy is gone.
func checkProbe(ctx context.Context, t *view, kube kubernetes.Interface, opts ProbeOptions) []drift.Result {
	opts = opts.withDefaults()
	const desired = "from the host and the pod network, the kubernetes Service ClusterIP accepts a connection"
	var f drift.Findings
	if r, ok := kubeSideFirst(t, desired); ok {
		return []drift.Result{r}
	}
	if t.Cluster.APIServiceErr != nil {
		f.Unknown(t.Cluster.APIServiceErr, "kubectl -n default get service kubernetes")
		return []drift.Result{f.Result(desired, "")}
	}
	target, ok := probeTarget(t.Cluster)
	if !ok {
		f.Unknown(errors.New("Service default/kubernetes has no ClusterIP to probe"), "kubectl -n default get service kubernetes -o yaml")
		return []drift.Result{f.Result(desired, "")}
	}
	var results [2]ProbeResult
	var wg sync.WaitGroup
	for i, host := range []bool{true, false} {
		wg.Go(func() { results[i] = Probe(ctx, kube, opts, t.node(), target, host) })
	}
	wg.Wait()
	for i, where := range []string{"host network", "pod network"} {
		r := results[i]
		switch {
		case r.Err != nil && apierrors.IsForbidden(r.Err) && strings.Contains(r.Err.Error(), "PodSecurity"):
			f.Unknown(r.Err, "the host-network probe needs a privileged namespace: kubectl label namespace "+opts.Namespace+" pod-security.kubernetes.io/enforce=privileged (deploy/netcheck-probe.yaml does)")
		case r.Err != nil && apierrors.IsForbidden(r.Err):
			f.Unknown(r.Err, "--probe needs create, get and delete on pods in "+opts.Namespace+": kubectl apply -f deploy/netcheck-probe.yaml (or run without --probe)")
		case r.Err != nil && apierrors.IsNotFound(r.Err):
			f.Unknown(r.Err, "create the probe namespace: kubectl apply -f deploy/netcheck-probe.yaml (or pass --probe-namespace)")
		case r.Err != nil:
			f.Unknown(r.Err, "kubectl -n "+opts.Namespace+" get events --field-selector involvedObject.kind=Pod; is "+opts.Image+" pullable on node "+t.node()+"?")
		case r.Reached:
			f.Saw(fmt.Sprintf("%s on node %s: connected to %s (Service default/kubernetes), pod %s", where, t.node(), target, r.Pod))
		default:
			next := "cilium-dbg shell -- db/get frontends " + target + "/TCP"
			if pod, ok := t.Cluster.AgentPods[t.node()]; ok {
				next = agentExec(pod.Ref(), next) + "; " + agentExec(pod.Ref(), "cilium-dbg monitor --type drop")
			}
			f.Problem(fmt.Sprintf("from the %s on node %s, %s (Service default/kubernetes) did not accept a connection: %s", where, t.node(), target, r.Message), next)
		}
	}
	return []drift.Result{f.Result(desired, "")}
}
