package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

var loopChecks = "--checks=config,talos-version,machine-stage,etcd"

func inSync(sf *simFleet, machine string) bool {
	o := talosapi.Observe(context.Background(), sf.Dialer, sf.Inventory.Machine(machine))
	d, err := talosapi.DiffConfigs(o.Active, sf.Desired[machine])
	return o.Err == nil && err == nil && d.Equal
}

func TestReconcileOnce(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")

	r := devata(t, nil, "reconcile", "--once", "--report-only", "--config", sf.settings, loopChecks)
	if r.code != 1 || !strings.Contains(r.stdout, "Drifted") || inSync(sf, "worker-1") {
		t.Fatalf("--report-only: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	r = devata(t, nil, "reconcile", "--once", "--dry-run", "--config", sf.settings, loopChecks, "--audit-log", audit)
	if r.code != 1 || !strings.Contains(r.stdout, "worker-1             dry-run") || inSync(sf, "worker-1") {
		t.Fatalf("--dry-run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	r = devata(t, nil, "reconcile", "--once", "--config", sf.settings, loopChecks, "--audit-log", audit)
	if r.code != 0 || !strings.Contains(r.stdout, "worker-1             converged") || !inSync(sf, "worker-1") {
		t.Fatalf("--once: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	data, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"result":"dry-run"`) || !strings.Contains(lines[1], `"result":"started"`) || !strings.Contains(lines[2], `"result":"converged"`) {
		t.Errorf("audit log:\n%s", data)
	}
	for _, s := range simtest.BundleSecrets(sf.Bundle) {
		if strings.Contains(string(data)+r.stdout+r.err, s) {
			t.Fatalf("output or audit log holds a secret of the bundle (%.8s…)", s)
		}
	}
	if r := devata(t, nil, "reconcile", "--once", "--config", sf.settings, loopChecks); r.code != 0 || strings.Contains(r.stdout, "converged") {
		t.Errorf("second --once: exit %d\n%s", r.code, r.stdout)
	}
}

func TestReconcileOnceInvalidInventory(t *testing.T) {
	sf := startSim(t, simtest.Options{})
	if err := os.WriteFile(sf.Inventory.Path, []byte("apiVersion: devata.dev/v1alpha1\nkind: Inventory\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := devata(t, nil, "reconcile", "--once", "--config", sf.settings, loopChecks)
	if r.code != 2 || !strings.Contains(r.stdout+r.err, "bogus") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

func TestReconcileFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"reconcile", "--shard", "3/3"},
		{"reconcile", "--report-only", "--dry-run"},
		{"reconcile", "--mode", "sideways"},
		{"reconcile", "--once", "--leader-elect"},
	} {
		if r := devata(t, nil, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want 64\n%s", args, r.code, r.err)
		}
	}
}

// lockedBuffer collects the loop's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// loopRun is devata reconcile running in the background as a process would.
type loopRun struct {
	t              *testing.T
	cancel         context.CancelFunc
	code           chan int
	stdout, stderr lockedBuffer
	addr           string
}

func startReconcile(t *testing.T, args ...string) *loopRun {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	lr := &loopRun{t: t, cancel: cancel, code: make(chan int, 1)}
	args = append([]string{"reconcile", "--metrics-addr", "127.0.0.1:0"}, args...)
	go func() {
		lr.code <- run(ctx, args, Streams{In: strings.NewReader(""), Out: &lr.stdout, Err: &lr.stderr}, func(string) string { return "" })
	}()
	t.Cleanup(func() { lr.stop() })
	addrRe := regexp.MustCompile(`info: serving metrics \(addr=([^\s)]+)`)
	lr.waitFor("the metrics server", func() bool {
		m := addrRe.FindStringSubmatch(lr.stderr.String())
		if m != nil {
			lr.addr = m[1]
		}
		return m != nil
	})
	return lr
}

func (lr *loopRun) waitFor(what string, cond func() bool) {
	lr.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			lr.t.Fatalf("timed out waiting for %s\n%s", what, lr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (lr *loopRun) get(path string) (int, string) {
	lr.t.Helper()
	resp, err := http.Get((&url.URL{Scheme: "http", Host: lr.addr, Path: path}).String())
	if err != nil {
		lr.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM and returns the exit code.
func (lr *loopRun) stop() int {
	lr.cancel()
	select {
	case c := <-lr.code:
		lr.code <- c
		return c
	case <-time.After(10 * time.Second):
		lr.t.Fatal("reconcile did not stop within its grace period")
		return -1
	}
}

func TestReconcileLoopServesMetricsAndStopsOnSignal(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	lr := startReconcile(t, "--config", sf.settings, loopChecks, "--interval", "200ms", "--grace", "5s")
	lr.waitFor("readiness", func() bool { c, _ := lr.get("/readyz"); return c == http.StatusOK })
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	lr.waitFor("worker-1 to converge", func() bool { return inSync(sf, "worker-1") })
	lr.waitFor("the action to be counted", func() bool {
		_, body := lr.get("/metrics")
		return strings.Contains(body, `devata_reconcile_actions_total{kind="apply",result="converged"} 1`)
	})
	if c, body := lr.get("/metrics"); c != http.StatusOK ||
		!strings.Contains(body, `devata_drift_status{check="config",cluster="homelab",machine="worker-1"`) || !strings.Contains(body, "devata_reconcile_leader 1") {
		t.Errorf("/metrics: %d\n%s", c, body)
	}
	if c := lr.stop(); c != 0 {
		t.Errorf("exit %d after SIGTERM, want 0\n%s", c, lr.stderr.String())
	}
	if !strings.Contains(lr.stderr.String(), "reconcile stopped") {
		t.Errorf("no stop reported:\n%s", lr.stderr.String())
	}
}

func TestReconcileLeaderElectHoldsAndReleasesTheLease(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: sf.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	lr := startReconcile(t, "--config", sf.settings, loopChecks, "--kubeconfig", env.Kubeconfig, "--interval", "200ms",
		"--leader-elect", "--lease-namespace", "default", "--lease-name", "devata-test", "--shard", "0/2",
		"--lease-duration", "2s", "--renew-deadline", "1500ms", "--retry-period", "200ms")
	holder := func() string {
		l, err := kc.CoordinationV1().Leases("default").Get(t.Context(), "devata-test-0-of-2", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	lr.waitFor("the lease", func() bool { return holder() != "" })
	lr.waitFor("a pass", func() bool {
		_, body := lr.get("/metrics")
		// The series is there at 0 from the start: wait for it to count one.
		return strings.Contains(body, `devata_reconcile_passes_total{result="ok"} `) && !strings.Contains(body, `devata_reconcile_passes_total{result="ok"} 0`+"\n")
	})
	if _, body := lr.get("/metrics"); !strings.Contains(body, "devata_reconcile_leader 1") || strings.Contains(body, `machine="worker-2"`) != (reconcileShard("worker-2") == 0) {
		t.Errorf("/metrics:\n%s", body)
	}
	if c := lr.stop(); c != 0 {
		t.Fatalf("exit %d\n%s", c, lr.stderr.String())
	}
	if h := holder(); h != "" {
		t.Errorf("lease still held by %q after a clean stop", h)
	}
}

// The inventory deploy/ ships as its example is valid as it will be mounted.
func TestDeployInventoryIsValid(t *testing.T) {
	r := devata(t, nil, "validate", "-i", "../../deploy/inventory/inventory.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

func reconcileShard(worker string) int { return reconcile.ShardOf(worker, false, 2) }

// reconcile --force, as apply --force: a Kubernetes minor upgrade is
// refused while the deprecated APIs still requested cannot be read (here a
// kubeconfig whose user may list Nodes, Pods and DaemonSets but not get
// the API server's /metrics: the check fails closed), every machine that
// would move reported failed and nothing written; with --force the check
// is skipped and the upgrade starts.
func TestReconcileForceSkipsTheDeprecatedAPICheck(t *testing.T) {
	sf, k, _ := startOnKubernetes(t, "v1.33.5")
	ctx := t.Context()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "devata-no-metrics"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list"}},
		},
	}
	if _, err := k.kc.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "devata-no-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "devata-no-metrics"}},
	}
	if _, err := k.kc.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := k.env.User("devata-no-metrics")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	r := devata(t, nil, "reconcile", "--once", "--no-lease", "--config", sf.settings, "--kubeconfig="+kubeconfig, loopChecks)
	show(t, r)
	lacks(t, "without --force", r.stdout, "cp-1                 failed", "Kubernetes version change refused: the deprecated APIs still requested could not be read", "/metrics")
	if r.code != 2 {
		t.Errorf("without --force: exit %d, want 2", r.code)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Fatalf("a refused Kubernetes upgrade applied %d configs", applies)
	}

	r = devata(t, nil, "reconcile", "--once", "--no-lease", "--force", "--config", sf.settings, "--kubeconfig="+kubeconfig, loopChecks)
	show(t, r)
	if strings.Contains(r.stdout, "could not be read") || strings.Contains(r.stdout, " failed") {
		t.Errorf("with --force the check was still made, or a machine failed:\n%s", r.stdout)
	}
	if applies, _ := writes(sf.Sim); applies == 0 {
		t.Errorf("with --force nothing was applied: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "with --force", r.stdout, "converged")
}
