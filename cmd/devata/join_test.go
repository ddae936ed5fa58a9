package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// etcdWatch samples the fleet's etcd clusters while a rollout goes and
// records every moment etcd was split, or had fewer voting members than
// min: what a join must never cause.
func etcdWatch(t *testing.T, f *sim.Fleet, min int) func() []string {
	t.Helper()
	var (
		mu     sync.Mutex
		broken []string
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ctx.Err() == nil; n++ {
			cs := f.EtcdClusters()
			mu.Lock()
			switch {
			case len(cs) != 1:
				broken = append(broken, fmt.Sprintf("sample %d: %d etcd clusters", n, len(cs)))
			case len(cs[0].Members) < min:
				broken = append(broken, fmt.Sprintf("sample %d: voting members %v, fewer than %d", n, cs[0].Members, min))
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(broken)
	}
}

// members is the one etcd cluster's voting members and learners, sorted.
func members(t *testing.T, f *sim.Fleet) (voting, learners []string) {
	t.Helper()
	cs := f.EtcdClusters()
	if len(cs) != 1 {
		t.Fatalf("%d etcd clusters: %+v", len(cs), cs)
	}
	voting, learners = slices.Clone(cs[0].Members), slices.Clone(cs[0].Learners)
	slices.Sort(voting)
	return voting, learners
}

// Machines added to the inventory (cp-3 and worker-2 answer in maintenance
// mode; etcd runs on cp-1 and cp-2): the dry run plans their joins and
// writes nothing; without a terminal or --yes apply refuses (a join
// reboots); with --yes cp-3 joins etcd, one cluster of two or more voting
// members throughout, and both Nodes register with their kubelet; drift is
// clean and a second run has nothing to do.
func TestApplyJoinsMachinesAddedToTheInventory(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, Maintenance: []string{"cp-3", "worker-2"}})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	r := devata(t, nil, "apply", "--dry-run", "--config", sf.settings, kubeconfig)
	show(t, r)
	lacks(t, "dry run", r.stdout,
		"cp-3, worker-2 (2 machines) join (REBOOTS): in maintenance mode: not configured; its config goes over the maintenance connection (insecure, mode auto)",
	)
	if r.code != 1 {
		t.Fatalf("dry run: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "apply", "--config", sf.settings, kubeconfig); r.code != 2 || !strings.Contains(r.err, "these changes reboot cp-3, worker-2") {
		t.Fatalf("without --yes: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Fatalf("%d configs applied before the join was confirmed", applies)
	}

	broken := etcdWatch(t, sf.Sim, 2)
	r = devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 || !strings.Contains(r.stdout, "cp-3: joined: runs its desired config on Talos v1.11.0, its Node reports kubelet v1.34.1") ||
		!strings.Contains(r.stdout, "gate after cp-3: etcd healthy, 3/3 members") {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, b := range broken() {
		t.Error(b)
	}
	if voting, learners := members(t, sf.Sim); !slices.Equal(voting, []string{"cp-1", "cp-2", "cp-3"}) || len(learners) != 0 {
		t.Errorf("etcd members %v, learners %v; want cp-1, cp-2, cp-3", voting, learners)
	}
	kubelets := k.nodeKubelets(t)
	for _, n := range []string{"cp-3", "worker-2"} {
		if kubelets[n] != "v1.34.1" {
			t.Errorf("Node %s: kubelet %q, want v1.34.1", n, kubelets[n])
		}
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, loopChecks); r.code != 0 {
		t.Errorf("drift after the joins: exit %d\n%s", r.code, r.stdout)
	}
	if r := devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig); r.code != 0 || !strings.Contains(r.stdout, "nothing to apply") {
		t.Errorf("second run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// A control plane whose system disk was lost is in maintenance mode and
// still an etcd member in the others' eyes. apply joins it again: the gate
// before lets etcd lose that old member (the two others are healthy), and
// Talos replaces it as the machine joins; the cluster ends with three
// members, cp-2 under a new ID.
func TestApplyRejoinsAControlPlaneWhoseDiskWasLost(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	cp2 := sf.Sim.Machine("cp-2")
	cp2.Wipe()
	for deadline := time.Now().Add(20 * time.Second); cp2.Configured() || cp2.Observe().Down; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("cp-2 not in maintenance mode after its wipe")
		}
	}
	// the others still list cp-2: a normal gate counts it down
	if r := devata(t, nil, "drift", "--config", sf.settings, "--checks=etcd"); r.code == 0 {
		t.Fatalf("drift with cp-2 wiped: exit 0\n%s", r.stdout)
	}

	broken := etcdWatch(t, sf.Sim, 2)
	r := devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, "--kubeconfig="+k.env.Kubeconfig)
	show(t, r)
	if r.code != 0 || !strings.Contains(r.stdout, "gate before cp-2 joins: etcd healthy") || !strings.Contains(r.stdout, "cp-2: joined") {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, b := range broken() {
		t.Error(b)
	}
	if voting, learners := members(t, sf.Sim); !slices.Equal(voting, []string{"cp-1", "cp-2", "cp-3"}) || len(learners) != 0 {
		t.Errorf("etcd members %v, learners %v; want cp-1, cp-2, cp-3", voting, learners)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, loopChecks); r.code != 0 {
		t.Errorf("drift after the rejoin: exit %d\n%s", r.code, r.stdout)
	}
}

// Without a running etcd there is no cluster to join: apply skips every
// machine in maintenance mode, names devata bootstrap, and writes nothing;
// without a kubeconfig a join is not planned either (its Node could not
// be checked).
func TestApplyDoesNotJoinWithoutACluster(t *testing.T) {
	sf := startSim(t, simtest.Options{Maintenance: allMachines})
	k := startKube(t)
	r := devata(t, nil, "apply", "--yes", "--config", sf.settings, "--kubeconfig="+k.env.Kubeconfig)
	show(t, r)
	if r.code != 2 || strings.Count(r.stdout, "no control plane runs etcd: there is no cluster to join; devata bootstrap builds it") != 1 {
		t.Errorf("no cluster: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	sf2 := startSim(t, simtest.Options{Bootstrap: true, Maintenance: []string{"worker-2"}})
	r = devata(t, nil, "apply", "--yes", "--config", sf2.settings)
	show(t, r)
	if r.code != 2 || !strings.Contains(r.stdout, "a join is confirmed on the machine's Node, and devata has no kubeconfig") {
		t.Errorf("no kubeconfig: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, f := range []*sim.Fleet{sf.Sim, sf2.Sim} {
		if applies, _ := writes(f); applies != 0 {
			t.Errorf("%d configs applied", applies)
		}
	}
}

// reconcile leaves a machine in maintenance mode alone unless --join, and
// with it joins the machine in one pass; the next pass is clean.
func TestReconcileJoin(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, Maintenance: []string{"worker-2"}})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig
	r := devata(t, nil, "reconcile", "--once", "--config", sf.settings, kubeconfig, loopChecks)
	if r.code != 2 || !strings.Contains(r.stdout+r.err, "reconcile does with --join") {
		t.Errorf("without --join: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Fatalf("reconcile without --join applied %d configs", applies)
	}
	// the pass joins it; it came back on cluster.talosVersion, which fixes
	// the talos-version drift observed in maintenance mode: exit 0
	r = devata(t, nil, "reconcile", "--once", "--join", "--config", sf.settings, kubeconfig, loopChecks)
	show(t, r)
	if r.code != 0 || !regexp.MustCompile(`worker-2 +joined\n`).MatchString(r.stdout) {
		t.Fatalf("--join: exit %d, want 0 and worker-2 joined\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "reconcile", "--once", "--join", "--config", sf.settings, kubeconfig, loopChecks); r.code != 0 {
		t.Errorf("the next pass: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if got := k.nodeKubelets(t)["worker-2"]; got != "v1.34.1" {
		t.Errorf("Node worker-2: kubelet %q", got)
	}
}

// A machine whose STATE alone was wiped is still installed: Talos skips the
// install when its config comes in maintenance mode (the boot sequence's
// Install task) and it comes back on the version it had, here one that an
// upgrade outside the inventory put there. reconcile --join reports it
// joined-other-version and leaves that drift (exit 1) to devata upgrade.
func TestReconcileJoinKeepsTheInstalledVersion(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig
	w := sf.Inventory.Machine("worker-2")
	c, err := sf.Dialer.Client(t.Context(), w)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.UpgradeWithOptions(t.Context(), client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.11.2"), client.WithUpgradeRebootMode(machine.UpgradeRequest_DEFAULT)); err != nil {
		t.Fatalf("upgrade worker-2: %v", err)
	}
	waitFor(t, "worker-2 running on v1.11.2", func() bool {
		o := talosapi.Observe(t.Context(), sf.Dialer, w)
		return o.Err == nil && o.Version == "v1.11.2" && o.Stage == "running" && (o.Ready || o.NotReadyOnlyForNode())
	})
	// the upgrade's connection died with its reboot: a new one
	c2, err := sf.Dialer.Client(t.Context(), w)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.ResetGeneric(t.Context(), &machine.ResetRequest{Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "STATE", Wipe: true}}}); err != nil {
		t.Fatalf("reset worker-2's STATE: %v", err)
	}
	sw := sf.Sim.Machine("worker-2")
	waitFor(t, "worker-2 up in maintenance mode", func() bool {
		return !sw.Configured() && !sw.Observe().Down
	})
	r := devata(t, nil, "reconcile", "--once", "--join", "--config", sf.settings, kubeconfig, loopChecks)
	if r.code != 1 || !regexp.MustCompile(`worker-2 +joined-other-version\n`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout+r.err, "it runs Talos v1.11.2, the inventory says v1.11.0, and devata upgrade would refuse it: a downgrade from v1.11.2 to v1.11.0") {
		t.Fatalf("--join: exit %d, want 1 and worker-2 joined-other-version\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "--checks=config,talos-version"); r.code != 1 || !strings.Contains(r.stdout, "talos-version (reconciliation): Drifted") || !strings.Contains(r.stdout, "actual:   v1.11.2") {
		t.Errorf("drift after the join: exit %d, want 1 with worker-2's talos-version Drifted\n%s", r.code, r.stdout)
	}
}

// waitFor polls cond until it holds, failing the test after 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}
