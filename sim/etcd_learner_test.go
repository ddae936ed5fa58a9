package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// A control plane that joins runs etcd as a learner until Talos promotes
// it (services/etcd.go: addMember as a learner in the PreFunc, etcd
// started, promoteMember in the background). etcd serves a learner Status
// but not MemberList (v3rpc interceptor.go isRPCSupportedForLearner:
// "etcdserver: rpc not supported for learner"), which Talos' EtcdMemberList
// passes on, code Unknown; its etcd service runs, its health check (a
// linearizable Get) failing the same way. Once promoted it lists the
// members like any other.
func TestEtcdLearnerRefusesTheMemberList(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 2, sim.Options{EtcdJoinDelay: 3 * time.Second})
	c2 := admin(t, f.Machine("cp-2").Addr())

	var st *machine.EtcdMemberStatus
	until(t, "cp-2 runs etcd as a learner", func() (bool, error) {
		resp, err := c2.EtcdStatus(ctxTimeout(t, 500*time.Millisecond))
		if err != nil {
			return false, nil // not added yet: its etcd does not run
		}
		st = resp.Messages[0].GetMemberStatus()
		return st.GetIsLearner(), nil
	})
	if st.GetMemberId() == 0 || st.GetLeader() == 0 {
		t.Errorf("a learner's status: member %x leader %x, want both set", st.GetMemberId(), st.GetLeader())
	}

	_, err := c2.EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{QueryLocal: true})
	if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), "etcdserver: rpc not supported for learner") {
		t.Errorf("EtcdMemberList on a learner: %v (code %s), want Unknown \"etcdserver: rpc not supported for learner\"", err, client.StatusCode(err))
	}
	if got := serviceState(t, c2, "etcd"); got != "Running" {
		t.Errorf("etcd service on a learner: %s, want Running (unhealthy)", got)
	}

	// cp-1, a voting member, lists cp-2 as a learner meanwhile
	resp, err := admin(t, f.Machine("cp-1").Addr()).EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{QueryLocal: true})
	if err != nil {
		t.Fatalf("EtcdMemberList on cp-1: %v", err)
	}
	learners := 0
	for _, m := range resp.Messages[0].GetMembers() {
		if m.GetIsLearner() {
			learners++
		}
	}
	if learners != 1 {
		t.Errorf("cp-1 lists %d learners, want 1: %v", learners, resp.Messages[0].GetMembers())
	}

	joined(t, f, 2)
	if _, err := c2.EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{QueryLocal: true}); err != nil {
		t.Errorf("EtcdMemberList on cp-2 once promoted: %v", err)
	}
}
