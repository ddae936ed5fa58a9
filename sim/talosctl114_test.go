//go:build talosctl

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

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/talos"
	"devata.dev/devata/internal/testenv"
)

// factoryInstaller is the Image Factory's metal installer for Talos
// v1.14.1 with the empty schematic: talosctl v1.14.1's default --image
// (images.InstallerImageRepository("metal")), since Talos publishes no
// installer on ghcr.io from 1.14 on.
const factoryInstaller = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// talosctlAt is the real talosctl of version and a talosconfig for f that
// reaches the fleet through endpoint (a machine's name) and targets node;
// run runs it with a 30 second deadline and returns its combined output.
func talosctlAt(t *testing.T, version string, f *simtest.Fleet, endpoint, node string) (run func(args ...string) (string, error)) {
	t.Helper()
	bin, err := testenv.TalosctlAt(context.Background(), version, tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	tc := f.Talosconfig(t)
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints = []string{f.Overrides[endpoint]}
	ctx.Nodes = []string{node}
	tcPath := filepath.Join(t.TempDir(), "talosconfig")
	if err := tc.Save(tcPath); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, append([]string{"--talosconfig", tcPath}, args...)...).CombinedOutput()
		return string(out), err
	}
}

// hasRow reports whether a line of a talosctl table holds cells, in
// order, each a whole whitespace-separated field.
func hasRow(out string, cells ...string) bool {
	for line := range strings.Lines(out) {
		fields, i := strings.Fields(line), 0
		for _, f := range fields {
			if i < len(cells) && f == cells[i] {
				i++
			}
		}
		if i == len(cells) {
			return true
		}
	}
	return false
}

