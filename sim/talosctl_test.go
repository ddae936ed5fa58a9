//go:build talosctl

// The real talosctl v1.11.0 (and, in talosctl114_test.go, v1.14.1) against
// the simulated fleet. It needs talosctl built from the Go module proxy
// (minutes, once per release): go tool -modfile=tools/go.mod task
// test-talosctl, or go test -tags talosctl -run Talosctl ./sim/.
package sim_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
)

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

func TestRealTalosctl(t *testing.T) {
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"worker-2"}})
	dir := t.TempDir()
	tc := f.Talosconfig(t)
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints = []string{f.Overrides["cp-1"]}
	ctx.Nodes = []string{"cp-1"}
	tcPath := filepath.Join(dir, "talosconfig")
	if err := tc.Save(tcPath); err != nil {
		t.Fatal(err)
	}
	talosctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--talosconfig", tcPath}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill() // it may have exited just now; the timeout is the failure
			t.Fatalf("talosctl %s: timed out\n%s", strings.Join(args, " "), out.String())
		}
		return out.String()
	}
	expect := func(out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}

	expect(talosctl("version"), "Tag:         v1.11.0", "NODE:        cp-1")
	expect(talosctl("get", "machineconfig"), "MachineConfig", "v1alpha1")
	// Before etcd is bootstrapped a control plane stays booting: machined's
	// StartAllServices waits for etcd, whose PreFunc waits to join.
	expect(talosctl("get", "machinestatus"), "booting", "false")
	expect(talosctl("service", "etcd"), "Preparing", "Running pre state")
	if out, err := talosctlErr(bin, tcPath, "etcd", "members"); err == nil {
		t.Errorf("etcd members before bootstrap answered:\n%s", out)
	}
	expect(talosctl("-n", "worker-1", "get", "volumestatus"), "u-longhorn", "ready")
	expect(talosctl("-n", "worker-1", "get", "mountstatus"), "MountStatus")
	expect(talosctl("service", "kubelet"), "Running", "OK")
	expect(talosctl("-n", "worker-1", "mounts"), "/var/mnt/longhorn")

	edited := bytes.Replace(f.Desired["cp-1"], []byte("time.cloudflare.com"), []byte("pool.ntp.org"), 1)
	cfgPath := filepath.Join(dir, "cp-1.yaml")
	if err := os.WriteFile(cfgPath, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	expect(talosctl("apply-config", "--dry-run", "-f", cfgPath), "Dry run summary", "pool.ntp.org")
	if n := f.Sim.Machine("cp-1").Calls("ApplyConfiguration") - f.Sim.Machine("cp-1").Calls("ApplyConfiguration(dry-run)"); n != 0 {
		t.Errorf("a dry run wrote: %d applies", n)
	}

	w2 := filepath.Join(dir, "worker-2.yaml")
	if err := os.WriteFile(w2, f.Desired["worker-2"], 0o600); err != nil {
		t.Fatal(err)
	}
	talosctl("apply-config", "--insecure", "-n", f.Overrides["worker-2"], "-e", f.Overrides["worker-2"], "-f", w2)

	talosctl("bootstrap")
	// A second bootstrap is refused: etcd has data now (AlreadyExists).
	if out, err := talosctlErr(bin, tcPath, "bootstrap"); err == nil || !strings.Contains(out, "etcd data directory is not empty") {
		t.Errorf("second bootstrap: %v\n%s", err, out)
	}
	var members string
	deadline := time.Now().Add(10 * time.Second)
	for {
		members = talosctl("etcd", "members")
		if strings.Contains(members, "cp-2") && strings.Contains(members, "cp-3") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect(members, "cp-1", "cp-2", "cp-3")
	deadline = time.Now().Add(10 * time.Second)
	for {
		out, err := talosctlErr(bin, tcPath, "get", "machinestatus")
		if err == nil && strings.Contains(out, "running") || time.Now().After(deadline) {
			expect(out, "running")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect(talosctl("service", "etcd"), "Running", "OK")
	kc := filepath.Join(dir, "kubeconfig")
	talosctl("kubeconfig", kc)
	if data, err := os.ReadFile(kc); err != nil || !bytes.Contains(data, []byte("https://10.20.0.10:6443")) {
		t.Errorf("kubeconfig: %v\n%s", err, data)
	}
	// worker-2 left maintenance mode and serves mTLS now.
	deadline = time.Now().Add(10 * time.Second)
	for {
		cmd := exec.Command(bin, "--talosconfig", tcPath, "-n", "worker-2", "get", "machinestatus")
		out, err := cmd.CombinedOutput()
		if err == nil && bytes.Contains(out, []byte("running")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker-2 after insecure apply: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// talosctlErr runs talosctl and returns its output and error, for commands
// expected to fail.
func talosctlErr(bin, tcPath string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--talosconfig", tcPath}, args...)...).CombinedOutput()
	return string(out), err
}

// realTalosctl is the real talosctl binary and a talosconfig for f that
// reaches the fleet through endpoint (a machine's name) and targets node.
func realTalosctl(t *testing.T, f *simtest.Fleet, endpoint, node string) (bin, tcPath string) {
	t.Helper()
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	tc := f.Talosconfig(t)
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints = []string{f.Overrides[endpoint]}
	ctx.Nodes = []string{node}
	tcPath = filepath.Join(t.TempDir(), "talosconfig")
	if err := tc.Save(tcPath); err != nil {
		t.Fatal(err)
	}
	return bin, tcPath
}
