// Package drain owns taking a Node's workloads off it before its machine
// goes away: cordon, evict through the Eviction API as kubectl drain
// --ignore-daemonsets --delete-emptydir-data does, and uncordon what it
// cordoned. It decides nothing about machines: devata remove (membership)
// and the rollout before a rebooting change (reconcile) call it.
package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/heartbeat"
)

// mirrorAnnotation marks a static pod's mirror (kubectl drain leaves them:
// the API server cannot evict them, the kubelet owns them).
const mirrorAnnotation = "kubernetes.io/config.mirror"

// CordonedAnnotation marks a Node devata cordoned itself, so that it
// uncordons only those: a Node an operator cordoned stays cordoned (as
// Talos' own AnnotationCordonedKey does for the Nodes it cordons,
// node_apply.go ApplyCordoned).
const CordonedAnnotation = "devata.dev/cordoned"

// Drainer drains Nodes through one Kubernetes client.
type Drainer struct {
	Kube kubernetes.Interface
	// Timeout bounds one API call; Wait bounds a whole drain; Poll is how
	// often a drain looks again.
	Timeout, Wait, Poll time.Duration
	// Say prints one line of progress; Heartbeat is how often a drain says
	// it still waits (heartbeat.Every when zero).
	Say       func(format string, args ...any)
	Heartbeat time.Duration
}

func (d *Drainer) say(format string, args ...any) {
	if d.Say != nil {
		d.Say(format, args...)
	}
}

func (d *Drainer) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.Timeout)
}

// ErrNoNode: the Node does not exist (never registered, or deleted).
var ErrNoNode = errors.New("no such Node")

// Cordon marks the Node unschedulable, and with CordonedAnnotation when
// it was schedulable until now (mark): it returns whether devata cordoned
// it now or had before (an annotation left by a run that stopped). A
// missing Node is ErrNoNode.
func (d *Drainer) Cordon(ctx context.Context, node string, mark bool) (byDevata bool, _ error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	n, err := d.Kube.CoreV1().Nodes().Get(cctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, fmt.Errorf("%s: %w", node, ErrNoNode)
	case err != nil:
		return false, fmt.Errorf("read Node %s: %w", node, err)
	}
	_, ours := n.Annotations[CordonedAnnotation]
	if n.Spec.Unschedulable {
		return ours, nil
	}
	patch := `{"spec":{"unschedulable":true}}`
	if mark {
		patch = `{"spec":{"unschedulable":true},"metadata":{"annotations":{"` + CordonedAnnotation + `":"true"}}}`
	}
	if _, err := d.Kube.CoreV1().Nodes().Patch(cctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("%s: %w", node, ErrNoNode)
		}
		return false, fmt.Errorf("cordon Node %s: %w", node, err)
	}
	return mark, nil
}

// Uncordon makes the Node schedulable again if devata cordoned it
// (CordonedAnnotation); a Node cordoned by anyone else stays so. It
// returns whether it uncordoned.
func (d *Drainer) Uncordon(ctx context.Context, node string) (bool, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	n, err := d.Kube.CoreV1().Nodes().Get(cctx, node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read Node %s: %w", node, err)
	}
	if _, ours := n.Annotations[CordonedAnnotation]; !ours {
		return false, nil
	}
	patch := `{"spec":{"unschedulable":null},"metadata":{"annotations":{"` + CordonedAnnotation + `":null}}}`
	if _, err := d.Kube.CoreV1().Nodes().Patch(cctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("uncordon Node %s: %w", node, err)
	}
	return true, nil
}

// BlockedError is a drain that PodDisruptionBudgets held until its Wait
// ended: each pod with the budget that refused its eviction.
type BlockedError struct {
	Node    string
	Wait    time.Duration
	Blocked []string // "namespace/pod (PodDisruptionBudget namespace/name: why)"
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("after %s the drain is blocked on %s: %s; scale the workload or relax its PodDisruptionBudget", e.Wait, e.Node, strings.Join(e.Blocked, ", "))
}

