package machines

import (
	"context"
	"fmt"
	"strings"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
)

func checkMachineStage(_ context.Context, t *target.Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o := t.Obs
	if o.StatusErr != nil {
		return []drift.Result{unknownRead(t, o.StatusErr)}
	}
	evidence := fmt.Sprintf("MachineStatus stage %s, ready %t", o.Stage, o.Ready)
	if o.Stage == "running" && o.Ready {
		return []drift.Result{drift.InSync(evidence)}
	}
	if o.Stage == "running" && o.NotReadyOnlyForNode() {
		// Talos' readiness includes the Node's (machine_status.go
		// nodeReadyCheck); the kubelet check reports the Node itself.
		return []drift.Result{drift.InSync(evidence, "not ready only for its Node ("+strings.Join(o.Unmet, "; ")+"): see the kubelet check")}
	}
	reason := "machine is " + o.Stage
	if len(o.Unmet) > 0 {
		reason += "; unmet: " + strings.Join(o.Unmet, "; ")
	}
	next := t.TalosctlFor("get machinestatus -o yaml") + "; " + t.TalosctlFor("dmesg")
	if o.Stage == "booting" && o.WaitingForEtcd() {
		// machined's boot sequence waits for etcd (StartAllServices)
		next = "its boot waits for etcd: devata bootstrap if no control plane has etcd yet, else " + next
	}
	return []drift.Result{drift.Drifted(reason, "running, ready", fmt.Sprintf("%s, ready=%t", o.Stage, o.Ready)).
		WithEvidence(evidence).WithNext(next)}
}
