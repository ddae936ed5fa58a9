package drift_test

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"

	"devata.dev/devata/drift"
)

// The fixture is an obviously fake fleet: documentation addresses, no real key
// or token anywhere; the diff shows a redacted value the way checks hand it over.

var fixtureTime = time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)

var fixtureMachines = []drift.Machine{
	{Name: "cp-1", Role: "controlplane", Address: "10.20.0.11"},
	{Name: "cp-2", Role: "controlplane", Address: "10.20.0.12"},
	{Name: "worker-1", Role: "worker", Address: "10.20.0.21"},
	{Name: "worker-2", Role: "worker", Address: "10.20.0.22"},
	{Name: "worker-10", Role: "worker", Address: "10.20.0.30"}, // declared, never observed
}

const fixtureDiff = `--- rendered
+++ active
@@ -3,8 +3,8 @@
 machine:
   kubelet:
-    image: ghcr.io/siderolabs/kubelet:v1.34.1
+    image: ghcr.io/siderolabs/kubelet:v1.34.0
   token: ******
   network:
-    hostname: cp-2
+    hostname: cp-2-old
`

// fixtureResults are in no particular order on purpose: the report sorts.
func fixtureResults() []drift.Result {
	dialErr := fmt.Errorf("observe worker-1: dial tcp 10.20.0.21:50000: %w", syscall.ECONNREFUSED)
	var versionErr *multierror.Error
	versionErr = multierror.Append(versionErr,
		fmt.Errorf("10.20.0.21: %w", errors.New("rpc error: code = Unavailable desc = connection refused")),
		fmt.Errorf("10.20.0.21: %w", errors.New("context deadline exceeded")))
	next := "talosctl -n 10.20.0.21 version (is the machine up and port 50000 reachable?)"
	return []drift.Result{
		drift.InSync("VolumeStatus u-longhorn phase ready, xfs, 120 GiB", "MountStatus /var/mnt/longhorn").Of("worker-2", "storage", drift.RungInfrastructure),
		drift.InSync("Version tag v1.11.0").Of("cp-1", "talos-version", drift.RungReconciliation),
		drift.InSync("MachineConfig v1alpha1 version 7").Of("cp-1", "config", drift.RungReconciliation),
		drift.InSync("cluster.proxy.disabled true", "cluster.network.cni none").Of("cp-1", "cilium-declaration", drift.RungDeclaration),
		drift.InSync("service kubelet running, healthy", "Node cp-1 Ready").Of("cp-1", "kubelet", drift.RungResources),
		drift.InSync("3 members, all healthy").Of("cp-1", "etcd", drift.RungResources),
		drift.Drifted("active MachineConfig differs from the rendered config", "version 8", "version 7").Of("cp-2", "config", drift.RungReconciliation).
			WithDiff(fixtureDiff).
			WithEvidence("MachineConfig v1alpha1 version 7").
			WithNext("devata apply --machines cp-2"),
		drift.InSync("Version tag v1.11.0").Of("cp-2", "talos-version", drift.RungReconciliation),
		drift.Drifted("node labels differ", "topology.kubernetes.io/zone=rack-b", "topology.kubernetes.io/zone=rack-a").Of("cp-2", "kubelet", drift.RungResources).
			WithEvidence("Node cp-2 labels").
			WithNext("devata apply --machines cp-2"),
		drift.InSync("3 members, all healthy").Of("cp-2", "etcd", drift.RungResources),
		func() drift.Result {
			r := drift.Unknown(dialErr, next).Of("worker-1", "config", drift.RungReconciliation)
			r.FailClosed = true
			return r
		}(),
		drift.Unknown(versionErr, next).Of("worker-1", "talos-version", drift.RungReconciliation),
		drift.InSync("MachineConfig v1alpha1 version 3").Of("worker-2", "config", drift.RungReconciliation),
		drift.InSync("Version tag v1.11.0").Of("worker-2", "talos-version", drift.RungReconciliation),
	}
}

func fixtureHeader(simulated bool) drift.Header {
	return drift.Header{
		Cluster:     "devata-test",
		Inventory:   "examples/homelab/inventory.yaml",
		Simulated:   simulated,
		GeneratedAt: fixtureTime,
		Machines:    fixtureMachines,
	}
}

// fixtureReport is the finished fixture report.
func fixtureReport(simulated bool) *drift.Report {
	r := drift.NewReport(fixtureHeader(simulated))
	r.Add(fixtureResults()...)
	r.Finish()
	return r
}
