package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/render"
)

type result struct {
	code        int
	stdout, err string
}

// devata runs the CLI in-process as a user would, with env holding the only
// environment variables it sees.
func devata(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no stray user settings file
	var out, errb bytes.Buffer
	code := run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(k string) string { return env[k] })
	return result{code, out.String(), errb.String()}
}

// lacks reports each of wants that text does not contain, naming what the text is.
func lacks(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

// homelab copies the example into a fresh directory and returns its inventory path.
func homelab(t *testing.T) string {
	t.Helper()
	path, err := examples.WriteHomelab(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// homelabWithFixtureBundle is homelab with the committed fixture bundle
// beside it as secrets.yaml (0600), so that configs and certificates are the
// same from run to run.
func homelabWithFixtureBundle(t *testing.T) string {
	t.Helper()
	inv := homelab(t)
	data, err := os.ReadFile(simtest.FixtureSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(inv), "secrets.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestValidateExample(t *testing.T) {
	inv := homelab(t)
	r := devata(t, nil, "validate", "-i", inv)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{
		"cp-1      controlplane  10.20.0.11:50000",
		"patches/common.yaml, patches/controlplane.yaml, patches/cp-1.yaml",
		"worker-2  worker        10.20.0.22:50000",
		"is valid: 5 machines (3 control planes, 2 workers)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if lines := strings.Count(r.stdout, "KiB"); lines != 5 {
		t.Errorf("want one line with a config size per machine, got %d", lines)
	}
	if !strings.Contains(r.err, "throwaway") {
		t.Errorf("stderr does not say the bundle is a throwaway: %q", r.err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(inv), "secrets.yaml")); !os.IsNotExist(err) {
		t.Errorf("validate wrote a secrets bundle")
	}
}

func TestValidateInvalidReportsEverythingAndWritesNothing(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../inventory/testdata/invalid-many-faults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := devata(t, nil, "validate", "-i", inv)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.err)
	}
	if n := strings.Count(r.err, inv+":"); n != 7 {
		t.Errorf("want all 7 located errors on stderr, got %d:\n%s", n, r.err)
	}
	if !strings.Contains(r.err, "is invalid: 7 errors") {
		t.Errorf("no summary line: %s", r.err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("validate of an invalid inventory wrote files: %v", entries)
	}
}

func TestGenSecretsNeverOverwrites(t *testing.T) {
	inv := homelab(t)
	bundle := filepath.Join(filepath.Dir(inv), "secrets.yaml")
	r := devata(t, nil, "gen", "secrets", "-i", inv)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.err)
	}
	st, err := os.Stat(bundle)
	if err != nil {
		t.Fatalf("no bundle at the inventory's cluster.secrets: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v", st.Mode().Perm())
	}
	first, _ := os.ReadFile(bundle)
	r = devata(t, nil, "gen", "secrets", "-i", inv)
	if r.code != 2 || !strings.Contains(r.err, "--force") {
		t.Errorf("second gen secrets: exit %d, stderr %q; want 2 and a hint about --force", r.code, r.err)
	}
	if again, _ := os.ReadFile(bundle); !bytes.Equal(first, again) {
		t.Fatal("bundle was replaced without --force")
	}
	if r := devata(t, nil, "gen", "secrets", "-i", inv, "--force"); r.code != 0 {
		t.Fatalf("--force: exit %d: %s", r.code, r.err)
	}
	if again, _ := os.ReadFile(bundle); bytes.Equal(first, again) {
		t.Error("--force did not write a new bundle")
	}
}

func TestGenConfigAndRecoverSecrets(t *testing.T) {
	inv := homelab(t)
	dir := filepath.Dir(inv)
	if r := devata(t, nil, "gen", "secrets", "-i", inv); r.code != 0 {
		t.Fatalf("gen secrets: %s", r.err)
	}
	out := filepath.Join(dir, "out")
	r := devata(t, nil, "gen", "config", "-i", inv, "-o", out)
	if r.code != 0 {
		t.Fatalf("gen config: exit %d: %s", r.code, r.err)
	}
	for _, name := range []string{"cp-1.yaml", "cp-2.yaml", "cp-3.yaml", "worker-1.yaml", "worker-2.yaml", "talosconfig"} {
		st, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s not written: %v", name, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, st.Mode().Perm())
		}
	}
	tc, err := clientconfig.Open(filepath.Join(out, "talosconfig"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := tc.Contexts[tc.Context]
	if strings.Join(ctx.Endpoints, ",") != "10.20.0.11,10.20.0.12,10.20.0.13" || len(ctx.Nodes) != 5 || ctx.Crt == "" || ctx.Key == "" {
		t.Errorf("talosconfig context: endpoints %v nodes %v cert %t", ctx.Endpoints, ctx.Nodes, ctx.Crt != "")
	}

	// Idempotent: a second run changes nothing.
	r = devata(t, nil, "gen", "config", "-i", inv, "-o", out)
	if r.code != 0 || strings.Count(r.stdout, "unchanged") != 5 || !strings.Contains(r.stdout, "kept") {
		t.Errorf("second gen config: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	// Reconstruction: lose the bundle, recover it from cp-1's config, render the same configs.
	orig, _ := os.ReadFile(filepath.Join(out, "cp-1.yaml"))
	if err := os.Remove(filepath.Join(dir, "secrets.yaml")); err != nil {
		t.Fatal(err)
	}
	if r := devata(t, nil, "gen", "secrets", "-i", inv, "--from-controlplane-config", filepath.Join(out, "cp-1.yaml")); r.code != 0 {
		t.Fatalf("recover: exit %d: %s", r.code, r.err)
	}
	b, err := render.LoadSecrets(filepath.Join(dir, "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_ = b
	r = devata(t, nil, "gen", "config", "-i", inv, "-o", out)
	if r.code != 0 || strings.Count(r.stdout, "unchanged") != 5 {
		t.Errorf("configs from the recovered bundle differ from the originals: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if again, _ := os.ReadFile(filepath.Join(out, "cp-1.yaml")); !bytes.Equal(orig, again) {
		t.Error("cp-1.yaml changed")
	}
}

func TestGenConfigWithoutSecretsSaysWhatToDo(t *testing.T) {
	r := devata(t, nil, "gen", "config", "-i", homelab(t), "-o", t.TempDir())
	if r.code != 2 || !strings.Contains(r.err, "devata gen secrets") {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
}

func TestSettingsErrorsExit2(t *testing.T) {
	r := devata(t, map[string]string{"DEVATA_CONCURRENCY": "0"}, "validate", "-i", homelab(t))
	if r.code != 2 || !strings.Contains(r.err, "concurrency must be at least 1") {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
	if r := devata(t, nil, "validate", "--no-such-flag"); r.code != exitUsage || !strings.Contains(r.err, "unknown flag") {
		t.Errorf("unknown flag: exit %d, stderr %q", r.code, r.err)
	}
}

func TestInventoryFromEnvironment(t *testing.T) {
	r := devata(t, map[string]string{"DEVATA_INVENTORY": homelab(t)}, "validate")
	if r.code != 0 {
		t.Errorf("DEVATA_INVENTORY ignored: exit %d: %s", r.code, r.err)
	}
	r = devata(t, nil, "validate", "-i", filepath.Join(t.TempDir(), "nope.yaml"))
	if r.code != 1 || !strings.Contains(r.err, "examples/homelab/inventory.yaml") {
		t.Errorf("missing inventory: exit %d, stderr %q", r.code, r.err)
	}
}

func TestVersion(t *testing.T) {
	r := devata(t, nil, "version")
	if r.code != 0 || !strings.Contains(r.stdout, "talos machinery v1.11.0") && !strings.Contains(r.stdout, "talos machinery") {
		t.Errorf("version: exit %d: %s", r.code, r.stdout)
	}
}

// The demo tells the whole story against the sim and a real kube-apiserver.
func TestDemo(t *testing.T) {
	r := devata(t, nil, "demo")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	drifts := strings.Split(r.stdout, "$ devata drift")
	if len(drifts) != 5 {
		t.Fatalf("want four drift runs, got %d:\n%s", len(drifts)-1, r.stdout)
	}
	boot, clean, faulty, after, recovered := drifts[0], drifts[1], drifts[2], drifts[3], drifts[4]
	for _, want := range []string{"in maintenance mode", "$ devata bootstrap --yes", "bootstrapped etcd on cp-1", "etcd healthy, members [cp-1 cp-2 cp-3]", "5 Nodes registered; 5 NotReady until a CNI runs", "bootstrap complete"} {
		if !strings.Contains(boot, want) {
			t.Errorf("demo bootstrap lacks %q", want)
		}
	}
	for _, tt := range []struct{ name, text, want string }{
		{"clean drift", clean, "5 in sync, 0 drifted, 0 unknown (5 machines, 53 results) — exit 0"},
		{"faults: KPR declared off", faulty, `CiliumNodeConfig kube-system/debug-kpr-off-cp-3 sets kube-proxy-replacement="false" on node cp-3`},
		{"faults: KPR off in the agent", faulty, `agent runs with kube-proxy replacement "False"`},
		{"faults: KPR explained", faulty, "then delete the agent pod so it restarts with kube-proxy-replacement"},
		{"faults: edited config", faulty, "-            - pool.ntp.org"},
		{"faults: kubelet", faulty, "Node worker-1 is not Ready"},
		{"faults: unreachable", faulty, "worker-2  worker        127.0.0.1"},
		{"faults: storage", faulty, "u-longhorn failed"},
		{"faults: summary", faulty, "1 in sync, 3 drifted, 1 unknown"},
		{"apply converged cp-2", faulty, "converged: cp-2"},
		{"after apply", after, "4 in sync, 0 drifted, 1 unknown"},
		{"backup", after, "$ devata backup etcd --to "},
		{"wiped", after, "cp-1, cp-2, cp-3 lost their system disks"},
		{"recovered", after, "recovered etcd on cp-1 from "},
		{"rebuilt and in sync", recovered, "5 in sync, 0 drifted, 0 unknown"},
		{"simulated", clean, "SIMULATED"},
		// the closing lines true to the Nodes: Cilium comes after the
		// first bootstrap; after the rebuild the Nodes are Ready (issue 33)
		{"first bootstrap: install Cilium", boot, "next: cluster.network.cni is none, so the Nodes become Ready once a CNI runs: install Cilium"},
		{"rebuild: Nodes Ready", after, "next: every Node is Ready, so a CNI runs: devata drift"},
		{"the Lease advice followed", boot, "$ kubectl create namespace devata"},
	} {
		if !strings.Contains(tt.text, tt.want) {
			t.Errorf("%s: output lacks %q", tt.name, tt.want)
		}
	}
	// a group by label and a held machine: apply changes the group's other
	// worker and reports worker-1 held, not changed, until its hold is lifted
	groups, _, _ := strings.Cut(after, "==> recovery")
	_, groups, ok := strings.Cut(groups, "==> groups and holds")
	held, lifted, cut := strings.Cut(groups, "worker-1's hold lifted")
	if !ok || !cut {
		t.Errorf("the demo has no groups and holds step:\n%s", after)
	}
	lacks(t, "apply with worker-1 held", held, "worker-1             held: held by the inventory (disk replacement, OPS-123), not changed",
		`machine.nodeLabels["storage.devata.dev/pool"]: added "longhorn"`, "converged: worker-2")
	lacks(t, "apply with the hold lifted", lifted, "converged: worker-1")
	if strings.Contains(held, "converged: worker-1") {
		t.Errorf("apply changed the held worker-1:\n%s", held)
	}
	if strings.Contains(after, "install Cilium") {
		t.Errorf("after Cilium runs, the demo still says to install it:\n%s", after)
	}
	// one Lease advice per run, worded as advice (issue 33: the warning
	// was printed three times)
	if n := strings.Count(r.stdout+r.err, "advice: kubectl create namespace devata"); n != 1 || strings.Contains(r.stdout+r.err, "warning: namespace") {
		t.Errorf("the Lease advice is printed %d times, want once:\n%s", n, r.err)
	}
}

// Without Kubernetes the demo tells the whole story on loopback alone: no
// command dials cluster.endpoint (10.20.0.10:6443, which nothing serves
// here) for a Lease or a Node, and apply converges cp-2 (issue 33: it
// failed taking the Lease through the kubeconfig bootstrap wrote).
func TestDemoWithoutKubernetes(t *testing.T) {
	r := devata(t, nil, "demo", "--kubernetes=false")
	out := r.stdout + r.err
	if r.code != 0 {
		t.Fatalf("demo --kubernetes=false: exit %d\n%s", r.code, out)
	}
	_, apply, ok := strings.Cut(out, "$ devata apply --yes")
	if !ok {
		t.Fatalf("no apply in the demo:\n%s", out)
	}
	apply, _, _ = strings.Cut(apply, "==> drift after apply")
	lacks(t, "the demo's apply", apply, "converged: cp-2", "worker-2             skipped: talos api 127.0.0.1:")
	for _, bad := range []string{"10.20.0.10", "Lease", "advice:", "x509", "level=", "--no-lease"} {
		if strings.Contains(out, bad) {
			t.Errorf("the demo without Kubernetes says %q:\n%s", bad, out)
		}
	}
	if strings.Count(out, "next: every Node is Ready") != 0 {
		t.Errorf("without Kubernetes the demo claims Ready Nodes:\n%s", out)
	}
}

func TestCompletion(t *testing.T) {
	r := devata(t, nil, "completion", "bash")
	if r.code != 0 || !strings.Contains(r.stdout, "__start_devata") {
		t.Errorf("completion bash: exit %d, %d bytes", r.code, len(r.stdout))
	}
}
