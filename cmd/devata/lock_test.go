package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/lock"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
)

// Probe 1 of issue 15: two writers rebooted two control planes at once.
// Every writing command takes the cluster's lock before it plans: while
// another writer holds it, apply, reconcile --once and bootstrap are
// refused at once (exit 2, naming the holder) and send nothing; with
// --wait-lock they run once it is released. Read-only runs (dry runs,
// drift) take no lock.
func TestWritersExcludeEachOther(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("worker-1").SetFaults(sim.Faults{DriftedConfig: []byte(strings.Replace(string(sf.Desired["worker-1"]), "time.cloudflare.com", "pool.ntp.org", 1))})
	path, err := lock.Path(sf.Inventory.Path, sf.Inventory.Cluster.Name)
	if err != nil {
		t.Fatal(err)
	}
	held, err := lock.Acquire(t.Context(), path, lock.Holder{Host: "ops-laptop", PID: 4242, Command: "devata apply --machines cp-2", Since: time.Now()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	applies := func() int { return sf.Sim.Machine("worker-1").Calls("ApplyConfiguration") }
	before := applies()

	for _, args := range [][]string{
		{"apply", "--yes"},
		{"reconcile", "--once"},
		{"bootstrap", "--skip-nodes", "--yes"},
	} {
		r := devata(t, nil, append(args, "--config", sf.settings)...)
		if r.code != 2 || !strings.Contains(r.err, "another writer holds the cluster's lock") || !strings.Contains(r.err, `"devata apply --machines cp-2" (pid 4242 on ops-laptop`) {
			t.Errorf("%v while the lock is held: exit %d\n%s", args, r.code, r.err)
		}
	}
	if n := applies() - before; n != 0 {
		t.Fatalf("%d ApplyConfiguration calls reached worker-1 while another writer held the lock", n)
	}
	// read-only runs are not writers
	if r := devata(t, nil, "apply", "--dry-run", "--config", sf.settings); r.code != 1 {
		t.Errorf("apply --dry-run while the lock is held: exit %d, want 1 (a change is pending)\n%s", r.code, r.err)
	}

	go func() {
		time.Sleep(500 * time.Millisecond)
		if err := held.Release(); err != nil {
			t.Error(err)
		}
	}()
	r := devata(t, nil, "apply", "--yes", "--wait-lock", "30s", "--config", sf.settings)
	if r.code != 0 {
		t.Fatalf("apply --wait-lock after the holder let go: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if applies() == before {
		t.Error("apply --wait-lock ran but changed nothing")
	}
}

// Probe 1 of issue 31: `ln -s secrets.yaml .devata-homelab.lock;
// devata apply --yes` left the bundle at 0 bytes. The writer is refused,
// saying what is there, sends nothing, and the bundle is intact.
func TestASymlinkedLockLeavesTheBundleIntact(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("worker-1").SetFaults(sim.Faults{DriftedConfig: []byte(strings.Replace(string(sf.Desired["worker-1"]), "time.cloudflare.com", "pool.ntp.org", 1))})
	path, err := lock.Path(sf.Inventory.Path, sf.Inventory.Cluster.Name)
	if err != nil {
		t.Fatal(err)
	}
	bundle := sf.Inventory.SecretsPath()
	before, err := os.ReadFile(bundle)
	if err != nil || len(before) == 0 {
		t.Fatalf("the bundle: %d bytes, %v", len(before), err)
	}
	if err := os.Symlink(filepath.Base(bundle), path); err != nil {
		t.Fatal(err)
	}
	applies := sf.Sim.Machine("worker-1").Calls("ApplyConfiguration")
	r := devata(t, nil, "apply", "--yes", "--config", sf.settings)
	if r.code != 2 || !strings.Contains(r.err, "is a symbolic link") || !strings.Contains(r.err, "move that away") {
		t.Errorf("apply with the lock a symlink to the bundle: exit %d\n%s", r.code, r.err)
	}
	if after, err := os.ReadFile(bundle); err != nil || string(after) != string(before) {
		t.Fatalf("the bundle changed: %d bytes before, %d after (%v)", len(before), len(after), err)
	}
	if n := sf.Sim.Machine("worker-1").Calls("ApplyConfiguration") - applies; n != 0 {
		t.Errorf("%d ApplyConfiguration calls reached worker-1 without the lock", n)
	}
}

// Across hosts, writers exclude each other through the cluster's writer
// Lease, the one reconcile --leader-elect campaigns for: while a reconcile
// Deployment's pod leads, a human's apply and a reconcile --once from cron
// are refused naming the pod; the reconcile stands by while an apply holds
// it; --no-lease takes only this host's lock and says so; with the
// namespace absent, the host's lock alone guards and a warning says how to
// fix it.
func TestWritersOnOtherHostsExcludeEachOtherThroughTheLease(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: sf.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	drifts := 0
	drift := func() { // a new drift each time: the sim drifts again only on a changed config
		drifts++
		sf.Sim.Machine("worker-1").SetFaults(sim.Faults{DriftedConfig: []byte(strings.Replace(string(sf.Desired["worker-1"]), "time.cloudflare.com", fmt.Sprintf("%d.pool.ntp.org", drifts), 1))})
	}
	drift()
	applies := func() int { return sf.Sim.Machine("worker-1").Calls("ApplyConfiguration") }
	kubeArgs := []string{"--config", sf.settings, "--kubeconfig", env.Kubeconfig}

	// no namespace yet: warned, and the host's lock alone guards the write
	r := devata(t, nil, append([]string{"apply", "--yes"}, kubeArgs...)...)
	if r.code != 0 || !strings.Contains(r.err, "namespace devata does not exist") || strings.Count(r.err, "advice: kubectl create namespace devata, so that") != 1 || strings.Contains(r.err, "warning") {
		t.Fatalf("apply without the namespace: exit %d\n%s", r.code, r.err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "devata"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// a reconcile Deployment's pod leads
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	stopped := make(chan struct{})
	e := &reconcile.LeaderElection{Client: kc, Namespace: "devata", Name: "devata-reconcile", Identity: "devata-reconcile-7f9c-x2x4k",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond, Release: true}
	go func() {
		defer close(stopped)
		_ = e.Run(ctx, func(ctx context.Context) error { close(leading); <-ctx.Done(); return nil })
	}()
	<-leading
	drift()
	before := applies()
	for _, args := range [][]string{{"apply", "--yes"}, {"reconcile", "--once"}} {
		r := devata(t, nil, append(args, kubeArgs...)...)
		if r.code != 2 || !strings.Contains(r.err, "another writer holds the cluster's Lease devata/devata-reconcile") || !strings.Contains(r.err, `"devata-reconcile-7f9c-x2x4k"`) {
			t.Errorf("%v while a reconcile pod leads: exit %d\n%s", args, r.code, r.err)
		}
	}
	if n := applies() - before; n != 0 {
		t.Fatalf("%d ApplyConfiguration calls reached worker-1 while a reconcile pod held the Lease", n)
	}
	// --no-lease is the way through when the API is down; here it says what it skips
	r = devata(t, nil, append([]string{"apply", "--dry-run", "--no-lease"}, kubeArgs...)...)
	if r.code != 1 {
		t.Errorf("apply --dry-run while the Lease is held: exit %d, want 1 (a change is pending; dry runs take no lock)\n%s", r.code, r.err)
	}

	// the pod stops (rolling update): apply --wait-lock runs once it lets go
	go func() { time.Sleep(time.Second); cancel() }()
	r = devata(t, nil, append([]string{"apply", "--yes", "--wait-lock", "30s"}, kubeArgs...)...)
	<-stopped
	if r.code != 0 || applies() == before {
		t.Fatalf("apply --wait-lock after the pod let go: exit %d, %d applies\n%s%s", r.code, applies()-before, r.stdout, r.err)
	}
	l, err := kc.CoordinationV1().Leases("devata").Get(t.Context(), "devata-reconcile", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != "" || *l.Spec.LeaseDurationSeconds != 1 {
		t.Errorf("after apply the Lease is %+v, want released (no holder) so a standby takes over at once", l.Spec)
	}

	// an unreachable API refuses the write and names --no-lease
	dead := filepath.Join(t.TempDir(), "kubeconfig")
	cfg, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(env.Config.Host)
	if err := os.WriteFile(dead, []byte(strings.ReplaceAll(string(cfg), u.Host, "127.0.0.1:1")), 0o600); err != nil {
		t.Fatal(err)
	}
	drift()
	before = applies()
	r = devata(t, nil, "apply", "--yes", "--config", sf.settings, "--kubeconfig", dead)
	if r.code != 2 || !strings.Contains(r.err, "--no-lease") || applies() != before {
		t.Errorf("apply with an unreachable API: exit %d, %d applies\n%s", r.code, applies()-before, r.err)
	}
	r = devata(t, nil, "apply", "--yes", "--no-lease", "--config", sf.settings, "--kubeconfig", dead)
	if r.code != 0 || !strings.Contains(r.err, "--no-lease: only this host's lock guards this write") {
		t.Errorf("apply --no-lease with an unreachable API: exit %d\n%s", r.code, r.err)
	}
}
