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
		drift.InSync("worker-2", "storage", drift.RungInfrastructure, "VolumeStatus u-longhorn phase ready, xfs, 120 GiB", "MountStatus /var/mnt/longhorn"),
		drift.InSync("cp-1", "talos-version", drift.RungReconciliation, "Version tag v1.11.0"),
		drift.InSync("cp-1", "config", drift.RungReconciliation, "MachineConfig v1alpha1 version 7"),
		drift.InSync("cp-1", "cilium-declaration", drift.RungDeclaration, "cluster.proxy.disabled true", "cluster.network.cni none"),
		drift.InSync("cp-1", "kubelet", drift.RungResources, "service kubelet running, healthy", "Node cp-1 Ready"),
		drift.InSync("cp-1", "etcd", drift.RungResources, "3 members, all healthy"),
		drift.Drifted("cp-2", "config", drift.RungReconciliation,
			"active MachineConfig differs from the rendered config", "version 8", "version 7").
			WithDiff(fixtureDiff).
			WithEvidence("MachineConfig v1alpha1 version 7").
			WithNext("devata apply --machines cp-2"),
		drift.InSync("cp-2", "talos-version", drift.RungReconciliation, "Version tag v1.11.0"),
		drift.Drifted("cp-2", "kubelet", drift.RungResources, "node labels differ",
			"topology.kubernetes.io/zone=rack-b", "topology.kubernetes.io/zone=rack-a").
			WithEvidence("Node cp-2 labels").
			WithNext("devata apply --machines cp-2"),
		drift.InSync("cp-2", "etcd", drift.RungResources, "3 members, all healthy"),
		func() drift.Result {
			r := drift.Unknown("worker-1", "config", drift.RungReconciliation, dialErr, next)
			r.FailClosed = true
			return r
		}(),
		drift.Unknown("worker-1", "talos-version", drift.RungReconciliation, versionErr, next),
		drift.InSync("worker-2", "config", drift.RungReconciliation, "MachineConfig v1alpha1 version 3"),
		drift.InSync("worker-2", "talos-version", drift.RungReconciliation, "Version tag v1.11.0"),
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
