package membership

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"devata.dev/devata/internal/heartbeat"
)

// mirrorAnnotation marks a static pod's mirror (kubectl drain leaves them:
// the API server cannot evict them, the kubelet owns them).
const mirrorAnnotation = "kubernetes.io/config.mirror"

// drain evicts the Node's pods as kubectl drain --ignore-daemonsets
// --delete-emptydir-data does: through the Eviction API, so that
// PodDisruptionBudgets hold; DaemonSet pods and mirror pods stay; a pod a
// budget protects is retried until r.Wait, then the drain stops and nothing
// after it runs. When the machine runs (settle), it waits until every
// evicted pod is gone (a new pod of the same name has another UID); when it
// is gone no kubelet will ever stop them, so it does not wait: they stay
// Terminating until the Node is deleted, when kube-controller-manager's pod
// garbage collector (gcOrphaned) removes them.
func (r *Remover) drain(ctx context.Context, node string, settle bool) error {
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	beat := heartbeat.Start(r.Say, r.Heartbeat, r.Wait, "the pods on "+node+" to be evicted")
	defer beat.Stop()
	evicted := map[types.UID]string{}
	for {
		pods, err := r.pods(wctx, node)
		if err != nil {
			return err
		}
		var blocked []string
		left := 0
		for _, p := range pods {
			if _, done := evicted[p.UID]; done {
				left++
				continue
			}
			err := r.evict(wctx, p)
			switch {
			case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
				// NotFound, or a Conflict on the UID precondition: the pod
				// listed is gone already (deleted, or replaced by one of
				// the same name)
				evicted[p.UID] = p.Namespace + "/" + p.Name
				left++
			case apierrors.IsTooManyRequests(err):
				// a PodDisruptionBudget does not allow it now
				blocked = append(blocked, fmt.Sprintf("%s/%s (%v)", p.Namespace, p.Name, err))
			default:
				return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		if len(blocked) == 0 && (left == 0 || !settle) {
			if n := len(evicted); n > 0 {
				r.say("    %d %s evicted from %s", n, plural(n, "pod", "pods"), node)
			}
			if left > 0 {
				r.say("    %s is gone, so %d %s stay Terminating until its Node is deleted; the pod garbage collector then removes them", node, left, plural(left, "pod", "pods"))
			}
			return nil
		}
		switch {
		case len(blocked) > 0:
			slices.Sort(blocked)
			beat.Saw("a PodDisruptionBudget holds " + strings.Join(blocked, ", "))
		default:
			beat.Saw(fmt.Sprintf("%d evicted %s still terminating", left, plural(left, "pod", "pods")))
		}
		if err := sleep(wctx, r.Poll); err != nil {
			if len(blocked) > 0 {
				return fmt.Errorf("after %s the drain is blocked: %s; the Node stays cordoned; scale the workload or relax its PodDisruptionBudget", r.Wait, strings.Join(blocked, ", "))
			}
			return fmt.Errorf("after %s %d evicted %s on %s have not terminated", r.Wait, left, plural(left, "pod", "pods"), node)
		}
	}
}

// pods are the Node's pods a drain evicts.
func (r *Remover) pods(ctx context.Context, node string) ([]corev1.Pod, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	list, err := r.Kube.CoreV1().Pods(metav1.NamespaceAll).List(cctx, metav1.ListOptions{
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

func (r *Remover) evict(ctx context.Context, p corev1.Pod) error {
	cctx, cancel := r.call(ctx)
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
	return r.Kube.PolicyV1().RESTClient().Post().AbsPath("/api/v1").
		Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").
		Body(ev).MaxRetries(0).Do(cctx).Error()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// unowned are the pods a drain would evict that no controller owns, as
// namespace/name.
func (r *Remover) unowned(ctx context.Context, node string) ([]string, error) {
	pods, err := r.pods(ctx, node)
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
