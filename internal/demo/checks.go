package demo

import (
	"slices"

	"devata.dev/devata/checks"
)

// checkNames are the checks the demo's drift reports run: every check that
// always runs of the machine and storage families but the detailed ones
// (drift.Check.Detail: the storage declaration, raw disks); certificates
// and coredns are not asked for (the story does not show them); the cilium
// checks only with Kubernetes, and without it none that reads it.
func checkNames(kubernetes bool) []string {
	reg := checks.All()
	families := []checks.Family{checks.FamilyMachine, checks.FamilyStorage}
	if kubernetes {
		families = append(families, checks.FamilyNet)
	}
	return slices.DeleteFunc(reg.Of(families...), func(n string) bool {
		e, _ := reg.Get(n)
		return e.Detail || !kubernetes && e.Kubernetes
	})
}
