//go:build talosapi

package testenv_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"k8s.io/client-go/tools/clientcmd"

	"devata.dev/devata/internal/testenv"
)

// apiSuite is one of Talos' API integration suites (internal/integration/api)
// as it runs against the sim: the test methods that must pass, and those
// that must skip, each with the reason Talos' own code gives (sim/doc.go,
// "Talos' API integration suites"). A test in neither list is not run
// (-testify.m names the others); sim/doc.go says why for each.
type apiSuite struct {
	name    string
	pass    []string
	skip    map[string]string
	timeout time.Duration
}

// talosAPISuites are, per Talos release, the suites of its
// internal/integration/api that need neither real hardware nor a
// provisioner.
var talosAPISuites = map[string][]apiSuite{
	"v1.11.0": {
		{name: "api.VersionSuite", pass: []string{"TestExpectedVersionMaster", "TestSameVersionCluster"}, timeout: 3 * time.Minute},
		{
			name: "api.ApidSuite", pass: []string{"TestBigPayload"},
			skip: map[string]string{
				"TestControlPlaneRouting": "information about routable endpoints is not available",
				"TestWorkerNoRouting":     "information about routable endpoints is not available",
			},
			timeout: 3 * time.Minute,
		},
		{name: "api.ResourcesSuite", pass: []string{"TestListResources", "TestForbiddenOperations"}, timeout: 3 * time.Minute},
		{name: "api.MachineStatusSuite", pass: []string{"TestMachineStatusReady"}, timeout: 3 * time.Minute},
		{name: "api.EtcdSuite", pass: []string{"TestMembers"}, timeout: 3 * time.Minute},
		{
			name: "api.ApplyConfigSuite", pass: []string{
				"TestApplyWithoutReboot", "TestApplyNoReboot", "TestApplyDryRun", "TestApplyDryRunDocuments",
				"TestApplyTry", "TestApplyRemovingV1Alpha1",
			},
			timeout: 5 * time.Minute,
		},
		{name: "api.NodeLabelsSuite", pass: []string{"TestUpdateControlPlane", "TestUpdateWorker", "TestAllowScheduling"}, timeout: 3 * time.Minute},
		{name: "api.EventsSuite", pass: []string{"TestEventsWatch"}, timeout: 3 * time.Minute},
		{name: "api.NodeAnnotationsSuite", pass: []string{"TestUpdateControlPlane", "TestUpdateWorker"}, timeout: 3 * time.Minute},
		{
			name: "api.ServiceAccountSuite",
			skip: map[string]string{
				"TestValid":               "cluster health can't be verified when cluster state is not provided",
				"TestNotAllowedNamespace": "cluster health can't be verified when cluster state is not provided",
				"TestNotAllowedRoles":     "cluster health can't be verified when cluster state is not provided",
				"TestFeatureNotEnabled":   "cluster health can't be verified when cluster state is not provided",
			},
			timeout: 3 * time.Minute,
		},
	},
	"v1.14.1": {
		{name: "api.VersionSuite", pass: []string{"TestExpectedVersionMaster", "TestSameVersionCluster"}, timeout: 3 * time.Minute},
		{
			name: "api.ApidSuite", pass: []string{"TestBigPayload", "TestPKIMismatch"},
			skip: map[string]string{
				"TestControlPlaneRouting": "information about routable endpoints is not available",
				"TestWorkerNoRouting":     "information about routable endpoints is not available",
			},
			timeout: 3 * time.Minute,
		},
		{name: "api.ResourcesSuite", pass: []string{"TestListResources", "TestForbiddenOperations"}, timeout: 3 * time.Minute},
		{name: "api.MachineStatusSuite", pass: []string{"TestMachineStatusReady"}, timeout: 3 * time.Minute},
		{name: "api.EtcdSuite", pass: []string{"TestMembers"}, timeout: 3 * time.Minute},
		{
			name: "api.ApplyConfigSuite", pass: []string{
				"TestApplyWithoutReboot", "TestApplyNoReboot", "TestApplyDryRun", "TestApplyDryRunDocuments",
				"TestApplyTry", "TestApplyRemovingV1Alpha1",
			},
			timeout: 5 * time.Minute,
		},
		{name: "api.NodeLabelsSuite", pass: []string{"TestUpdateControlPlane", "TestUpdateWorker"}, timeout: 3 * time.Minute},
		{name: "api.EventsSuite", pass: []string{"TestEventsWatch"}, timeout: 3 * time.Minute},
	},
}

