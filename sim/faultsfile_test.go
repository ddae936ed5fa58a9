package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

func TestFaultsFileDrivesTheFleet(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "faults.yaml")
	if err := os.WriteFile(filepath.Join(dir, "edited.yaml"), f.Desired["cp-2"], 0o600); err != nil {
		t.Fatal(err)
	}
	// Written whole (temp file, rename), so that no look sees half a file;
	// in-place writes are covered by the watcher's two-look rule, best effort.
	write := func(s string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(`
worker-1: {kubeletUnhealthy: true, errorCodes: {ApplyConfiguration: PermissionDenied}, installerPullDelay: 2m}
cp-2: {unreachable: true, latency: 150ms, driftedConfigFile: edited.yaml, talosVersion: v1.10.6}
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 10)
	go f.Sim.WatchFaultsFile(ctx, path, 20*time.Millisecond, func(err error) { errs <- err })

	waitUntil(t, func() bool {
		return f.Sim.Machine("worker-1").Faults().KubeletUnhealthy && f.Sim.Machine("cp-2").Faults().Unreachable
	})
	w1 := f.Sim.Machine("worker-1").Faults()
	if w1.ErrorCodes["ApplyConfiguration"] != codes.PermissionDenied {
		t.Errorf("worker-1 error codes %v", w1.ErrorCodes)
	}
	if w1.InstallerPullDelay != 2*time.Minute {
		t.Errorf("worker-1 installer pull delay %s, want 2m", w1.InstallerPullDelay)
	}
	cp2 := f.Sim.Machine("cp-2").Faults()
	if !cp2.Unreachable || cp2.Latency != 150*time.Millisecond || cp2.TalosVersion != "v1.10.6" || len(cp2.DriftedConfig) == 0 {
		t.Errorf("cp-2 faults %+v", cp2)
	}

	// The file is the whole fault state: dropping a machine clears its faults.
	time.Sleep(10 * time.Millisecond) // a different mtime on coarse filesystems
	write("worker-1: {unreachable: true}\n")
	// ApplyFaults sets machine after machine: wait for both to be seen.
	waitUntil(t, func() bool {
		return !f.Sim.Machine("cp-2").Faults().Unreachable && f.Sim.Machine("worker-1").Faults().Unreachable
	})
	if got := f.Sim.Machine("worker-1").Faults(); !got.Unreachable || got.KubeletUnhealthy || got.ErrorCodes != nil {
		t.Errorf("worker-1 faults after edit %+v", got)
	}

	// A bad file is reported and changes nothing.
	write("worker-9: {unreachable: true}\n")
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "worker-9") {
			t.Errorf("error %v does not name the unknown machine", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a faults file naming an unknown machine was not reported")
	}
	if !f.Sim.Machine("worker-1").Faults().Unreachable {
		t.Error("a bad faults file changed the faults")
	}
	write("worker-1: {unreachable: yes-please}\n")
	select {
	case err := <-errs:
		if err == nil {
			t.Error("a malformed faults file was reported without an error")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a malformed faults file was not reported")
	}

	// Removing the file clears every fault.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return !f.Sim.Machine("worker-1").Faults().Unreachable })
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFaultsFileCiliumFaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults.yaml")
	data := `cp-3:
  ciliumAgentNotReady: true
  ciliumControllersFailing: [cilium-health-ep]
  ciliumBackendsMissing: [default/kubernetes]
  ciliumFrontendsStuck: {default/kubernetes: "map is full"}
  ciliumNoShell: true
  ciliumPodNetworkBroken: true
  ciliumStatusReply: '{"kube-proxy-replacement": {"mode": "Strict"}}'
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := sim.LoadFaultsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := all["cp-3"]
	if !got.CiliumAgentNotReady || !got.CiliumNoShell || !got.CiliumPodNetworkBroken ||
		!slices.Equal(got.CiliumControllersFailing, []string{"cilium-health-ep"}) ||
		!slices.Equal(got.CiliumBackendsMissing, []string{"default/kubernetes"}) ||
		got.CiliumFrontendsStuck["default/kubernetes"] != "map is full" ||
		got.CiliumStatusReply != `{"kube-proxy-replacement": {"mode": "Strict"}}` {
		t.Errorf("cilium faults not read: %+v", got)
	}
}

// Every switch a faults file can turn on reaches the machine's Faults: a
// file that sets each bool of FaultSpec true loads as Faults with the
// field of the same name true (a key added to FaultSpec but not to
// LoadFaultsFile's mapping fails here), and every Faults field is in
// FaultSpec unless it is one of the few only Go sets.
func TestFaultsFileReachesEveryFault(t *testing.T) {
	goOnly := map[string]string{
		"DriftedConfig":        "the file names a config file instead (driftedConfigFile)",
		"EtcdSnapshotData":     "bytes to stream in place of a snapshot: the file has the corrupting switches instead",
		"UpgradeImagesMissing": "not in the file yet: only Go tests set it",
		"UpgradeBootFails":     "not in the file yet: only Go tests set it",
	}
	spec, faults := reflect.TypeFor[sim.FaultSpec](), reflect.TypeFor[sim.Faults]()
	for i := range faults.NumField() {
		name := faults.Field(i).Name
		if _, ok := spec.FieldByName(name); !ok && goOnly[name] == "" {
			t.Errorf("Faults.%s has no faults-file key (FaultSpec): add one, or say why only Go sets it", name)
		}
	}

	var doc strings.Builder
	doc.WriteString("m:\n")
	var bools []string
	for i := range spec.NumField() {
		f := spec.Field(i)
		if f.Type.Kind() != reflect.Bool {
			continue
		}
		bools = append(bools, f.Name)
		doc.WriteString("  " + f.Tag.Get("yaml") + ": true\n")
	}
	path := filepath.Join(t.TempDir(), "faults.yaml")
	if err := os.WriteFile(path, []byte(doc.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := sim.LoadFaultsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(got["m"])
	for _, name := range bools {
		if f := v.FieldByName(name); !f.IsValid() || !f.Bool() {
			t.Errorf("%s: true in the faults file, not in the machine's Faults", name)
		}
	}
	if len(bools) < 10 {
		t.Errorf("only %d bool keys found in FaultSpec: the test reads the wrong type", len(bools))
	}
}
