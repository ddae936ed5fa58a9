// Package machines is the registry's "machine" family: the checks of
// what Talos reports about each machine (config, talos-version, extensions,
// machine-stage, kubelet, etcd), one file each, over the target.Target that
// one pass of checks.FleetCheck observed through talosapi. It dials nothing
// itself.
package machines

import (
	"fmt"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/talosapi"
)

// Check names, as `devata drift --checks` takes them.
const (
	CheckConfig       = "config"
	CheckTalosVersion = "talos-version"
	CheckMachineStage = "machine-stage"
	CheckKubelet      = "kubelet"
	CheckEtcd         = "etcd"
)

// Checks returns the machine checks in ladder order.
func Checks() []drift.Check[*target.Target] {
	return []drift.Check[*target.Target]{
		{Name: CheckConfig, Rung: drift.RungReconciliation, FailClosed: true, Run: checkConfig, FixedBy: drift.FixedByApply | drift.FixedByJoin},
		{Name: CheckTalosVersion, Rung: drift.RungReconciliation, FailClosed: false, Run: checkTalosVersion, FixedBy: drift.FixedByUpgrade},
		{Name: CheckExtensions, Rung: drift.RungReconciliation, FailClosed: false, Run: checkExtensions},
		{Name: CheckMachineStage, Rung: drift.RungResources, FailClosed: true, Run: checkMachineStage, FixedBy: drift.FixedByJoin},
		{Name: CheckKubelet, Rung: drift.RungResources, FailClosed: true, Run: checkKubelet, Kubernetes: true},
		{Name: CheckEtcd, Rung: drift.RungResources, FailClosed: true, Applies: onControlPlanes, Run: checkEtcd, FixedBy: drift.FixedByJoin},
	}
}

// onControlPlanes is the Applies of checks that mean something on control
// planes only (etcd runs there alone).
func onControlPlanes(t *target.Target) bool { return t.Machine.IsControlPlane() }

// unreachable turns a machine-level observation failure into this check's
// result: Unknown when the machine did not answer, Drifted when it answered
// from maintenance mode (observed: not configured at all).
func unreachable(t *target.Target) (drift.Result, bool) {
	o := t.Obs
	if o.Err == nil {
		return drift.Result{}, false
	}
	name := t.Machine.Name
	if o.Maintenance {
		return drift.Drifted("machine is in maintenance mode: no config applied", "configured", "maintenance mode").
			WithEvidence("Talos API " + o.Endpoint + " answers only insecurely").
			WithNext("devata apply joins it to the running cluster, devata bootstrap builds a new one (or: talosctl apply-config --insecure -n " + t.NodeName() + ")"), true
	}
	if talosapi.IsForeignCA(o.Err) {
		// it answered: its certificate is signed by another CA than the talosconfig's
		return drift.Unknown(fmt.Errorf("%s answered with a certificate the talosconfig's CA did not sign: the talosconfig is not this cluster's (or %s was configured from another secrets bundle): %w", name, name, o.Err),
			"use this cluster's talosconfig (--talosconfig, or the settings file's talosconfig and context); compare its CA with the machines': talosctl config info"), true
	}
	return drift.Unreachable(name, o.Err, t.TalosctlFor("version")), true
}

func unknownRead(t *target.Target, err error) drift.Result {
	return drift.ReadFailed(err, t.TalosctlFor("get machinestatus"), "MachineConfig needs os:admin", "an os:admin talosconfig")
}
