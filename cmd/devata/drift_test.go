package main

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks/probe"
	"devata.dev/devata/dnscheck"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/render"
	"devata.dev/devata/sim"
)

// simFleet is the homelab example on the sim plus the settings file devata
// sim would write for it.
type simFleet struct {
	*simtest.Fleet
	settings string
}

func startSim(t *testing.T, opts simtest.Options) *simFleet {
	t.Helper()
	f := simtest.Start(t, opts)
	simDir := filepath.Join(f.Dir, "sim")
	if err := os.MkdirAll(simDir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, settings, err := simfleet.WriteFiles(simDir, f.Inventory, f.Renderer, f.Sim, "")
	if err != nil {
		t.Fatal(err)
	}
	return &simFleet{Fleet: f, settings: settings}
}

var machineChecks = "--checks=config,talos-version,machine-stage"

func TestDriftCleanFleet(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if !strings.Contains(r.stdout, "SIMULATED") {
		t.Errorf("report on the simulated fleet does not say so:\n%s", r.stdout)
	}
	if n := strings.Count(r.stdout, "InSync"); n < 5 {
		t.Errorf("want a line per machine InSync:\n%s", r.stdout)
	}
}

func TestDriftOneUnreachableOfFive(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json")
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\n%s", r.code, r.err)
	}
	var rep drift.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, r.stdout)
	}
	checked := map[string]int{}
	for _, res := range rep.Results {
		switch {
		case res.Machine == "worker-2":
			if res.Status != drift.StatusUnknown || !strings.Contains(res.Reason, sf.Sim.Machine("worker-2").Addr()) {
				t.Errorf("worker-2/%s: %s %q; want Unknown naming the address it dialed", res.Check, res.Status, res.Reason)
			}
		case res.Status == drift.StatusInSync:
			checked[res.Machine]++
		default:
			t.Errorf("%s/%s: %s %s", res.Machine, res.Check, res.Status, res.Reason)
		}
	}
	if len(checked) != 4 {
		t.Errorf("machines fully checked: %v, want the other 4", checked)
	}
}

// Every byte devata prints or writes during drift and apply with diffs (stdout,
// stderr with debug logs, JSON, JUnit, the HTML page, the Prometheus textfile) is searched for
// the bundle's secret values and for the drifted token's value.
func TestDriftAndApplyNeverLeakSecrets(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	drifted := bytes.Replace(sf.Desired["cp-2"], []byte("time.cloudflare.com"), []byte("pool.ntp.org"), 1)
	// A rotated token in the drifted config must show as "changed", never as a value.
	drifted = bytes.Replace(drifted, []byte(sf.Bundle.Secrets.BootstrapToken), []byte("abcdef.0123456789abcdef"), 1)
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{DriftedConfig: drifted})
	dir := t.TempDir()
	junit, prom, page := filepath.Join(dir, "drift.xml"), filepath.Join(dir, "drift.prom"), filepath.Join(dir, "drift.html")
	var everything bytes.Buffer
	for _, format := range []string{"table", "json", "junit", "prom", "html"} {
		r := devata(t, nil, "drift", "--config", sf.settings, "-o", format, "-vv", "--log-format", "json", "--junit-file", junit, "--prom-file", prom, "--html-file", page)
		if r.code != 1 && r.code != 2 {
			t.Fatalf("%s: exit %d, want drift\n%s", format, r.code, r.err)
		}
		everything.WriteString(r.stdout + r.err)
		for _, f := range []string{junit, prom, page} {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			everything.Write(data)
		}
	}
	// The page escapes = and + in attributes: search its text as a browser reads it, too.
	everything.WriteString(html.UnescapeString(everything.String()))
	// apply prints the plan with its diffs, then rolls out; logs at full verbosity.
	for _, args := range [][]string{{"apply", "--dry-run"}, {"apply", "--yes"}} {
		r := devata(t, nil, append(args, "--config", sf.settings, "-vv", "--log-format", "json")...)
		everything.WriteString(r.stdout + r.err)
	}
	all := everything.String()
	if !strings.Contains(all, "apply no-reboot") {
		t.Fatalf("apply did not plan the drifted machine: the test would prove nothing\n%s", all)
	}
	if !strings.Contains(all, "pool.ntp.org") {
		t.Fatalf("the drifted field is not in the output: the test would prove nothing")
	}
	if !strings.Contains(all, "cluster.token") {
		t.Errorf("the rotated token is not reported as a changed secret path")
	}
	for _, s := range simtest.BundleSecrets(sf.Bundle) {
		if strings.Contains(all, s) {
			t.Fatalf("output contains a secret of the bundle (%.8s…)", s)
		}
	}
	if strings.Contains(all, "abcdef.0123456789abcdef") {
		t.Fatal("output contains the drifted token's value")
	}
}

