package drain

import (
	"fmt"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// budget reads the PodDisruptionBudget's name out of the causes the API
// server's eviction handler attaches (kubernetes v1.37.2
// pkg/registry/core/pod/storage/eviction.go createTooManyRequestsError and
// checkAndDecrement), on its 429s and on its 403 for a negative budget; any
// other error names none. The end-to-end drain against a real API server is
// tested in cmd/devata (TestUpgradeDrainsTheNodeFirst,
// TestRemoveRunningWorkerHonoursBudgets).
func TestBudgetNamesTheRefusingBudget(t *testing.T) {
	withCause := func(err *apierrors.StatusError, msg string) error {
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
		return err
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{withCause(apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0), "The disruption budget web needs 2 healthy pods and has 2 currently"), "web: needs 2 healthy pods and has 2 currently"},
		{withCause(apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10), "The disruption budget web is still being processed by the server."), "web: is still being processed by the server"},
		{withCause(apierrors.NewForbidden(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudget"}, "db", fmt.Errorf("pdb disruptions allowed is negative")), "The disruption budget db does not allow evicting pods currently: pdb disruptions allowed is negative"), "db: does not allow evicting pods currently: pdb disruptions allowed is negative"},
		{apierrors.NewTooManyRequests("slow down", 1), ""},
		{apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web-0"), ""},
		{fmt.Errorf("dial tcp: connection refused"), ""},
	} {
		if got := budget(c.err); got != c.want {
			t.Errorf("budget(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