// Drain evicts the Node's pods as kubectl drain --ignore-daemonsets
// --delete-emptydir-data does: through the Eviction API, so that
// PodDisruptionBudgets hold; DaemonSet pods and mirror pods stay; a pod a
// budget protects is retried until Wait, then the drain stops with a
// *BlockedError. When the machine runs (settle), it waits until every
// evicted pod is gone (a new pod of the same name has another UID); when it
// is gone no kubelet will ever stop them, so it does not wait: they stay
// Terminating until the Node is deleted, when kube-controller-manager's pod
// garbage collector (gcOrphaned) removes them. It returns how many pods it
// evicted.
func (d *Drainer) Drain(ctx context.Context, node string, settle bool) (int, error) {
	wctx, cancel := context.WithTimeout(ctx, d.Wait)
	defer cancel()
	beat := heartbeat.Start(d.Say, d.Heartbeat, d.Wait, "the pods on "+node+" to be evicted")
	defer beat.Stop()
	evicted := map[types.UID]string{}
	for {
		pods, err := d.Pods(wctx, node)
		if err != nil {
			return len(evicted), err
		}
		var blocked []string
		left := 0
		for _, p := range pods {
			if _, done := evicted[p.UID]; done {
				left++
				continue
			}
			err := d.evict(wctx, p)
			switch {
			case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
				// NotFound, or a Conflict on the UID precondition: the pod
				// listed is gone already (deleted, or replaced by one of
				// the same name)
				evicted[p.UID] = p.Namespace + "/" + p.Name
				left++
			case budget(err) != "":
				// a PodDisruptionBudget does not allow it now
				blocked = append(blocked, fmt.Sprintf("%s/%s (PodDisruptionBudget %s/%s)", p.Namespace, p.Name, p.Namespace, budget(err)))
			case apierrors.IsTooManyRequests(err):
				blocked = append(blocked, fmt.Sprintf("%s/%s (%v)", p.Namespace, p.Name, err))
			default:
				return len(evicted), fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		if len(blocked) == 0 && (left == 0 || !settle) {
			if n := len(evicted); n > 0 {
				d.say("    %d %s evicted from %s", n, plural(n, "pod", "pods"), node)
			}
			if left > 0 {
				d.say("    %s is gone, so %d %s Terminating until its Node is deleted; the pod garbage collector then removes %s", node, left, plural(left, "pod stays", "pods stay"), plural(left, "it", "them"))
			}
			return len(evicted), nil
		}
		switch {
		case len(blocked) > 0:
			slices.Sort(blocked)
			beat.Saw("a PodDisruptionBudget holds " + strings.Join(blocked, ", "))
		default:
			beat.Saw(fmt.Sprintf("%d evicted %s still terminating", left, plural(left, "pod", "pods")))
		}
		if err := sleep(wctx, d.Poll); err != nil {
			if len(blocked) > 0 {
				return len(evicted), &BlockedError{Node: node, Wait: d.Wait, Blocked: blocked}
			}
			return len(evicted), fmt.Errorf("after %s %d evicted %s on %s have not terminated", d.Wait, left, plural(left, "pod", "pods"), node)
		}
	}
}

// budget is the name of the PodDisruptionBudget that refused an eviction,
// from the cause the API server's eviction handler attaches
// (pkg/registry/core/pod/storage/eviction.go: "The disruption budget NAME
// …", type DisruptionBudget, on a 429 and on a 403); "" for any other error.
func budget(err error) string {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil {
		return ""
	}
	for _, c := range se.Status().Details.Causes {
		if c.Type != policyv1.DisruptionBudgetCause {
			continue
		}
		rest, ok := strings.CutPrefix(c.Message, "The disruption budget ")
		if !ok {
			continue
		}
		name, why, _ := strings.Cut(strings.TrimSuffix(rest, "."), " ")
		if why != "" {
			return name + ": " + why
		}
		return name
	}
	return ""
}

// Pods are the Node's pods a drain evicts: not mirror pods, not DaemonSet
// pods, not finished ones.
func (d *Drainer) Pods(ctx context.Context, node string) ([]corev1.Pod, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	list, err := d.Kube.CoreV1().Pods(metav1.NamespaceAll).List(cctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods on %s: %w", node, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if _, mirror := p.Annotations[mirrorAnnotation]; mirror {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if owner := metav1.GetControllerOf(&p); owner != nil && owner.Kind == "DaemonSet" {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func (d *Drainer) evict(ctx context.Context, p corev1.Pod) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	ev := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &p.UID},
		},
	}
	// The request Evictions().Evict makes, without client-go's retries: a
	// budget's 429 carries Retry-After 10s (the eviction REST handler),
	// which client-go would sleep through up to ten times inside the call;
	// the drain's own loop retries, and says what holds it.
	return d.Kube.PolicyV1().RESTClient().Post().AbsPath("/api/v1").
		Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").
		Body(ev).MaxRetries(0).Do(cctx).Error()
}

// Unowned are the pods a drain would evict that no controller owns, as
// namespace/name: nothing recreates them.
func (d *Drainer) Unowned(ctx context.Context, node string) ([]string, error) {
	pods, err := d.Pods(ctx, node)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods {
		if metav1.GetControllerOf(&p) == nil {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
