package gate_test

import (
	"errors"
	"strings"
	"testing"

	"devata.dev/devata/gate"
)

func TestMayRemove(t *testing.T) {
	three := []string{"cp-1", "cp-2", "cp-3"}
	for _, tc := range []struct {
		name string
		v    gate.EtcdView
		rm   string
		want string // "" allowed; else a part of the refusal
		loss bool
	}{
		{"healthy three, the orphan gone", gate.EtcdView{Members: three, Healthy: []string{"cp-1", "cp-2"}}, "cp-3", "", false},
		{"healthy three, the orphan up", gate.EtcdView{Members: three, Healthy: three}, "cp-3", "", false},
		{"a member that stays is down", gate.EtcdView{Members: three, Healthy: []string{"cp-1"}, Down: []string{"cp-2"}}, "cp-3", "cp-2 is down", false},
		{"a member that stays is unhealthy", gate.EtcdView{Members: three, Healthy: []string{"cp-1"}}, "cp-3", "below their quorum 2", false},
		{"a learner pending", gate.EtcdView{Members: three, Healthy: three, Learners: []string{"cp-4"}}, "cp-3", "learner cp-4", false},
		{"disagreement", gate.EtcdView{Problems: []string{"cp-1 sees members [cp-1 cp-2]"}}, "cp-3", "do not agree", false},
		{"not a member", gate.EtcdView{Members: three, Healthy: three}, "cp-9", "not an etcd member", false},
		{"the last member", gate.EtcdView{Members: []string{"cp-1"}, Healthy: []string{"cp-1"}}, "cp-1", "only member", true},
		{"two to one", gate.EtcdView{Members: []string{"cp-1", "cp-2"}, Healthy: []string{"cp-1"}}, "cp-2", "", false},
		{"no quorum", gate.EtcdView{NoLeader: []string{"cp-1"}, Down: []string{"cp-2", "cp-3"}}, "cp-3", "etcd cannot lose member cp-3 now: cp-2 is down; etcd has no quorum: no member has a leader (cp-1 runs without one; cp-2, cp-3 are down); the Kubernetes API does not answer until more than half of etcd's members run; etcd commits a removal through its quorum; bring back the control planes that are down", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := gate.MayRemove(tc.v, tc.rm)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var qe *gate.QuorumError
			if !errors.As(err, &qe) || !strings.Contains(err.Error(), tc.want) || qe.Loss != tc.loss {
				t.Fatalf("got %v, want a QuorumError (loss %v) saying %q", err, tc.loss, tc.want)
			}
			if qe.Next == "" {
				t.Error("the refusal says nothing about what to do")
			}
		})
	}
}
