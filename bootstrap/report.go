package bootstrap

import (
	"slices"

	"devata.dev/devata/checks"
)

// ReportChecks are the checks of the drift report that closes a bootstrap:
// the machine and storage checks, those that read Kubernetes (the
// kubelet's) only when the Nodes are watched and can be Ready (with cni
// none they cannot before a CNI runs, which comes after bootstrap, as does
// Cilium: devata drift checks them then). Neither certificates (the
// credentials bootstrap just made) nor coredns (Ready only once a CNI
// runs) is of the report.
func (s *Sequence) ReportChecks() []string {
	reg := checks.All()
	all := reg.Of(checks.FamilyMachine, checks.FamilyStorage)
	kube := func(n string) bool { e, _ := reg.Get(n); return e.Kubernetes }
	names := slices.DeleteFunc(slices.Clone(all), kube)
	if !s.opts.SkipNodes && !s.CNINone() {
		// after the others, as the report has always listed them
		names = append(names, slices.DeleteFunc(all, func(n string) bool { return !kube(n) })...)
	}
	return names
}
