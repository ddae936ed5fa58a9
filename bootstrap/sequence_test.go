package bootstrap_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// A configured machine answers on mTLS: it is never sent an insecure apply.
func TestApplyMaintenanceRefusesAConfiguredMachine(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	m := f.Inventory.Machine("cp-2")
	err := bootstrap.ApplyMaintenance(context.Background(), f.Dialer, m, f.Desired["cp-2"], 5*time.Second)
	if !errors.Is(err, bootstrap.ErrRefused) || !strings.Contains(err.Error(), "cp-2 answers on mTLS") || !strings.Contains(err.Error(), "v1.11.0") {
		t.Fatalf("err = %v; want a refusal naming cp-2 and what it answered", err)
	}
	if n := f.Sim.Machine("cp-2").Calls("ApplyConfiguration"); n != 0 {
		t.Errorf("%d ApplyConfiguration calls reached cp-2, want 0", n)
	}
}

func TestApplyMaintenanceConfiguresAMachineInMaintenance(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"worker-1"}})
	m := f.Inventory.Machine("worker-1")
	if err := bootstrap.ApplyMaintenance(context.Background(), f.Dialer, m, f.Desired["worker-1"], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := f.Sim.Machine("worker-1").Calls("ApplyConfiguration"); n != 1 {
		t.Errorf("%d ApplyConfiguration calls, want 1", n)
	}
}

// The sequence decides from the machines only: on a fleet simtest already
// configured and bootstrapped, a run finds nothing to do and writes nothing.
func TestRunOnABuiltClusterWritesNothing(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	var out bytes.Buffer
	seq := newSequence(t, f, &out, "")
	if err := seq.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, m := range f.Sim.Machines() {
		if n := m.Calls("ApplyConfiguration"); n != 0 {
			t.Errorf("%s: %d ApplyConfiguration calls", m.Name(), n)
		}
		if n := m.Calls("Bootstrap"); m.Name() != "cp-1" && n != 0 || m.Name() == "cp-1" && n != 1 {
			t.Errorf("%s: %d Bootstrap calls (simtest made cp-1's)", m.Name(), n)
		}
	}
	for _, want := range []string{"nothing to configure", "nothing to bootstrap", "etcd healthy, members [cp-1 cp-2 cp-3]", "fetched from cp-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// A kubeconfig that belongs to another cluster is never replaced without Force.
func TestKubeconfigOfAnotherClusterIsKept(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	path := t.TempDir() + "/kubeconfig"
	other := []byte("apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: 'https://192.0.2.1:6443'}\n  name: other\ncontexts:\n- context: {cluster: other, user: admin}\n  name: admin@other\ncurrent-context: admin@other\nusers:\n- name: admin\n  user: {}\n")
	if err := writeFile(path, other); err != nil {
		t.Fatal(err)
	}
	opts := bootstrap.Options{
		InventoryPath: f.Inventory.Path, Talosconfig: f.Talosconfig(t), Overrides: f.Overrides, KubeconfigOut: path,
		SkipNodes: true, Timeout: 5 * time.Second, Wait: 10 * time.Second, Poll: 50 * time.Millisecond, EtcdSettle: 200 * time.Millisecond,
	}
	err := bootstrap.New(opts).Run(context.Background())
	if !errors.Is(err, bootstrap.ErrRefused) || !strings.Contains(err.Error(), "server https://192.0.2.1:6443") {
		t.Fatalf("err = %v, want a refusal saying whose kubeconfig it is", err)
	}
	if got := readFile(t, path); !bytes.Equal(got, other) {
		t.Fatal("the other cluster's kubeconfig was replaced")
	}
	opts.Force = true
	if err := bootstrap.New(opts).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); bytes.Equal(got, other) || !bytes.Contains(got, []byte("https://10.20.0.10:6443")) {
		t.Fatalf("with Force the kubeconfig was not replaced by this cluster's:\n%s", got)
	}
}

// Talos refuses a bootstrap until etcd waits for one (FailedPrecondition):
// the sequence looks again and retries instead of failing.
func TestBootstrapRetriesWhileNotReady(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	cp1 := f.Sim.Machine("cp-1")
	cp1.SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"Bootstrap": codes.FailedPrecondition}})
	out := &simtest.Output{On: "not ready for it yet", Then: func() { cp1.SetFaults(sim.Faults{}) }}
	seq := newSequence(t, f, out, t.TempDir()+"/kubeconfig")
	if err := seq.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "bootstrapped etcd on cp-1") || cp1.Calls("Bootstrap") != 1 {
		t.Errorf("%d Bootstrap calls reached cp-1:\n%s", cp1.Calls("Bootstrap"), out.String())
	}
}

// A machine added later in maintenance mode next to a running cluster is
// configured; etcd is left alone.
func TestRunConfiguresAWorkerAddedLater(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"worker-2"}, Bootstrap: true})
	var out bytes.Buffer
	seq := newSequence(t, f, &out, "")
	if err := seq.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "configured 1 machine: worker-2") || !strings.Contains(out.String(), "nothing to bootstrap") {
		t.Errorf("output:\n%s", out.String())
	}
	if n := f.Sim.Machine("cp-1").Calls("Bootstrap"); n != 1 {
		t.Errorf("%d Bootstrap calls on cp-1, want only simtest's", n)
	}
}

