package sim_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/sim"
)

// A control plane whose system disk was lost (a wipe that did not leave
// etcd) is still a member in the others' eyes. Configured again, it joins
// as Talos v1.11.0 joins a node with an empty data directory
// (internal/app/machined/pkg/system/services/etcd.go buildInitialCluster →
// addMember): the member of its own hostname is removed first, under etcd's
// strict reconfiguration check, then it is added as a learner and
// promoted. So the cluster ends with three members, one of them new, not
// four with a dead one among them.
func TestEtcdRejoinReplacesTheMemberOfTheSameName(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 50 * time.Millisecond})
	joined(t, f, 3)

	c1 := admin(t, f.Machine("cp-1").Addr())
	old := memberIDs(t, c1)["cp-2"]

	cp2 := f.Machine("cp-2")
	cp2.Wipe()
	until(t, "cp-2 in maintenance mode", func() (bool, error) { return !cp2.Configured() && !cp2.Observe().Down, nil })

	if got := memberIDs(t, c1); len(got) != 3 || got["cp-2"] != old {
		t.Fatalf("members after the wipe: %v; want cp-2's old member still listed", got)
	}

	cp, _ := oldFleetConfigs(t)
	if _, err := insecure(t, cp2.Addr()).ApplyConfiguration(ctxTimeout(t, 5*time.Second), &machine.ApplyConfigurationRequest{Data: cp, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatalf("configure cp-2 again: %v", err)
	}

	until(t, "cp-2 a member again under a new ID, the old one gone", func() (bool, error) {
		resp, err := c1.EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{})
		if err != nil {
			return false, err
		}

		var hosts []string
		fresh := false
		for _, m := range resp.Messages[0].Members {
			hosts = append(hosts, m.Hostname)
			fresh = fresh || m.Hostname == "cp-2" && m.Id != old && !m.IsLearner
		}

		t.Logf("members %v", hosts)

		return fresh && len(hosts) == 3, nil
	})
	joined(t, f, 3)
}