// Talos' own API integration suites of each release in
// testenv.TalosAPIVersions, the binary its CI runs against a cluster, pass
// against a simulated fleet of that release that devata built: `devata sim
// --maintenance --kubernetes --inventory-addresses` serves the release's
// homelab example on loopback addresses of its own with a real
// kube-apiserver, `devata bootstrap` installs and bootstraps it, and each
// suite runs on its own, bounded by -test.timeout, finding the nodes as on
// a real cluster (Kubernetes discovery through the kubeconfig the Talos
// API serves). Every test the table names must pass or, where it says so,
// skip with Talos' own reason; anything else fails. One release's fleet at
// a time.
func TestTalosAPISuites(t *testing.T) {
	for _, version := range testenv.TalosAPIVersions {
		t.Run(version, func(t *testing.T) {
			suites, ok := talosAPISuites[version]
			if !ok {
				t.Fatalf("no suites listed for Talos %s", version)
			}

			start := time.Now()
			bin, err := testenv.TalosAPISuites(t.Context(), version, tlog{t})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("suites binary ready in %s", time.Since(start).Round(time.Second))

			start = time.Now()
			fl := startFleet(t, version)
			t.Logf("fleet built by devata sim and devata bootstrap in %s", time.Since(start).Round(time.Second))

			for _, s := range suites {
				if only := os.Getenv("DEVATA_TALOSAPI_SUITES"); only != "" && !slices.Contains(strings.Split(only, ","), s.name) {
					continue
				}
				t.Run(s.name, func(t *testing.T) {
					start := time.Now()
					runSuite(t, bin, fl, version, s)
					t.Logf("%s ran in %s", s.name, time.Since(start).Round(time.Second))
				})
			}
		})
	}
}

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// fleet is what the suites need of a running simulated cluster.
type fleet struct {
	talosconfig string // endpoints: the control planes; nodes: every machine's address
	k8sEndpoint string // the kube-apiserver the simulated kubelets registered with
}

var testLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): TestIntegration/([^/\s]+)/(\S+)`)

func runSuite(t *testing.T, bin string, fl fleet, version string, s apiSuite) {
	names := slices.Clone(s.pass)
	for name := range s.skip {
		names = append(names, name)
	}

	ctx, cancel := context.WithTimeout(t.Context(), s.timeout+time.Minute)
	defer cancel()

	args := []string{
		"-test.v", "-test.count=1",
		"-test.run", "^TestIntegration$/^" + regexp.QuoteMeta(s.name) + "$",
		"-testify.m", "^(" + strings.Join(names, "|") + ")$",
		"-test.timeout", s.timeout.String(),
		"-talos.config", fl.talosconfig,
		"-talos.k8sendpoint", fl.k8sEndpoint,
		"-talos.version", version,
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()

	results := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := testLine.FindStringSubmatch(line); m != nil && m[2] == s.name {
			// subtests of a test (ApidSuite runs one per endpoint) report
			// under it; the test's own line is the one without a slash
			if !strings.Contains(m[3], "/") {
				results[m[3]] = m[1]
			}
		}
	}

	failed := err != nil
	for _, name := range s.pass {
		if results[name] != "PASS" {
			t.Errorf("%s/%s: %s, want PASS", s.name, name, orNone(results[name]))
			failed = true
		}
	}

	for name, why := range s.skip {
		if results[name] != "SKIP" {
			t.Errorf("%s/%s: %s, want SKIP (%s)", s.name, name, orNone(results[name]), why)
			failed = true
		} else if !strings.Contains(string(out), why) {
			t.Errorf("%s/%s skipped, but not because %s", s.name, name, why)
			failed = true
		}
	}

	if failed {
		t.Errorf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	} else {
		t.Logf("%s: %d passed, %d skipped as expected", s.name, len(s.pass), len(s.skip))
	}
}

func orNone(r string) string {
	if r == "" {
		return "not run"
	}

	return r
}

// startFleet builds devata, serves the release's homelab on loopback addresses
// of this process with devata sim, bootstraps it with devata bootstrap and
// returns what the suites need. The sim is interrupted when the test ends.
func startFleet(t *testing.T, version string) fleet {
	t.Helper()

	work := t.TempDir()
	devata := filepath.Join(work, "devata")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", devata, "devata.dev/devata/cmd/devata").CombinedOutput(); err != nil {
		t.Fatalf("go build devata: %v\n%s", err, out)
	}

	// the release's homelab, each machine on a loopback address of this process
	examples := map[string]string{"v1.11.0": "homelab", "v1.14.1": "homelab-v1.14"}
	if examples[version] == "" {
		t.Fatalf("no example inventory for Talos %s", version)
	}
	example := filepath.Join("..", "..", "examples", examples[version])
	dir := filepath.Join(work, "homelab")
	if err := os.CopyFS(dir, os.DirFS(example)); err != nil {
		t.Fatal(err)
	}
	net := fmt.Sprintf("127.%d.%d.", 100+os.Getpid()%100, os.Getpid()/100%250)
	invPath := filepath.Join(dir, "inventory.yaml")
	inv, err := os.ReadFile(invPath)
	if err != nil {
		t.Fatal(err)
	}
	inv = []byte(strings.ReplaceAll(string(inv), "address: 10.20.0.", "address: "+net))
	if err := os.WriteFile(invPath, inv, 0o644); err != nil {
		t.Fatal(err)
	}

	env := append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(work, "xdg"), "DEVATA_CONFIG=", "TALOSCONFIG=", "KUBECONFIG=")
	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), devata, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("devata %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("gen", "secrets", "-i", invPath)

	simDir := filepath.Join(work, "sim")
	sim := exec.Command(devata, "sim", "-i", invPath, "--dir", simDir, "--maintenance", "--kubernetes", "--inventory-addresses")
	sim.Env = env
	stdout, err := sim.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var simErr strings.Builder
	sim.Stderr = &simErr
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// the sim we started, by its PID: interrupt it as Ctrl-C would
		sim.Process.Signal(syscall.SIGINT) //nolint:errcheck
		done := make(chan struct{})
		go func() { sim.Wait(); close(done) }() //nolint:errcheck
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			sim.Process.Kill() //nolint:errcheck
			<-done
		}
	})

	exports := map[string]string{}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		served := false
		for sc.Scan() {
			line := sc.Text()
			if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok && !served && strings.HasPrefix(line, "export ") {
				exports[k] = v
			}
			if !served && strings.Contains(line, "serving until interrupted") {
				served = true
				ready <- nil
			}
		}
		if !served {
			ready <- fmt.Errorf("devata sim ended before serving: %v", sc.Err())
		}
		io.Copy(io.Discard, stdout) //nolint:errcheck
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("%v\n%s", err, simErr.String())
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("devata sim did not serve within 5 minutes\n%s", simErr.String())
	}

	run("--config", exports["DEVATA_CONFIG"], "bootstrap", "--yes", "--etcd-settle", "2s", "--wait", "3m")

	kc, err := clientcmd.LoadFromFile(exports["KUBECONFIG"])
	if err != nil {
		t.Fatalf("the sim's kubeconfig: %v", err)
	}
	var k8sEndpoint string
	for _, c := range kc.Clusters {
		k8sEndpoint = c.Server
	}

	// The talosconfig devata sim wrote, its nodes the machines' addresses
	// as in Talos' own CI (the sim also routes by name).
	tc, err := clientconfig.Open(exports["TALOSCONFIG"])
	if err != nil {
		t.Fatal(err)
	}
	ctx := tc.Contexts[tc.Context]
	ctx.Nodes = nil
	for _, ep := range ctx.Endpoints {
		ctx.Nodes = append(ctx.Nodes, strings.TrimSuffix(ep, ":50000"))
	}
	tcPath := filepath.Join(work, "talosconfig")
	if err := tc.Save(tcPath); err != nil {
		t.Fatal(err)
	}

	return fleet{talosconfig: tcPath, k8sEndpoint: k8sEndpoint}
}
