package gate

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
)

// KubernetesPath decides whether the cluster's Kubernetes components may
// move from the lowest version any of them runs (from) to the inventory's
// cluster.kubernetesVersion (to). It is talosctl upgrade-k8s' rule
// (pkg/cluster/kubernetes/talos_managed.go Upgrade over DetectLowestVersion,
// go-kubernetes upgrade.Path.IsSupported): within one minor release, or to
// the next one. Kubernetes' version skew policy is the reason: every
// component may be at most one minor release ahead of the oldest, and
// kube-apiserver never behind another component.
func KubernetesPath(from, to string) error {
	f, err := semver.ParseTolerant(from)
	if err != nil {
		return fmt.Errorf("a component runs Kubernetes %q, not a version devata can compare: upgrade it by hand (talosctl upgrade-k8s)", from)
	}
	t, err := semver.ParseTolerant(to)
	if err != nil {
		return fmt.Errorf("cluster.kubernetesVersion %q is not a version: fix the inventory", to)
	}
	switch {
	case t.Major == f.Major && t.Minor == f.Minor:
		return nil
	case t.Major == f.Major && t.Minor == f.Minor+1:
		return nil
	case t.Major < f.Major || (t.Major == f.Major && t.Minor < f.Minor):
		return fmt.Errorf("a downgrade from %s to %s: Kubernetes does not go back a minor release (etcd holds objects in the newer API versions); set cluster.kubernetesVersion to a %d.%d release", from, to, f.Major, f.Minor)
	}
	return fmt.Errorf("a jump from %s to %s: Kubernetes moves one minor release at a time (its version skew policy); set cluster.kubernetesVersion to the latest v%d.%d patch, run, then go on to %s", from, to, f.Major, f.Minor+1, to)
}

// KubernetesOnTalos refuses a Kubernetes version the machine's running Talos
// does not support: Talos refuses such a config (machinery
// compatibility.KubernetesVersion.SupportedWith, what talosctl upgrade-k8s
// checks on every node first: pkg/cluster/kubernetes/compat.go
// VerifyVersionCompatibility).
func KubernetesOnTalos(kube, talos string) error {
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
	if err != nil {
		return fmt.Errorf("the machine reports Talos %q, not a version devata can compare: check it with talosctl version", talos)
	}
	kv, err := compatibility.ParseKubernetesVersion(strings.TrimPrefix(kube, "v"))
	if err != nil {
		return fmt.Errorf("cluster.kubernetesVersion %q is not a version: fix the inventory", kube)
	}
	if err := kv.SupportedWith(tv); err != nil {
		return fmt.Errorf("Talos %s does not run Kubernetes %s (%v): upgrade Talos first (devata upgrade), or pick a Kubernetes version it supports", talos, kube, err)
	}
	return nil
}
