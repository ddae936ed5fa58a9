//go:build talosctl

package sim_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/talos"
)

// The real talosctl v1.13.9 against a fleet on Talos v1.13.9 (the v1.14
// homelab whose machines still run 1.13, each with its config of 1.13's
// contract and Kubernetes 1.36.3, etcd bootstrapped), through cp-1's
// apid: version, get machineconfig, get extensions, apply-config
// --dry-run, etcd members and upgrade, as TestRealTalosctl114 runs
// v1.14.1's.
func TestRealTalosctl113(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.13.9", DesiredKubernetesVersion: "v1.36.3", Bootstrap: true})
	run := talosctlAt(t, "v1.13.9", f, "cp-1", "cp-1")
	talosctl := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	expect := func(out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}
	names := []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}

	// Version through apid's fan-out (MachineService fans out on 1.13).
	client, server, _ := strings.Cut(talosctl("-n", strings.Join(names, ","), "version"), "Server:")
	expect(client, "Tag:         v1.13.9")
	for _, n := range names {
		expect(server, "NODE:        "+n)
	}
	if c := strings.Count(server, "Tag:         v1.13.9"); c != len(names) {
		t.Errorf("%d servers on v1.13.9, want %d:\n%s", c, len(names), server)
	}
	expect(server, "Go version:  go1.26.6") // machinery v1.13.9 constants.GoVersion

	// The active config is 1.13's contract: the hostname a HostnameConfig
	// document (1.12), the Kubernetes settings still v1alpha1 fields (no
	// KubeletConfig document before 1.14).
	out := talosctl("get", "machineconfig", "v1alpha1", "-o", "yaml")
	expect(out, "id: v1alpha1", "kind: HostnameConfig", "hostname: cp-1", "kind: ResolverConfig", "kind: LinkConfig", "kind: TimeSyncConfig", "image: ghcr.io/siderolabs/kubelet:v1.36.3")
	if strings.Contains(out, "kind: KubeletConfig") {
		t.Errorf("a 1.13 machine runs a 1.14 KubeletConfig document:\n%s", out)
	}

	// Extensions: the machines were installed from the inventory's
	// installer, Image Factory's empty schematic (the v1.14 homelab's
	// default), whose only extension is the Factory's virtual "schematic"
	// one; 1.13 has no ImageFactorySchematic resource.
	if out := talosctl("get", "extensions"); !hasRow(out, "cp-1", "runtime", "ExtensionStatus", "0", "1", "schematic", talos.EmptySchematicID) {
		t.Errorf("extensions:\n%s", out)
	}

	// 1.13 registers no ImageFactorySchematic (rdversions.go): talosctl
	// finds no definition of the kind (ResolveResourceKind).
	if out, err := run("get", "imagefactoryschematic"); err == nil || !strings.Contains(out, "not registered") {
		t.Errorf("get imagefactoryschematic on 1.13: %v\n%s", err, out)
	}

	// etcd: the three control planes are voting members.
	out = talosctl("etcd", "members")
	for _, n := range names[:3] {
		if !hasRow(out, "cp-1", n, "https://127.0.0.1:2380", "https://127.0.0.1:2379", "false") {
			t.Errorf("etcd members lacks %s:\n%s", n, out)
		}
	}

	// A dry run of a changed time server: a TimeSyncConfig document
	// applies live on 1.13 (AUTO resolves to NO_REBOOT), nothing written.
	edited := bytes.Replace(f.Started["cp-1"], []byte("time.cloudflare.com"), []byte("pool.ntp.org"), 1)
	if bytes.Equal(edited, f.Started["cp-1"]) {
		t.Fatal("cp-1's config names no time.cloudflare.com")
	}
	cfgPath := filepath.Join(t.TempDir(), "cp-1.yaml")
	if err := os.WriteFile(cfgPath, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	cp1 := f.Sim.Machine("cp-1")
	applies := cp1.Calls("ApplyConfiguration")
	out = talosctl("apply-config", "--dry-run", "-f", cfgPath)
	if !strings.HasPrefix(out, "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n") {
		t.Errorf("dry run summary:\n%s", out)
	}
	expect(out, "kind: TimeSyncConfig", "-        - time.cloudflare.com\n+        - pool.ntp.org\n")
	if n := cp1.Calls("ApplyConfiguration") - cp1.Calls("ApplyConfiguration(dry-run)") - applies; n != 0 {
		t.Errorf("the dry run wrote: %d applies", n)
	}

	// Upgrade with talosctl v1.13.9's default installer,
	// ghcr.io/siderolabs/installer:v1.13.9: the pull, then
	// LifecycleService.Upgrade (the node is past 1.13.0-alpha.2), then
	// Reboot. --wait watches MachineService.Events, which the sim does
	// not serve.
	w1 := f.Sim.Machine("worker-1")
	reboots := w1.Observe().Reboots
	out = talosctl("-n", "worker-1", "upgrade", "--image", "ghcr.io/siderolabs/installer:v1.13.9", "--drain=false", "--wait=false")
	expect(out, "worker-1: pulled image ghcr.io/siderolabs/installer@sha256:", "running Talos installer v1.13.9", "installation of v1.13.9 complete")
	for call, want := range map[string]int{"LifecycleService.Upgrade": 1, "MachineService.Upgrade": 0, "Reboot": 1} {
		if n := w1.Calls(call); n != want {
			t.Errorf("worker-1 had %d %s calls, want %d", n, call, want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		o := w1.Observe()
		out, err := run("-n", "worker-1", "version")
		_, server, _ := strings.Cut(out, "Server:")
		if o.Reboots > reboots && !o.Down && err == nil && strings.Contains(server, "Tag:         v1.13.9") {
			if o.InstallImage != "ghcr.io/siderolabs/installer:v1.13.9" {
				t.Errorf("worker-1 boots from %q, want ghcr.io/siderolabs/installer:v1.13.9", o.InstallImage)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker-1 did not come back from its upgrade (%+v): %v\n%s", o, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
