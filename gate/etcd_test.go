package gate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"devata.dev/devata/gate"
)

func cpNames(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("cp-%d", i))
	}
	return out
}

func healthyView(n int) gate.EtcdView {
	return gate.EtcdView{Members: cpNames(n), Healthy: cpNames(n)}
}

func TestMayTakeDown(t *testing.T) {
	oneDown := healthyView(3)
	oneDown.Healthy, oneDown.Down = []string{"cp-1", "cp-2"}, []string{"cp-3"}
	unhealthy := healthyView(5)
	unhealthy.Healthy = []string{"cp-1", "cp-2", "cp-3", "cp-5"}
	learner := healthyView(3)
	learner.Learners = []string{"cp-4"}
	disagree := gate.EtcdView{Healthy: cpNames(3), Problems: []string{"cp-3 sees members [cp-1 cp-3], want [cp-1 cp-2 cp-3]"}}
	noQuorum := gate.EtcdView{NoLeader: []string{"cp-1"}, Down: []string{"cp-2", "cp-3"}, Problems: []string{"etcd has no quorum: no member has a leader (cp-1 runs without one; cp-2, cp-3 are down)"}}
	for _, tc := range []struct {
		name string
		view gate.EtcdView
		down string
		// loss: refused because etcd is too small (--allow-quorum-loss
		// accepts it); wait: refused until etcd is healthy; neither: allowed.
		loss, wait bool
		want       string
	}{
		{name: "1 member", view: healthyView(1), down: "cp-1", loss: true,
			want: "etcd has 1 member; taking cp-1 down leaves 0 of 1, below quorum 1: the Kubernetes API stops until it returns; pass --allow-quorum-loss to accept that, or add control planes up to three (2 more)"},
		{name: "2 members", view: healthyView(2), down: "cp-2", loss: true,
			want: "etcd has 2 members; taking cp-2 down leaves 1 of 2, below quorum 2: the Kubernetes API stops until it returns; pass --allow-quorum-loss to accept that, or add a third control plane"},
		{name: "3 members", view: healthyView(3), down: "cp-2"},
		{name: "4 members", view: healthyView(4), down: "cp-4"},
		{name: "5 members", view: healthyView(5), down: "cp-1"},
		{name: "unhealthy member", view: unhealthy, down: "cp-1", wait: true, want: "etcd cannot lose cp-1 now: cp-4 is not healthy; wait until every member is healthy"},
		{name: "learner pending", view: learner, down: "cp-1", wait: true, want: "learner cp-4 is not yet promoted"},
		{name: "one already down", view: oneDown, down: "cp-2", wait: true, want: "cp-3 is down; taking cp-2 down now leaves 1 of 3 healthy, below quorum 2"},
		{name: "members disagree", view: disagree, down: "cp-1", wait: true, want: "the control planes do not agree on etcd's members"},
		{name: "no quorum", view: noQuorum, down: "cp-1", wait: true, want: "etcd cannot lose cp-1 now: cp-2 is down; cp-3 is down; etcd has no quorum: no member has a leader (cp-1 runs without one; cp-2, cp-3 are down); bring back the control planes that are down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := gate.MayTakeDown(tc.view, tc.down)
			if !tc.loss && !tc.wait {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var qe *gate.QuorumError
			if !errors.As(err, &qe) {
				t.Fatalf("want a *QuorumError, got %v", err)
			}
			if qe.Loss != tc.loss {
				t.Errorf("Loss = %t, want %t (%v)", qe.Loss, tc.loss, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n  %v\ndoes not say\n  %s", err, tc.want)
			}
		})
	}
}
