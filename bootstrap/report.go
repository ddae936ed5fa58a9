package bootstrap

import (
	"slices"

	"devata.dev/devata/checks"
	"devata.dev/devata/machines"
)

// ReportChecks are the checks of the drift report that closes a bootstrap:
// the machine and storage checks, the kubelet's only when the Nodes are
// watched and can be Ready (with cni none they cannot before a CNI runs,
// which comes after bootstrap, as does Cilium: devata drift checks them
// then). Neither certificates (the credentials bootstrap just made) nor
// coredns (Ready only once a CNI runs) is of the report.
func (s *Sequence) ReportChecks() []string {
	names := slices.DeleteFunc(checks.Of(checks.FamilyMachine, checks.FamilyStorage), func(n string) bool { return n == machines.CheckKubelet })
	if !s.opts.SkipNodes && !s.CNINone() {
		names = append(names, machines.CheckKubelet)
	}
	return names
}
