package sim

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// finishTerminatingPods does the part of a kubelet's pod lifecycle a drain
// waits on: a pod bound to a node whose kubelet runs, once it has a
// deletionTimestamp (deleted or evicted), has its containers stopped and is
// removed from the API server by its kubelet, with a grace period of zero
// and its UID as precondition (kubelet's status manager, canBeDeleted then
// Delete with NewDeleteOptions(0) and a UID precondition). The sim's pods
// run no containers, so that happens at the next sync. A node whose kubelet
// is not posting (the machine is unreachable, halted or in maintenance)
// leaves its pods terminating forever, as on a real cluster until the
// Node is deleted and kube-controller-manager's pod garbage collector
// (gcOrphaned) removes them; envtest runs no controller-manager, so in the
// sim they stay.
func (f *Fleet) finishTerminatingPods(ctx context.Context, kc kubernetes.Interface, posting map[*Machine]string) error {
	running := map[string]bool{}
	for _, node := range posting {
		running[node] = true
	}
	list, err := kc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp == nil || !running[p.Spec.NodeName] {
			continue
		}
		uid := p.UID
		err := kc.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	return errors.Join(errs...)
}
