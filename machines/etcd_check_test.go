package machines_test

import (
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/machines"
	"devata.dev/devata/sim"
)

// The etcd check on the control plane left without quorum says what it
// sees, Drifted: etcd runs there without a leader, with no quorum, and
// what to do; the two that are down are Unknown, as any machine that does
// not answer.
func TestEtcdCheckWithoutQuorum(t *testing.T) {
	tf := startFleet(t)
	tf.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	tf.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	rep := tf.drift(t, machines.CheckEtcd)
	r := statusOf(rep, "cp-1", machines.CheckEtcd)
	if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, "etcd runs on cp-1 but has no leader: etcd has no quorum") ||
		!strings.Contains(r.Next, "bring back the control planes") || !slices.ContainsFunc(r.Evidence, func(e string) bool { return strings.Contains(e, "etcdserver: no leader") }) {
		t.Errorf("cp-1 without quorum: %s %q, evidence %q, next %q", r.Status, r.Reason, r.Evidence, r.Next)
	}
	for _, name := range []string{"cp-2", "cp-3"} {
		if s := statusOf(rep, name, machines.CheckEtcd).Status; s != drift.StatusUnknown {
			t.Errorf("%s down: %s, want Unknown", name, s)
		}
	}
}
