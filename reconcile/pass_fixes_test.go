package reconcile_test

import (
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/reconcile"
)

// The drift a change fixed does not count against a pass: which checks each
// outcome fixes is the registry's (drift.Check.FixedBy), as it was written
// by name here before: a convergence the config, an upgrade the Talos
// version, a join what maintenance mode failed (and the version, when it
// joined at the inventory's).
func TestExitCodeForgivesWhatTheChangeFixed(t *testing.T) {
	for _, tc := range []struct {
		outcome reconcile.Outcome
		fixed   []string
		kept    []string
	}{
		{reconcile.OutcomeConverged, []string{"config"}, []string{"talos-version", "machine-stage", "etcd", "kubelet"}},
		{reconcile.OutcomeUpgraded, []string{"talos-version"}, []string{"config", "extensions", "etcd"}},
		{reconcile.OutcomeJoined, []string{"config", "machine-stage", "etcd", "talos-version"}, []string{"kubelet", "extensions", "storage-volumes"}},
		{reconcile.OutcomeJoinedOtherVersion, []string{"config", "machine-stage", "etcd"}, []string{"talos-version", "kubelet"}},
	} {
		for _, check := range append(tc.fixed, tc.kept...) {
			rep := drift.NewReport(drift.Header{Cluster: "c", Machines: []drift.Machine{{Name: "cp-1", Role: "controlplane"}}})
			r := drift.Drifted("differs", "a", "b")
			r.Machine, r.Check, r.Rung = "cp-1", check, drift.RungResources
			rep.Add(r)
			rep.Finish()
			res := &reconcile.PassResult{Report: rep, Outcomes: map[string]reconcile.Outcome{"cp-1": tc.outcome}}
			want := 1
			for _, f := range tc.fixed {
				if f == check {
					want = 0
				}
			}
			if got := res.ExitCode(); got != want {
				t.Errorf("%s, %s Drifted: exit %d, want %d", tc.outcome, check, got, want)
			}
		}
	}
}