func TestApplyConvergesAndSecondApplyWritesNothing(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	sf.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")

	r := devata(t, nil, "apply", "--config", sf.settings, "--dry-run")
	if r.code != 1 || !strings.Contains(r.stdout, "dry run: nothing was written") || !strings.Contains(r.stdout, "+            - time.cloudflare.com") {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	r = devata(t, nil, "apply", "--config", sf.settings)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if !strings.Contains(r.stdout, "converged: cp-2, worker-1") || !strings.Contains(r.stdout, "gate before cp-2: etcd healthy") {
		t.Errorf("apply output:\n%s", r.stdout)
	}
	calls := func() int {
		n := 0
		for _, m := range sf.Sim.Machines() {
			n += m.Calls("ApplyConfiguration")
		}
		return n
	}
	before := calls()
	r = devata(t, nil, "apply", "--config", sf.settings)
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to apply: 5 of 5") {
		t.Errorf("second apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if n := calls() - before; n != 0 {
		t.Errorf("second apply made %d ApplyConfiguration calls, want 0", n)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks+",etcd"); r.code != 0 {
		t.Errorf("drift after apply: exit %d\n%s", r.code, r.stdout)
	}
}

func TestApplyRefusesRebootWithoutTerminal(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Drift(t, "worker-2", "diskQuotaSupport: true", "diskQuotaSupport: false")
	before := sf.Sim.Machine("worker-2").Calls("ApplyConfiguration")
	r := devata(t, nil, "apply", "--config", sf.settings)
	if r.code != 2 || !strings.Contains(r.err, "--yes") || !strings.Contains(r.err, "worker-2") {
		t.Fatalf("exit %d, stderr %q", r.code, r.err)
	}
	if n := sf.Sim.Machine("worker-2").Calls("ApplyConfiguration") - before; n != 1 {
		t.Errorf("%d ApplyConfiguration calls, want only the dry run", n)
	}
	r = devata(t, nil, "apply", "--config", sf.settings, "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "rebooting, waiting for it to return") {
		t.Errorf("--yes: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// --stream writes the same report, in arrival order, without holding it.
func TestDriftStreamMatchesTheReport(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	held := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json")
	streamed := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json", "--stream")
	if held.code != 2 || streamed.code != 2 {
		t.Fatalf("exit codes %d and %d, want 2 and 2\n%s", held.code, streamed.code, streamed.err)
	}
	var a, b drift.Report
	if err := json.Unmarshal([]byte(held.stdout), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(streamed.stdout), &b); err != nil {
		t.Fatalf("streamed JSON: %v\n%s", err, streamed.stdout)
	}
	b.Finish()
	if len(a.Results) != len(b.Results) || a.Summary != b.Summary {
		t.Errorf("streamed report differs: %d vs %d results, summary %+v vs %+v", len(a.Results), len(b.Results), a.Summary, b.Summary)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "--stream"); r.code != exitUsage || !strings.Contains(r.err, "-o json") {
		t.Errorf("--stream with the table: exit %d, %q", r.code, r.err)
	}
}

// The Cilium checks run on their own and inside the full report; without a
// kubeconfig their Kubernetes side is Unknown and says why.
func TestDriftCiliumChecksWired(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	r := devata(t, nil, "drift", "--config", sf.settings, "--checks=cilium-declaration,cilium-services", "-o", "json")
	var rep drift.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("exit %d: %v\n%s", r.code, err, r.err)
	}
	if r.code != 2 || len(rep.Results) != 10 {
		t.Fatalf("exit %d, %d results; want 2 and 10 (2 checks × 5 machines)", r.code, len(rep.Results))
	}
	for _, res := range rep.Results {
		if res.Status != drift.StatusUnknown || !strings.Contains(res.Reason, "kubeconfig") {
			t.Errorf("%s/%s: %s %q, want Unknown naming the missing kubeconfig", res.Machine, res.Check, res.Status, res.Reason)
		}
	}
	full := devata(t, nil, "drift", "--config", sf.settings, "-o", "json")
	if !strings.Contains(full.stdout, `"check": "cilium-declaration"`) || !strings.Contains(full.stdout, `"check": "storage-volumes"`) {
		t.Errorf("the full report lacks the Cilium or storage checks")
	}
	r = devata(t, nil, "drift", "--config", sf.settings, "--checks=cilium-probe")
	if r.code != exitUsage || !strings.Contains(r.err, "cilium-probe creates pods in the cluster: it runs only with --probe") {
		t.Errorf("--checks cilium-probe without --probe: exit %d\n%s", r.code, r.err)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, "--checks=coredns-probe")
	if r.code != exitUsage || !strings.Contains(r.err, "coredns-probe creates pods in the cluster: it runs only with --probe") {
		t.Errorf("--checks coredns-probe without --probe: exit %d\n%s", r.code, r.err)
	}
}

// With a kubeconfig, the three Cilium checks (one exec into each agent)
// and, with --probe, the transactions (cilium-probe, coredns-probe) all
// pass on a healthy fleet; the probes leave no pod behind.
func TestDriftCiliumWithKubernetes(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: sf.Inventory.Cluster.Network.ServiceSubnets})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sf.Sim.SyncKubelets(t.Context(), kube)
	if err := sim.InstallCilium(t.Context(), env.Config); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go sf.Sim.RunKubelets(ctx, kube, 100*time.Millisecond) // agent pods, probe pods
	// The probe namespace as deploy/netcheck-probe.yaml makes it, and the
	// ServiceAccount kube-controller-manager would add.
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe.DefaultNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(probe.DefaultNamespace).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	args := []string{"drift", "--config", sf.settings, "--kubeconfig", env.Kubeconfig, "-o", "json"}
	var rep drift.Report
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The agent pods start with the next kubelet round.
		r := devata(t, nil, append(args, "--checks=cilium-declaration,cilium-agent,cilium-services")...)
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("exit %d: %v\n%s", r.code, err, r.err)
		}
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exit %d, want 0\n%s", r.code, r.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(rep.Results) != 15 {
		t.Errorf("%d results, want 15 (3 checks × 5 machines)", len(rep.Results))
	}
	r := devata(t, nil, append(args, "--checks=cilium-agent,cilium-probe,coredns-probe", "--probe", "--probe-timeout=20s")...)
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("--probe: exit %d, %v\n%s%s", r.code, err, r.stdout, r.err)
	}
	probes := map[string]int{}
	for _, res := range rep.Results {
		if res.Status == drift.StatusInSync && res.Rung == drift.RungTransaction {
			probes[res.Check]++
		}
	}
	if probes[netcheck.CheckProbe] != 5 || probes[dnscheck.CheckProbe] != 5 {
		t.Errorf("InSync transaction results %v, want 5 cilium-probe and 5 coredns-probe:\n%s", probes, r.stdout)
	}
	left, err := kube.CoreV1().Pods(probe.DefaultNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(left.Items) != 0 {
		t.Errorf("probe pods left: %v %v", left, err)
	}
}