// The real talosctl v1.14.1 against a fleet on Talos v1.14.1
// (examples/homelab-v1.14: three control planes, two workers with a
// Longhorn volume, etcd bootstrapped), through cp-1's apid. Every command's
// output is held to what Talos v1.14.1 answers; the few the sim does not
// serve are held to the sim's error, with the reason.
func TestRealTalosctl114(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.14.1", Bootstrap: true})
	run := talosctlAt(t, "v1.14.1", f, "cp-1", "cp-1")
	talosctl := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// fails runs a command that must fail and returns its output.
	fails := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err == nil {
			t.Errorf("talosctl %s succeeded:\n%s", strings.Join(args, " "), out)
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
	expectRows := func(out string, rows ...[]string) {
		t.Helper()
		for _, r := range rows {
			if !hasRow(out, r...) {
				t.Errorf("output lacks a row %q:\n%s", r, out)
			}
		}
	}
	names := []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}

	// Version through apid's fan-out: one reply per node, each its own.
	client, server, _ := strings.Cut(talosctl("-n", strings.Join(names, ","), "version"), "Server:")
	expect(client, "Tag:         v1.14.1")
	for _, n := range names {
		expect(server, "NODE:        "+n)
	}
	if c := strings.Count(server, "Tag:         v1.14.1"); c != len(names) {
		t.Errorf("%d servers on v1.14.1, want %d:\n%s", c, len(names), server)
	}
	expectRows(talosctl("get", "version"), []string{"cp-1", "runtime", "Version", "version", "v1.14.1"})

	// Cluster discovery through the DiscoveryServiceConfig and
	// DiscoveryIdentityConfig documents 1.14 renders (no v1alpha1
	// cluster.discovery): every machine is a Member.
	out := talosctl("get", "members")
	for _, n := range names {
		typ := "worker"
		if strings.HasPrefix(n, "cp-") {
			typ = "controlplane"
		}
		expectRows(out, []string{"cp-1", "cluster", "Member", n, n, typ, "Talos", "(v1.14.1)"})
	}

	// etcd: the three control planes are voting members; a worker has no
	// etcd API (machinehelper.CheckControlplane).
	out = talosctl("etcd", "members")
	for _, n := range names[:3] {
		expectRows(out, []string{"cp-1", n, "https://127.0.0.1:2380", "https://127.0.0.1:2379", "false"})
	}
	if strings.Contains(out, "worker") {
		t.Errorf("etcd members lists a worker:\n%s", out)
	}
	expect(fails("-n", "worker-1", "etcd", "members"),
		"error from node worker-1: rpc error: code = Unimplemented desc = member list is only available on control plane nodes")
	expect(fails("bootstrap"), "error executing bootstrap: rpc error: code = AlreadyExists desc = etcd data directory is not empty")

	// The boot sequence finished, but the machine is not ready: with
	// cni: none no CNI runs, so its Node is never Ready.
	expectRows(talosctl("get", "machinestatus"), []string{"cp-1", "runtime", "MachineStatus", "machine", "running", "false"})
	out = talosctl("service")
	for _, svc := range []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "trustd"} {
		expectRows(out, []string{"cp-1", svc, "Running", "OK"})
	}
	expect(talosctl("service", "etcd"), "ID                    etcd", "STATE                 Running", "HEALTH                OK")
	out = talosctl("get", "staticpodstatus")
	for _, p := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		expectRows(out, []string{"cp-1", "k8s", "StaticPodStatus", "kube-system/" + p + "-cp-1", "True"})
	}

	// The active config holds 1.14's documents, its spec as YAML (the yaml
	// fork's MarshalYAMLBytes).
	expect(talosctl("get", "machineconfig", "v1alpha1", "-o", "yaml"),
		"id: v1alpha1", "kind: KubeletConfig", "image: ghcr.io/siderolabs/kubelet:v1.37.0", "kind: HostnameConfig", "hostname: cp-1",
		"kind: ResolverConfig", "kind: LinkConfig", "kind: TimeSyncConfig")

	// Storage: the system disk, and worker-1's Longhorn user volume.
	expectRows(talosctl("get", "systemdisk"), []string{"cp-1", "runtime", "SystemDisk", "system-disk", "nvme0n1"})
	expectRows(talosctl("get", "disks"), []string{"cp-1", "runtime", "Disk", "nvme0n1", "275", "GB"})
	expectRows(talosctl("-n", "worker-1", "get", "volumestatus"),
		[]string{"worker-1", "runtime", "VolumeStatus", "EPHEMERAL", "partition", "ready", "/dev/nvme0n1p4"},
		[]string{"worker-1", "runtime", "VolumeStatus", "u-longhorn", "partition", "ready", "/dev/sdb1"})
	expectRows(talosctl("-n", "worker-1", "mounts"), []string{"worker-1", "/dev/sdb1", "/var/mnt/longhorn"})

	// Extensions (sim/schematic.go): Talos 1.14's default installer is
	// Image Factory's empty schematic, whose only extension is the
	// Factory's virtual "schematic" one, its version the schematic id;
	// ImageFactorySchematic and the kernel command line say the same.
	expectRows(talosctl("get", "extensions"), []string{"cp-1", "runtime", "ExtensionStatus", "0", "1", "schematic", talos.EmptySchematicID})
	expectRows(talosctl("get", "imagefactoryschematic"), []string{"cp-1", "runtime", "ImageFactorySchematic", "image-factory-schematic", "1", talos.EmptySchematicID})
	expectRows(talosctl("get", "kernelcmdline"), []string{"cp-1", "runtime", "KernelCmdline", "cmdline", "1", "talos.platform=metal"})

	// talosctl get resolves a type through the ResourceDefinitions in meta
	// (client.ResolveResourceKind): those of every type read above.
	out = talosctl("get", "rd")
	for _, rd := range []string{"versions.runtime.talos.dev", "members.cluster.talos.dev", "machinestatuses.runtime.talos.dev",
		"services.v1alpha1.talos.dev", "staticpodstatuses.kubernetes.talos.dev", "machineconfigs.config.talos.dev",
		"systemdisks.block.talos.dev", "disks.block.talos.dev", "volumestatuses.block.talos.dev"} {
		expectRows(out, []string{"cp-1", "meta", "ResourceDefinition", rd})
	}

	kc := filepath.Join(t.TempDir(), "kubeconfig")
	talosctl("kubeconfig", kc)
	if data, err := os.ReadFile(kc); err != nil || !bytes.Contains(data, []byte("server: https://10.20.0.10:6443")) {
		t.Errorf("kubeconfig: %v\n%s", err, data)
	}

	// Dry runs (v1alpha1_server.go ApplyConfiguration): 1.14 applies every
	// change live, so AUTO is NO_REBOOT; nothing is written; the diff is
	// configdiff's of the documents. (talosctl v1.14.1 no longer offers
	// --mode reboot, which a configured 1.14 refuses.)
	edited := bytes.Replace(f.Desired["cp-1"], []byte("time.cloudflare.com"), []byte("pool.ntp.org"), 1)
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
	expect(talosctl("apply-config", "--dry-run", "--mode", "staged", "-f", cfgPath),
		"Dry run summary:\nStaged configuration to be applied after the next reboot (skipped in dry-run).\nConfig diff:\n\n")
	if n := cp1.Calls("ApplyConfiguration") - cp1.Calls("ApplyConfiguration(dry-run)") - applies; n != 0 {
		t.Errorf("the dry runs wrote: %d applies", n)
	}

	// Upgrade from ghcr.io is refused by the pull (ImageService.Pull), as
	// Talos 1.14 publishes no installer there; no installer runs.
	w1 := f.Sim.Machine("worker-1")
	out = fails("-n", "worker-1", "upgrade", "--image", "ghcr.io/siderolabs/installer:v1.14.1", "--drain=false", "--wait=false")
	expect(out, `error pulling upgrade image: error from node worker-1: rpc error: code = NotFound desc = error pulling image: failed to pull image "ghcr.io/siderolabs/installer:v1.14.1": failed to resolve reference "ghcr.io/siderolabs/installer:v1.14.1": ghcr.io/siderolabs/installer:v1.14.1: not found`)
	if n := w1.Calls("LifecycleService.Upgrade"); n != 0 {
		t.Errorf("an installer ran after a failed pull: %d", n)
	}

	// Upgrade with talosctl's default, the Image Factory installer: the
	// pull, LifecycleService.Upgrade (the node is past 1.13.0-alpha.2, so
	// talosctl does not fall back to MachineService.Upgrade), then
	// Reboot. --drain needs a Kubernetes API, which this fleet has not;
	// --wait watches MachineService.Events, which the sim does not serve.
	reboots := w1.Observe().Reboots
	out = talosctl("-n", "worker-1", "upgrade", "--drain=false", "--wait=false")
	expect(out, "worker-1: pulled image "+factoryInstaller+"@sha256:", "worker-1: Exit code: 0", "worker-1: upgrade completed")
	expect(out, "running Talos installer v1.14.1", "installation of v1.14.1 complete")
	for call, want := range map[string]int{"ImageService.Pull": 2, "LifecycleService.Upgrade": 1, "MachineService.Upgrade": 0, "Reboot": 1} {
		if n := w1.Calls(call); n != want {
			t.Errorf("worker-1 had %d %s calls, want %d", n, call, want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		o := w1.Observe()
		out, err := run("-n", "worker-1", "version")
		_, server, _ := strings.Cut(out, "Server:")
		if o.Reboots > reboots && !o.Down && err == nil && strings.Contains(server, "Tag:         v1.14.1") {
			if !strings.HasPrefix(o.InstallImage, factoryInstaller+":v1.14.1") {
				t.Errorf("worker-1 boots from %q, want the factory installer", o.InstallImage)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker-1 did not come back from its upgrade (%+v): %v\n%s", o, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// TimeService (timeapi.go): the config's first time server, whose
	// time is the machine's own; etcd's alarms: none raised, so talosctl
	// prints nothing, not even its header (talos/etcd.go etcdAlarmListCmd
	// writes the header with the first alarm).
	if out := talosctl("time"); !hasRow(out, "cp-1", "time.cloudflare.com") {
		t.Errorf("time:\n%s", out)
	}
	if out := talosctl("etcd", "alarm", "list"); out != "" {
		t.Errorf("etcd alarm list:\n%q", out)
	}

	// image list (ImageService.List, the CRI's k8s.io namespace by
	// default; --namespace system: the kubelet's and etcd's images) and
	// containers (MachineService.Containers: apid and trustd in the system
	// containerd; --namespace cri: each static pod's sandbox and container), as
	// machined lists them (sim/imagelist.go).
	out = talosctl("image", "list")
	expectRows(out, []string{"cp-1", "registry.k8s.io/kube-apiserver:v1.37.0"}, []string{"cp-1", "registry.k8s.io/pause:3.10.2"})
	out = talosctl("image", "list", "--namespace", "system")
	expectRows(out, []string{"cp-1", "ghcr.io/siderolabs/kubelet:v1.37.0"})
	expect(out, "registry.k8s.io/etcd:", "sha256:")
	expectRows(talosctl("containers"), []string{"cp-1", "system", "apid", "RUNNING"}, []string{"cp-1", "system", "trustd", "RUNNING"})
	expectRows(talosctl("containers", "--namespace", "cri"),
		[]string{"cp-1", "k8s.io", "kube-system/kube-apiserver-cp-1", "registry.k8s.io/pause:3.10.2", "SANDBOX_READY"},
		[]string{"cp-1", "k8s.io", "└─", "registry.k8s.io/kube-apiserver:v1.37.0", "CONTAINER_RUNNING"})
}
