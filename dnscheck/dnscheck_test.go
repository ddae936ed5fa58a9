package dnscheck_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks"
	"devata.dev/devata/dnscheck"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

func pass(t *testing.T, f *simtest.Fleet, kube kubernetes.Interface) []drift.Result {
	t.Helper()
	fc := &checks.FleetCheck{Inventory: f.Inventory, Desired: f.Desired, Dialer: f.Dialer, Kube: kube, Checks: []string{dnscheck.CheckCoreDNS},
		Families: dnscheck.Checks(dnscheck.Options{}), Concurrency: 4, Timeout: 10 * time.Second}
	rep, err := fc.Report(t.Context(), drift.Header{Cluster: "homelab"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(f.Inventory.ControlPlanes()) {
		t.Fatalf("%d results, want one per control plane: %+v", len(rep.Results), rep.Results)
	}
	return rep.Results
}

// Through the test bed's real kube-apiserver, with the sim playing what
// Talos' manifests and the kubelets make of CoreDNS: before a CNI runs no
// CoreDNS pod is Ready and kube-dns has no ready endpoint (Drifted); once
// Cilium's agents run, both are (InSync). Without a kubeconfig it is
// Unknown.
func TestCoreDNSReadyOnlyOnceTheCNIRuns(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true, LoopbackNet: "127.77.38"})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	for _, r := range pass(t, f, nil) {
		if r.Status != drift.StatusUnknown || !strings.Contains(r.Next, "--kubeconfig") {
			t.Errorf("%s without a kubeconfig: %s %q next %q, want Unknown", r.Machine, r.Status, r.Reason, r.Next)
		}
	}

	f.Sim.SyncKubelets(t.Context(), kube)
	f.Sim.SyncKubelets(t.Context(), kube) // Nodes first, then the pods on them
	for _, r := range pass(t, f, kube) {
		if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, "no CoreDNS pod is Ready") || !strings.Contains(r.Reason, "kube-dns has no ready endpoint") {
			t.Errorf("%s with no CNI: %s %q, want Drifted: no pod Ready, no ready endpoint", r.Machine, r.Status, r.Reason)
		}
	}

	if err := sim.InstallCilium(t.Context(), env.Config); err != nil {
		t.Fatal(err)
	}
	var rs []drift.Result
	for range 20 { // the agents, then CoreDNS, come with the next kubelet rounds
		f.Sim.SyncKubelets(t.Context(), kube)
		if rs = pass(t, f, kube); rs[0].Status == drift.StatusInSync {
			break
		}
	}
	for _, r := range rs {
		if r.Status != drift.StatusInSync || !strings.Contains(strings.Join(r.Evidence, " "), "2 of 2 endpoints ready") {
			t.Errorf("%s with Cilium running: %s %q %v, want InSync with both endpoints ready", r.Machine, r.Status, r.Reason, r.Evidence)
		}
	}
}
