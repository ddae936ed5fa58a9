package drift_test

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"

	"devata.dev/devata/drift"
	"devata.dev/devata/provenance"
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

const fixtureDiff = `--- applied
+++ desired
@@ -3,8 +3,8 @@
 machine:
   kubelet:
-    image: ghcr.io/siderolabs/kubelet:v1.34.0
+    image: ghcr.io/siderolabs/kubelet:v1.34.1
   token: ******
   network:
-    hostname: cp-2-old
+    hostname: cp-2
`

// fixtureResults are in no particular order on purpose: the report sorts.
func fixtureResults() []drift.Result {
	dialErr := fmt.Errorf("dial 10.20.0.21:50000: connection error: desc = \"transport: Error while dialing: dial tcp 10.20.0.21:50000: connect: %w\"", syscall.ECONNREFUSED)
	var versionErr *multierror.Error
	versionErr = multierror.Append(versionErr,
		fmt.Errorf("10.20.0.21: %w", errors.New("rpc error: code = Unavailable desc = connection refused")),
		fmt.Errorf("10.20.0.21: %w", errors.New("context deadline exceeded")))
	next := "check that worker-1 is up and its Talos API reachable: talosctl -n 10.20.0.21 version"
	return []drift.Result{
		drift.InSync("VolumeStatus u-longhorn phase ready, xfs, 120 GiB", "MountStatus /var/mnt/longhorn").Of("worker-2", "storage-mounts", drift.RungInfrastructure),
		drift.InSync("Version tag v1.11.0").Of("cp-1", "talos-version", drift.RungReconciliation),
		drift.InSync("MachineConfig v1alpha1 sha256:5d2c41a08e7f").Of("cp-1", "config", drift.RungReconciliation),
		drift.InSync("cluster.proxy.disabled true", "cluster.network.cni none").Of("cp-1", "cilium-declaration", drift.RungDeclaration),
		drift.InSync("Service kubelet running, healthy", "Node cp-1 Ready=true kubelet v1.34.1").Of("cp-1", "kubelet", drift.RungResources),
		drift.InSync("3 members, all healthy").Of("cp-1", "etcd", drift.RungResources),
		drift.Drifted("applied config differs from the rendered one: +2 -2 lines", "sha256:9a41f07c3b2e", "sha256:3e8d0b6a1f94").Of("cp-2", "config", drift.RungReconciliation).
			WithDiff(fixtureDiff).
			WithChanges(`machine.kubelet.image: "ghcr.io/siderolabs/kubelet:v1.34.0" → "ghcr.io/siderolabs/kubelet:v1.34.1"`, `machine.network.hostname: "cp-2-old" → "cp-2"`).
			WithEvidence("MachineConfig v1alpha1 sha256:3e8d0b6a1f94").
			WithNext("devata apply --machines cp-2"),
		drift.InSync("Version tag v1.11.0").Of("cp-2", "talos-version", drift.RungReconciliation),
		drift.Drifted("Node lacks labels topology.kubernetes.io/zone=rack-b", "kubelet healthy, Node Ready, v1.34.1", "Node lacks labels topology.kubernetes.io/zone=rack-b").Of("cp-2", "kubelet", drift.RungResources).
			WithEvidence("Service kubelet running, healthy", "Node cp-2 Ready=true kubelet v1.34.1").
			WithNext("talosctl -n 10.20.0.12 service kubelet; talosctl -n 10.20.0.12 logs kubelet; kubectl describe node cp-2"),
		drift.InSync("3 members, all healthy").Of("cp-2", "etcd", drift.RungResources),
		func() drift.Result {
			r := drift.Unknown(dialErr, next).Of("worker-1", "config", drift.RungReconciliation)
			r.FailClosed = true
			return r
		}(),
		drift.Unknown(versionErr, next).Of("worker-1", "talos-version", drift.RungReconciliation),
		drift.InSync("MachineConfig v1alpha1 sha256:c07a9e11d4b8").Of("worker-2", "config", drift.RungReconciliation),
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

// fixtureProvenance is a dirty work tree's: made-up hashes of the right length.
var fixtureProvenance = provenance.Info{
	Commit:          "e5c8b180c0252e033abd844ee9afe61bbb1913d7",
	Dirty:           true,
	RepoPath:        "examples/homelab/inventory.yaml",
	InventorySHA256: "5605c38488054349b5c80d09121d925ab35dcba4ae73707de4407c9ecb4d1d81",
}

// provenanceReport is the finished fixture report with pv as its provenance.
func provenanceReport(simulated bool, pv provenance.Info) *drift.Report {
	h := fixtureHeader(simulated)
	h.Provenance = pv
	r := drift.NewReport(h)
	r.Add(fixtureResults()...)
	r.Finish()
	return r
}
