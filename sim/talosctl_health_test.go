//go:build talosctl

package sim_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// talosctl health is Talos' own acceptance test of a cluster
// (pkg/cluster/check/default.go DefaultClusterChecks): etcd healthy,
// consistent and one member per control plane, apid, memory and disks,
// diagnostics, kubelets, the boot sequence finished, then Kubernetes: every
// node reported with its InternalIP, the control plane static pods
// (StaticPodStatus over COSI), a kube-apiserver, controller-manager and
// scheduler pod Ready per control plane Node, every Node Ready, kube-proxy
// (skipped: the homelab disables it), CoreDNS Ready, every Node
// schedulable. The real talosctl v1.11.0 runs all of them against a
// simulated fleet devata bootstrap built from maintenance mode, after the
// demo's Cilium install step, each machine on an address of its own, with the
// kubeconfig it fetches through the Talos API (talosctl kubeconfig) against
// a real kube-apiserver that serves and trusts the bundle's Kubernetes CA.
// Before etcd is bootstrapped it must fail, and say on what. Without node
// flags it finds the nodes from the Member resources of cluster discovery.
func TestRealTalosctlHealth(t *testing.T) {
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	net := fmt.Sprintf("127.%d.%d", 100+os.Getpid()%100, os.Getpid()/100%250)
	f := simtest.Start(t, simtest.Options{LoopbackNet: net, Maintenance: []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}})
	var cps, workers []string
	for _, m := range f.Inventory.Machines {
		host := strings.TrimSuffix(f.Overrides[m.Name], ":50000")
		if m.IsControlPlane() {
			cps = append(cps, host)
		} else {
			workers = append(workers, host)
		}
	}

	env := testenv.StartWith(t, testenv.Options{ClusterCA: f.Bundle.Certs.K8s, ServingHosts: []string{"10.20.0.10"}, ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	go f.Sim.RunKubelets(t.Context(), kc, 200*time.Millisecond)

	dir := t.TempDir()
	tc := f.Talosconfig(t)
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints = []string{cps[0]}
	ctx.Nodes = []string{cps[0]}
	tcPath := filepath.Join(dir, "talosconfig")
	if err := tc.Save(tcPath); err != nil {
		t.Fatal(err)
	}
	health := func(wait time.Duration, discover bool) (string, error) {
		c, cancel := context.WithTimeout(t.Context(), wait+time.Minute)
		defer cancel()
		args := []string{"--talosconfig", tcPath, "health", "--server=false", "--k8s-endpoint", env.Config.Host, "--wait-timeout", wait.String()}
		if !discover {
			args = append(args, "--control-plane-nodes", strings.Join(cps, ","), "--worker-nodes", strings.Join(workers, ","))
		}
		out, err := exec.CommandContext(c, bin, args...).CombinedOutput()
		return string(out), err
	}

	// In maintenance mode, before devata bootstrap: no etcd runs, so the
	// first check cannot pass.
	out, err := health(15*time.Second, false)
	if err == nil || !strings.Contains(out, "waiting for etcd to be healthy") || strings.Contains(out, "waiting for etcd to be healthy: OK") {
		t.Errorf("health before bootstrap: %v, want a failure waiting for etcd\n%s", err, out)
	}

	// devata bootstrap from maintenance mode, then the demo's Cilium step
	var log strings.Builder
	seq := bootstrap.New(bootstrap.Options{
		InventoryPath: f.Inventory.Path, Talosconfig: f.Talosconfig(t), Overrides: f.Overrides, KubeconfigOut: filepath.Join(dir, "kubeconfig"),
		SkipNodes: true, Timeout: 5 * time.Second, Wait: 30 * time.Second, Poll: 50 * time.Millisecond, EtcdSettle: 200 * time.Millisecond, Out: &log,
	})
	if err := seq.Run(t.Context()); err != nil {
		t.Fatalf("devata bootstrap: %v\n%s", err, log.String())
	}
	if err := sim.InstallCilium(t.Context(), env.Config); err != nil {
		t.Fatal(err)
	}
	out, err = health(3*time.Minute, false)
	if err != nil {
		t.Fatalf("talosctl health: %v\n%s", err, out)
	}
	// Without node flags talosctl health finds the nodes through cluster
	// discovery (Member resources, health.go buildClusterInfo).
	if out, err := health(time.Minute, true); err != nil || !strings.Contains(out, "waiting for all k8s nodes to report schedulable: OK") {
		t.Errorf("talosctl health with discovered members: %v\n%s", err, out)
	}
	for _, check := range []string{
		"etcd to be healthy", "etcd members to be consistent across nodes", "etcd members to be control plane nodes",
		"apid to be ready", "all nodes memory sizes", "all nodes disk sizes", "no diagnostics", "kubelet to be healthy",
		"all nodes to finish boot sequence", "all k8s nodes to report", "all control plane static pods to be running",
		"all control plane components to be ready", "all k8s nodes to report ready", "coredns to report ready",
		"all k8s nodes to report schedulable",
	} {
		if !strings.Contains(out, "waiting for "+check+": OK") {
			t.Errorf("talosctl health did not pass %q:\n%s", check, out)
		}
	}
	t.Logf("talosctl health:\n%s", out)
	if !strings.Contains(out, "kube-proxy to report ready: SKIP") {
		t.Errorf("kube-proxy is disabled in the homelab: want its check skipped\n%s", out)
	}
}
