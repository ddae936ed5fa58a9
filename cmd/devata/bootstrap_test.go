package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

var allMachines = []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}

// kube is a real kube-apiserver whose Nodes the simulated kubelets register.
type kube struct {
	env *testenv.Env
	kc  kubernetes.Interface
}

// startKube starts it on the examples' service range (their inventories
// keep the default), as a Talos control plane runs its kube-apiserver on
// the config's (v1.14.1 controllers/k8s control_plane_final.go), so that
// the kube-dns Service Talos pins to the tenth address fits; a fleet of
// another range needs an API server of its own (startKubeWith).
func startKube(t *testing.T) *kube {
	t.Helper()
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: []string{inventory.DefaultServiceSubnet}})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &kube{env: env, kc: kc}
}

// playKubelets runs the fleet's kubelets against k until the test ends, and
// removes every Node first so that fleets sharing one API server do not see
// each other's.
func (k *kube) playKubelets(t *testing.T, f *sim.Fleet) {
	t.Helper()
	if err := k.kc.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.RunKubelets(ctx, k.kc, 100*time.Millisecond) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// devataCtx runs the CLI in-process with ctx and stdout given.
func devataCtx(t *testing.T, ctx context.Context, out *simtest.Output, args ...string) result {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	var errb bytes.Buffer
	code := run(ctx, args, Streams{In: strings.NewReader(""), Out: out, Err: &errb}, func(string) string { return "" })
	return result{code, out.String(), errb.String()}
}

// show logs a run's output when DEVATA_TEST_SHOW is set, to read what people see.
func show(t *testing.T, r result) {
	t.Helper()
	if os.Getenv("DEVATA_TEST_SHOW") != "" {
		t.Logf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// writes counts what changed machines: applies that were not dry runs, and bootstraps.
func writes(f *sim.Fleet) (applies, bootstraps int) {
	for _, m := range f.Machines() {
		applies += m.Calls("ApplyConfiguration") - m.Calls("ApplyConfiguration(dry-run)")
		bootstraps += m.Calls("Bootstrap")
	}
	return applies, bootstraps
}

func bootstrapArgs(sf *simFleet, k *kube, extra ...string) []string {
	args := []string{"bootstrap", "--config", sf.settings, "--wait", "30s", "--timeout", "5s", "--etcd-settle", "300ms"}
	if k != nil {
		args = append(args, "--kubeconfig", k.env.Kubeconfig)
	} else {
		args = append(args, "--skip-nodes")
	}
	return append(args, extra...)
}

// assertBuilt checks the end state a bootstrap must leave: etcd healthy with
// the three control planes, the kubeconfig 0600, every Node Ready, drift clean.
func assertBuilt(t *testing.T, sf *simFleet, k *kube) {
	t.Helper()
	ctx := context.Background()
	if err := gate.EtcdHealthy(ctx, sf.Inventory, sf.Dialer, 5*time.Second); err != nil {
		t.Errorf("etcd: %v", err)
	}
	st, err := os.Stat(filepath.Join(sf.Dir, "kubeconfig"))
	if err != nil {
		t.Errorf("kubeconfig: %v", err)
	} else if st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", st.Mode().Perm())
	}
	// Bootstrap leaves the CNI to the operator (cni: none): every Node is
	// registered and NotReady for want of one. The operator then installs
	// Cilium; the Nodes become Ready, and the kubelet and cilium checks are
	// clean too.
	args := []string{"drift", "--config", sf.settings}
	if k != nil {
		nodes := talosapi.ObserveNodes(ctx, k.kc)
		for _, name := range allMachines {
			if n, ok := nodes.ByName[name]; !ok || (!n.Ready && !talosapi.NetworkNotReady(n.ReadyReason)) {
				t.Errorf("Node %s: registered %t, ready %t %s (%v)", name, ok, n.Ready, n.ReadyReason, nodes.Err)
			}
		}
		if err := sim.InstallCilium(ctx, k.env.Config); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			nodes := talosapi.ObserveNodes(ctx, k.kc)
			ready := 0
			for _, name := range allMachines {
				if n := nodes.ByName[name]; n.Ready {
					ready++
				}
			}
			if ready == len(allMachines) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d Nodes Ready 15s after Cilium was installed", ready, len(allMachines))
			}
		}
		args = append(args, "--kubeconfig", k.env.Kubeconfig, "--checks=config,talos-version,machine-stage,kubelet,etcd,storage-declaration,storage-volumes,storage-mounts,storage-raw-disks,cilium-declaration,cilium-agent,cilium-services")
	} else {
		args = append(args, "--checks=config,talos-version,machine-stage,etcd")
	}
	if r := devata(t, nil, args...); r.code != 0 {
		t.Errorf("drift after bootstrap: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

func TestBootstrapFromMaintenance(t *testing.T) {
	k := startKube(t)
	sf := startSim(t, simtest.Options{Maintenance: allMachines})
	k.playKubelets(t, sf.Sim)

	start := time.Now()
	r := devata(t, nil, bootstrapArgs(sf, k)...)
	t.Logf("first bootstrap: %s", time.Since(start).Round(time.Millisecond))
	show(t, r)
	if r.code != 0 {
		t.Fatalf("bootstrap: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{
		"==> validate inventory", "==> secrets bundle", "==> render configs", "==> observe machines",
		"==> configure machines", "==> bootstrap etcd", "==> wait for etcd", "==> kubeconfig", "==> wait for Nodes", "==> drift report",
		"cp-2: config applied over the maintenance connection (mode auto)",
		"bootstrapped etcd on cp-1",
		"etcd healthy, members [cp-1 cp-2 cp-3]",
		"5 Nodes registered; 5 NotReady until a CNI runs (cluster.network.cni: none): install Cilium next",
		"5 in sync, 0 drifted, 0 unknown",
		"bootstrap complete",
		"next: cluster.network.cni is none, so the Nodes become Ready once a CNI runs: install Cilium",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", r.stdout)
	}
	applies, bootstraps := writes(sf.Sim)
	if applies != 5 || bootstraps != 1 {
		t.Errorf("first bootstrap: %d applies, %d bootstraps; want 5 and 1", applies, bootstraps)
	}
	assertBuilt(t, sf, k)
	kubeconfig, _ := os.ReadFile(filepath.Join(sf.Dir, "kubeconfig"))

	// A second run changes nothing on any machine and keeps the kubeconfig.
	start = time.Now()
	r = devata(t, nil, bootstrapArgs(sf, k)...)
	t.Logf("second bootstrap: %s", time.Since(start).Round(time.Millisecond))
	if r.code != 0 {
		t.Fatalf("second bootstrap: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	a2, b2 := writes(sf.Sim)
	if a2 != applies || b2 != bootstraps {
		t.Errorf("second bootstrap wrote: %d applies, %d bootstraps", a2-applies, b2-bootstraps)
	}
	for _, want := range []string{"nothing to configure", "nothing to bootstrap", "exists for this cluster", "kept"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("second run output lacks %q:\n%s", want, r.stdout)
		}
	}
	if again, _ := os.ReadFile(filepath.Join(sf.Dir, "kubeconfig")); !bytes.Equal(again, kubeconfig) {
		t.Error("the second run rewrote the kubeconfig")
	}

	// The plan agrees: nothing to do.
	r = devata(t, nil, "plan", "--config", sf.settings, "--kubeconfig", k.env.Kubeconfig)
	if r.code != 0 || !strings.Contains(r.stdout, "0 pending, 0 blocked") {
		t.Errorf("plan after bootstrap: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	// With Cilium installed (as in a cluster rebuilt from a snapshot), a
	// Node NotReady for want of its agent is waited for, not sent to
	// install a CNI: the plan says what it waits for, bootstrap waits until
	// the agent runs and closes with every Node Ready. (The demo's rebuild
	// once printed "install Cilium" at a high load: the agents had not
	// started yet.)
	holdAgent := func() {
		t.Helper()
		sf.Sim.Machine("worker-1").SetFaults(sim.Faults{CiliumAgentStarting: true})
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if n := talosapi.ObserveNodes(t.Context(), k.kc).ByName["worker-1"]; !n.Ready && talosapi.NetworkNotReady(n.ReadyReason) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("Node worker-1 still Ready 15s after its Cilium agent was held starting")
			}
		}
	}
	holdAgent()
	r = devata(t, nil, "plan", "--config", sf.settings, "--kubeconfig", k.env.Kubeconfig)
	lacks(t, "plan while worker-1 waits for its Cilium agent", r.stdout,
		"1 NotReady until Cilium's agent (DaemonSet kube-system/cilium) runs on them", "1 pending")
	waits := "worker-1 not Ready until Cilium's agent (DaemonSet kube-system/cilium) runs there"
	out := &simtest.Output{On: waits, Then: func() { sf.Sim.Machine("worker-1").SetFaults(sim.Faults{}) }}
	r = devataCtx(t, t.Context(), out, bootstrapArgs(sf, k)...)
	if r.code != 0 || !out.Fired() {
		t.Fatalf("bootstrap while worker-1 waits for its Cilium agent: exit %d, waited %t\n%s%s", r.code, out.Fired(), r.stdout, r.err)
	}
	lacks(t, "bootstrap while worker-1 waits for its Cilium agent", r.stdout, "5 Nodes registered and Ready", "next: every Node is Ready")
	if strings.Contains(r.stdout, "install Cilium") {
		t.Errorf("bootstrap with Cilium installed advises installing it:\n%s", r.stdout)
	}

	// An agent that never starts fails the wait, and the error says where to look.
	holdAgent()
	defer sf.Sim.Machine("worker-1").SetFaults(sim.Faults{})
	r = devata(t, nil, bootstrapArgs(sf, k, "--wait", "1s")...)
	if r.code != exitTrouble {
		t.Errorf("bootstrap while worker-1's Cilium agent never starts: exit %d, want %d\n%s%s", r.code, exitTrouble, r.stdout, r.err)
	}
	lacks(t, "bootstrap while worker-1's Cilium agent never starts", r.err, waits, "rollout status daemonset/cilium")
}

// Interrupted at each step in turn, a rerun ends in the same healthy state
// with exactly one Bootstrap call.
func TestBootstrapResumes(t *testing.T) {
	k := startKube(t)
	type interrupt struct {
		name  string
		setup func(sf *simFleet)
		on    string
		// act runs when the output shows on; cancel ends the run.
		act func(sf *simFleet, cancel context.CancelFunc)
		// firstOK: the first run survives the interruption by itself.
		firstOK bool
	}
	cases := []interrupt{
		{name: "crash after the apply to cp-2", on: "cp-2: config applied over the maintenance connection",
			act: func(sf *simFleet, cancel context.CancelFunc) { sf.Sim.Machine("cp-2").Crash(); cancel() }},
		{name: "reboot in the middle of an apply, then during the etcd wait",
			setup: func(sf *simFleet) { sf.Sim.Machine("cp-3").SetFaults(sim.Faults{RebootDuringApply: true}) },
			on:    "==> wait for etcd", act: func(sf *simFleet, _ context.CancelFunc) { sf.Sim.Machine("cp-1").Crash() }, firstOK: true},
		{name: "interrupt during the Bootstrap call",
			// The Bootstrap call waits out cp-1's latency when the interrupt comes;
			// the rerun goes without latency.
			setup: func(sf *simFleet) { sf.Sim.Machine("cp-1").SetFaults(sim.Faults{Latency: time.Second}) },
			on:    "bootstrapping cp-1", act: func(sf *simFleet, cancel context.CancelFunc) {
				time.AfterFunc(100*time.Millisecond, func() { cancel(); sf.Sim.Machine("cp-1").SetFaults(sim.Faults{}) })
			}},
	}
	for _, step := range []string{"validate inventory", "observe machines", "configure machines", "bootstrap etcd", "wait for etcd", "kubeconfig", "wait for Nodes"} {
		cases = append(cases, interrupt{name: "interrupt at " + step, on: "==> " + step,
			act: func(_ *simFleet, cancel context.CancelFunc) { cancel() }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sf := startSim(t, simtest.Options{Maintenance: allMachines})
			k.playKubelets(t, sf.Sim)
			if tc.setup != nil {
				tc.setup(sf)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &simtest.Output{On: tc.on, Then: func() { tc.act(sf, cancel) }}
			r := devataCtx(t, ctx, out, bootstrapArgs(sf, k)...)
			show(t, r)
			if !out.Fired() {
				t.Fatalf("the interruption never fired (no %q in the output):\n%s%s", tc.on, r.stdout, r.err)
			}
			switch {
			case tc.firstOK && r.code != 0:
				t.Fatalf("first run: exit %d, want 0\n%s%s", r.code, r.stdout, r.err)
			case !tc.firstOK && r.code != 2:
				t.Fatalf("interrupted run: exit %d, want 2\n%s%s", r.code, r.stdout, r.err)
			}
			r = devata(t, nil, bootstrapArgs(sf, k)...)
			if r.code != 0 {
				t.Fatalf("rerun: exit %d\n%s%s", r.code, r.stdout, r.err)
			}
			if _, bootstraps := writes(sf.Sim); bootstraps != 1 {
				t.Errorf("%d Bootstrap calls, want exactly 1", bootstraps)
			}
			assertBuilt(t, sf, k)
		})
	}
}

func TestBootstrapRefusesEtcdDataItDidNotMake(t *testing.T) {
	sf := startSim(t, simtest.Options{Maintenance: []string{"cp-1", "cp-3", "worker-1", "worker-2"}})
	ctx := context.Background()
	c, err := sf.Dialer.Client(ctx, sf.Inventory.Machine("cp-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	r := devata(t, nil, bootstrapArgs(sf, nil)...)
	show(t, r)
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{"refused", "cp-2 already has etcd data", "members [cp-2]", "cp-1, cp-3 are still in maintenance mode"} {
		if !strings.Contains(r.err, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.err)
		}
	}
	if applies, bootstraps := writes(sf.Sim); applies != 0 || bootstraps != 1 {
		t.Errorf("%d applies and %d bootstraps; want none but the test's own bootstrap", applies, bootstraps)
	}
	r = devata(t, nil, "plan", "--config", sf.settings, "--skip-nodes")
	show(t, r)
	if r.code != 2 || !strings.Contains(r.stdout, "blocked  bootstrap-etcd cp-1") {
		t.Errorf("plan: exit %d, want 2 with bootstrap blocked\n%s%s", r.code, r.stdout, r.err)
	}
}

func TestBootstrapAsksBeforeRebootingARunningControlPlane(t *testing.T) {
	sf := startSim(t, simtest.Options{Maintenance: []string{"cp-1", "cp-3", "worker-1", "worker-2"}})
	sf.Drift(t, "cp-2", "diskQuotaSupport: true", "diskQuotaSupport: false")
	r := devata(t, nil, bootstrapArgs(sf, nil)...)
	if r.code != 2 || !strings.Contains(r.err, "cp-2 (running control plane)") || !strings.Contains(r.err, "--yes") {
		t.Fatalf("exit %d, want 2 naming cp-2 and --yes\n%s%s", r.code, r.stdout, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Errorf("%d applies before confirmation, want 0", applies)
	}
	r = devata(t, nil, bootstrapArgs(sf, nil, "--yes")...)
	if r.code != 0 {
		t.Fatalf("--yes: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	assertBuilt(t, sf, nil)
}

// bootstrap's closing advice for cni none follows the Nodes and the
// agent DaemonSet: install Cilium only when none is installed.
func TestCNINextFollowsTheNodes(t *testing.T) {
	for _, tc := range []struct {
		ready, known bool
		agent        string
		want, not    string
	}{
		{true, true, "", "every Node is Ready", "install Cilium"},
		{false, true, "", "install Cilium", "is installed"},
		{false, true, "kube-system/cilium", "Cilium is installed (DaemonSet kube-system/cilium) but not every Node is Ready yet", "install Cilium"},
		{false, false, "", "were not looked at (--skip-nodes)", "every Node is Ready"},
	} {
		got := cniNext(tc.ready, tc.known, tc.agent)
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.not) {
			t.Errorf("cniNext(%t, %t, %q) = %q, want %q and not %q", tc.ready, tc.known, tc.agent, got, tc.want, tc.not)
		}
	}
}
