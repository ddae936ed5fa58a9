package demo

import (
	"slices"

	"devata.dev/devata/checks"
	"devata.dev/devata/machines"
	"devata.dev/devata/storagecheck"
)

// checkNames are the checks the demo's drift reports run: every check that
// always runs but storage-declaration and storage-raw-disks, certificates
// and coredns (their families are not asked for: the story does not show
// them), and without Kubernetes neither the kubelet nor the cilium checks.
func checkNames(kubernetes bool) []string {
	families := []checks.Family{checks.FamilyMachine, checks.FamilyStorage}
	if kubernetes {
		families = append(families, checks.FamilyNet)
	}
	return slices.DeleteFunc(checks.Of(families...), func(n string) bool {
		return n == storagecheck.CheckDeclaration || n == storagecheck.CheckRawDisks || !kubernetes && n == machines.CheckKubelet
	})
}