// The bundle is created (0600) only when missing, and kept afterwards.
func TestRunCreatesTheSecretsBundleOnlyWhenMissing(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}})
	path := filepath.Join(f.Dir, "secrets.yaml")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	run := func() string {
		var out bytes.Buffer
		seq := newSequence(t, f, &out, "")
		if err := seq.Run(context.Background()); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return out.String()
	}
	if out := run(); !strings.Contains(out, "created secrets.yaml (mode 0600)") {
		t.Fatalf("first run did not create the bundle:\n%s", out)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("bundle: %v, mode %v", err, st.Mode().Perm())
	}
	created := readFile(t, path)
	if out := run(); !strings.Contains(out, "loaded secrets.yaml") {
		t.Errorf("second run:\n%s", out)
	}
	if !bytes.Equal(readFile(t, path), created) {
		t.Error("the second run replaced the bundle")
	}
}

// newSequence is the sequence every test here runs against a simtest fleet:
// no Node wait, short timeouts; kubeconfigOut "" keeps the default path.
func newSequence(t *testing.T, f *simtest.Fleet, out io.Writer, kubeconfigOut string) *bootstrap.Sequence {
	t.Helper()
	return bootstrap.New(bootstrap.Options{
		InventoryPath: f.Inventory.Path, Talosconfig: f.Talosconfig(t), Overrides: f.Overrides, KubeconfigOut: kubeconfigOut,
		SkipNodes: true, Timeout: 5 * time.Second, Wait: 10 * time.Second, Poll: 50 * time.Millisecond, EtcdSettle: 200 * time.Millisecond, Out: out,
	})
}

// On Talos a control plane without etcd answers EtcdMemberList by waiting
// (internal/pkg/etcd/etcd.go), so "no etcd data" is read only from the etcd
// service Preparing (services/etcd.go PreFunc). One control plane whose
// services cannot be listed is unclear: nothing is bootstrapped anywhere.
func TestNeverBootstrapsWhileAControlPlaneIsUnclear(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	f.Sim.Machine("cp-3").SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"ServiceList": codes.Internal}})
	var out bytes.Buffer
	seq := bootstrap.New(bootstrap.Options{
		InventoryPath: f.Inventory.Path, Talosconfig: f.Talosconfig(t), Overrides: f.Overrides, KubeconfigOut: t.TempDir() + "/kubeconfig",
		SkipNodes: true, Timeout: 2 * time.Second, Wait: 2 * time.Second, Poll: 50 * time.Millisecond, EtcdSettle: 100 * time.Millisecond, Out: &out,
	})
	err := seq.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cp-3") {
		t.Fatalf("err = %v, want a refusal naming cp-3\n%s", err, out.String())
	}
	for _, m := range f.Sim.Machines() {
		if n := m.Calls("Bootstrap"); n != 0 {
			t.Errorf("%s: %d Bootstrap calls, want none while cp-3 is unclear", m.Name(), n)
		}
	}
}

// From maintenance mode: control planes come back at stage booting (machined's
// boot sequence waits for etcd, v1alpha1_sequencer_tasks.go StartAllServices),
// the sequence accepts that, lists every etcd data directory empty and
// watches every etcd wait for EtcdSettle, then bootstraps cp-1 once and reaches a healthy three-member etcd; afterwards
// the control planes are running.
func TestRunFromMaintenanceAcceptsBootingControlPlanes(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}})
	var out bytes.Buffer
	seq := newSequence(t, f, &out, t.TempDir()+"/kubeconfig")
	if err := seq.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"cp-1: answers on mTLS and runs its desired config, stage booting",
		"worker-1: answers on mTLS and runs its desired config, stage running",
		"watching it hold for 200ms",
		"its data directory /var/lib/etcd is empty",
		`service etcd Preparing ("Running pre state"`,
		"bootstrapped etcd on cp-1",
		"etcd healthy, members [cp-1 cp-2 cp-3]",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// cp-1 may refuse while its CRI comes up (FailedPrecondition, retried);
	// no other machine is ever asked
	for _, m := range f.Sim.Machines() {
		if n := m.Calls("Bootstrap"); (m.Name() == "cp-1") != (n > 0) {
			t.Errorf("%s: %d Bootstrap calls", m.Name(), n)
		}
	}
	for _, m := range f.Inventory.ControlPlanes() {
		if o := talosapi.Observe(context.Background(), f.Dialer, m); o.Stage != "running" {
			t.Errorf("%s after bootstrap: stage %s, want running", m.Name, o.Stage)
		}
	}
}

// A second Bootstrap on a control plane that has not joined yet would start a
// second etcd cluster (sim TestBootstrapTwiceSplitsEtcd, as Talos does).
// With cp-1 bootstrapped by hand and cp-2 and cp-3 still joining, the
// sequence sees etcd exists, bootstraps nothing, and waits for the joins.
func TestNeverBootstrapsAControlPlaneStillJoining(t *testing.T) {
	f := simtest.Start(t, simtest.Options{EtcdJoinDelay: 1500 * time.Millisecond})
	c, err := f.Dialer.Client(context.Background(), f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Bootstrap(context.Background(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	seq := newSequence(t, f, &out, t.TempDir()+"/kubeconfig")
	if err := seq.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "nothing to bootstrap") || !strings.Contains(out.String(), "etcd healthy, members [cp-1 cp-2 cp-3]") {
		t.Errorf("output:\n%s", out.String())
	}
	for _, name := range []string{"cp-2", "cp-3"} {
		if n := f.Sim.Machine(name).Calls("Bootstrap"); n != 0 {
			t.Errorf("%s: %d Bootstrap calls while it joined: etcd would be split", name, n)
		}
	}
}
