package reconcile

import (
	"fmt"
	"testing"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// A machine in maintenance mode is joined while a control plane runs etcd,
// even one without a leader (no quorum: its member list fails, its own
// status answers): that etcd is still the cluster to join, and the join's
// gate waits for its quorum. Only when no control plane's etcd answers at
// all is the join skipped, naming devata bootstrap.
func TestPlanJoinsCountsAnEtcdWithoutQuorum(t *testing.T) {
	cp := &inventory.Machine{Name: "cp-1", Role: inventory.RoleControlPlane}
	w := &inventory.Machine{Name: "worker-2", Role: inventory.RoleWorker}
	leaderless := &talosapi.Observation{Machine: cp,
		EtcdErr:   fmt.Errorf("%w: etcd member list: etcdserver: no leader (Unknown)", talosapi.ErrEtcdNoLeader),
		EtcdLocal: &talosapi.EtcdMemberStatus{MemberID: 7, Errors: []string{"etcdserver: no leader"}}}
	down := &talosapi.Observation{Machine: cp, EtcdErr: fmt.Errorf("etcd member list: context deadline exceeded (DeadlineExceeded)")}
	// a client only says a kubeconfig was given: planJoins does not call it
	p := &Planner{Kube: &kubernetes.Clientset{}}
	for _, tc := range []struct {
		name string
		cp   *talosapi.Observation
		skip bool
	}{
		{"etcd without a leader", leaderless, false},
		{"no etcd answers", down, true},
	} {
		actions := []Action{{Machine: cp, Kind: KindSkip}, {Machine: w, Kind: KindJoin}}
		see(&actions[0], tc.cp)
		p.planJoins(actions, func() []*talosapi.Observation { return []*talosapi.Observation{tc.cp} })
		if skipped := actions[1].Kind == KindSkip; skipped != tc.skip {
			t.Errorf("%s: the join is %s (%q); want skipped %v", tc.name, actions[1].Kind, actions[1].Reason, tc.skip)
		}
	}
}