// Past bootstrap.LeanAbove machines drift holds no configs and renders each in its
// machine's turn; the report is the same, drift included.
func TestDriftLeanSession(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	before := render.LeanAbove
	render.LeanAbove = 0
	defer func() { render.LeanAbove = before }()
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks)
	if r.code != 0 || strings.Count(r.stdout, "InSync") < 5 {
		t.Fatalf("lean drift of a clean fleet: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	r = devata(t, nil, "drift", "--config", sf.settings, machineChecks)
	if r.code != 1 || !strings.Contains(r.stdout, "-            - pool.ntp.org") || !strings.Contains(r.stdout, "worker-1") {
		t.Fatalf("lean drift of a drifted worker: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// -o html prints the page; --html-file writes the same page beside any -o
// (as --junit-file does), and not with --stream.
func TestDriftHTMLPage(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	page := filepath.Join(t.TempDir(), "drift.html")
	printed := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "html")
	beside := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "--html-file", page)
	if printed.code != 1 || beside.code != 1 {
		t.Fatalf("exit codes %d and %d, want 1 (drift)\n%s%s", printed.code, beside.code, printed.err, beside.err)
	}
	written, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for what, p := range map[string]string{"-o html": printed.stdout, "--html-file": string(written)} {
		if !strings.HasPrefix(p, "<!DOCTYPE html>") || !strings.Contains(p, `class="simulated"`) ||
			!strings.Contains(p, `data-machine="cp-2" data-status="Drifted"`) || !strings.Contains(p, "pool.ntp.org") {
			t.Errorf("%s: not the page of the drifted simulated fleet:\n%.600s", what, p)
		}
	}
	if !strings.Contains(beside.stdout, "cp-2") || strings.Contains(beside.stdout, "<html") {
		t.Errorf("--html-file changed stdout: want the table\n%s", beside.stdout)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "-o", "json", "--stream", "--html-file", page); r.code != exitUsage || !strings.Contains(r.err, "--html-file") {
		t.Errorf("--stream with --html-file: exit %d, %q", r.code, r.err)
	}
}
