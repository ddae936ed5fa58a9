// Package probe runs the transaction rung's pods: one short-lived pod
// pinned to a node, created, awaited and always deleted, whose container's
// exit and termination message are the outcome. The families' probe
// checks (netcheck's cilium-probe, dnscheck's coredns-probe) say what the
// pod runs and what its outcome means; this package decides nothing.
package probe

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Defaults of the --probe pods.
const (
	DefaultNamespace = "devata-probe"
	// DefaultImage has agnhost's connect subcommand and, from its Alpine
	// base, BIND's dig and a shell (kubernetes test/images/agnhost
	// Dockerfile: bind-tools, bash).
	DefaultImage   = "registry.k8s.io/e2e-test-images/agnhost:2.53"
	DefaultTimeout = time.Minute

	// Label marks probe pods (app.kubernetes.io/name=devata-probe).
	Label = "devata-probe"
)

// Options configure the probe pods: where they run, with which image, and
// how long a pod may take from creation to its end before the probe gives
// up.
type Options struct {
	Namespace string
	Image     string
	Timeout   time.Duration
}

// WithDefaults fills what is not set.
func (o Options) WithDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Spec is one probe pod: the node it is pinned to, its network, what its
// one container runs, and what the pod's labels and annotations say of it.
type Spec struct {
	Node string
	// Network names the pod ("devata-probe-<Network>-") and is its
	// devata.dev/probe-network label: "pod", "host", "dns".
	Network     string
	HostNetwork bool
	// Command replaces the image's entrypoint when set; Args are its
	// arguments.
	Command, Args []string
	// Annotations are added to the pod's devata.dev/probe-node.
	Annotations map[string]string
}

// Result is one probe pod's outcome.
type Result struct {
	// Pod is "namespace/name" of the pod that ran (and was deleted).
	Pod string
	// Succeeded is true when the container exited 0.
	Succeeded bool
	// ExitCode and Message are how the container ended: its exit code and
	// termination message (what it wrote to /dev/termination-log, or on
	// an error with nothing written there, the end of its log), trimmed.
	ExitCode int32
	Message  string
	// Err says why there is no outcome: the pod could not be created
	// (forbidden, rejected by Pod Security), or did not finish in time.
	Err error
}

// Failure is how a failed container ended, as a report says it:
// "TIMEOUT (exit 1)".
// A pod that failed before its container ran has no exit code (-1).
func (r Result) Failure() string {
	if r.ExitCode < 0 {
		return r.Message
	}
	return fmt.Sprintf("%s (exit %d)", r.Message, r.ExitCode)
}

// Run creates the pod, waits for it to end and always deletes it, even
// when ctx ends first. A delete that fails is the result's Err when
// nothing else went wrong, so that a pod left behind is said (res is named
// for that: the deferred delete sets it after the return statement ran).
func Run(ctx context.Context, kube kubernetes.Interface, opts Options, spec Spec) (res Result) {
	opts = opts.WithDefaults()
	pods := kube.CoreV1().Pods(opts.Namespace)
	created, err := pods.Create(ctx, podOf(opts, spec), metav1.CreateOptions{})
	if err != nil {
		return Result{Err: fmt.Errorf("create probe pod in %s: %w", opts.Namespace, err)}
	}
	res = Result{Pod: created.Namespace + "/" + created.Name}
	defer func() {
		// Always cleaned up: on a context of its own, so that a cancelled
		// pass still deletes what it created.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := pods.Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) && res.Err == nil {
			res.Err = fmt.Errorf("delete probe pod %s: %w (delete it by hand: kubectl -n %s delete pod -l app.kubernetes.io/name=%s)", res.Pod, err, opts.Namespace, Label)
		}
	}()

	wctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := created
	for {
		switch last.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			res.Succeeded = last.Status.Phase == corev1.PodSucceeded
			res.ExitCode, res.Message = terminated(last)
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

// podOf is the probe pod: pinned to the node, unprivileged, deleted by the
// API server after opts.Timeout at the latest.
func podOf(opts Options, spec Spec) *corev1.Pod {
	nonRoot, uid, noEscalation := true, int64(65534), false
	sc := &corev1.SecurityContext{
		RunAsNonRoot: &nonRoot, RunAsUser: &uid, AllowPrivilegeEscalation: &noEscalation,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	deadline := int64(opts.Timeout / time.Second)
	annotations := map[string]string{"devata.dev/probe-node": spec.Node}
	for k, v := range spec.Annotations {
		annotations[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "devata-probe-" + spec.Network + "-",
			Namespace:    opts.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name": Label, "app.kubernetes.io/managed-by": "devata",
				"devata.dev/probe-network": spec.Network,
			},
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			NodeName:                      spec.Node, // no scheduler in the way: this node, or nothing
			HostNetwork:                   spec.HostNetwork,
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: new(int64),
			AutomountServiceAccountToken:  new(false),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "probe", Image: opts.Image,
				Command: spec.Command, Args: spec.Args,
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

// terminated is how the probe container ended: its exit code and message
// (the reason when it left none).
func terminated(p *corev1.Pod) (int32, string) {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			msg := strings.TrimSpace(t.Message)
			if msg == "" && t.ExitCode != 0 {
				msg = t.Reason
			}
			return t.ExitCode, msg
		}
	}
	if p.Status.Reason != "" {
		return -1, strings.TrimSpace(p.Status.Reason + ": " + p.Status.Message)
	}
	if p.Status.Phase == corev1.PodFailed {
		return -1, "failed"
	}
	return 0, ""
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

// Next is the next step when a probe pod had no outcome (Result.Err): what
// RBAC, Pod Security or the namespace lacks, or where to look for a pod
// that never finished.
func Next(err error, opts Options, node string) string {
	opts = opts.WithDefaults()
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity"):
		return "the host-network probe needs a privileged namespace: kubectl label namespace " + opts.Namespace + " pod-security.kubernetes.io/enforce=privileged (deploy/netcheck-probe.yaml does)"
	case apierrors.IsForbidden(err):
		return "--probe needs create, get and delete on pods in " + opts.Namespace + ": kubectl apply -f deploy/netcheck-probe.yaml (or run without --probe)"
	case apierrors.IsNotFound(err):
		return "create the probe namespace: kubectl apply -f deploy/netcheck-probe.yaml (or pass --probe-namespace)"
	}
	return "kubectl -n " + opts.Namespace + " get events --field-selector involvedObject.kind=Pod; is " + opts.Image + " pullable on node " + node + "?"
}
