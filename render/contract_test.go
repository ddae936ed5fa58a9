package render_test

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/configview"
	"devata.dev/devata/internal/talos"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// Each config contract keeps devata's settings where that Talos reads
// them (bootstrap/contract.go): the homelab renders for Talos 1.11, 1.12
// and 1.13 from v1alpha1 patches, and for 1.14 from the documents its
// operators write (examples/homelab-v1.14). Every config validates with
// machinery, holds only document kinds its Talos registers, and declares
// the inventory the same way whatever the contract: hostname, no CNI,
// kube-proxy off, labels, the install disk, volumes and their kubelet
// mounts.
func TestRenderForEachContract(t *testing.T) {
	_, b := loadFixture(t)
	for _, c := range []struct {
		example, talos, kube string
	}{
		{"../examples/homelab/inventory.yaml", "v1.11.0", "v1.34.1"},
		{"../examples/homelab/inventory.yaml", "v1.12.4", "v1.35.2"},
		{"../examples/homelab/inventory.yaml", "v1.13.9", "v1.36.3"},
		{"../examples/homelab-v1.14/inventory.yaml", "v1.14.1", "v1.37.0"},
	} {
		t.Run(c.talos, func(t *testing.T) {
			inv, err := inventory.Load(c.example)
			if err != nil {
				t.Fatal(err)
			}
			inv.Cluster.TalosVersion, inv.Cluster.KubernetesVersion = c.talos, c.kube
			inv.Cluster.InstallImage = talos.DefaultInstallImage(c.talos)
			out, err := render.Render(inv, b)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := talos.ReleaseOf(c.talos)
			for _, r := range out {
				m := inv.Machine(r.Machine)
				if _, err := render.Validate(r.Config); err != nil {
					t.Errorf("%s: does not validate: %v", r.Machine, err)
				}
				cfg, err := configloader.NewFromBytes(r.Config)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range cfg.Documents() {
					if since, ok := talos.DocumentKinds[d.Kind()]; ok && since > rel.Minor {
						t.Errorf("%s: a %s document, which Talos 1.%d refuses (it came with 1.%d)", r.Machine, d.Kind(), rel.Minor, since)
					}
				}
				raw := cfg.RawV1Alpha1()
				if got := configview.Hostname(cfg); got != m.Name {
					t.Errorf("%s: hostname %q", r.Machine, got)
				}
				if legacy := raw.MachineConfig.MachineNetwork; rel.Minor >= 12 && legacy != nil && legacy.NetworkHostname != "" { //nolint:staticcheck // what is checked is that it is not there
					t.Errorf("%s: machine.network.hostname beside a HostnameConfig: Talos 1.%d refuses both", r.Machine, rel.Minor)
				}
				if cni := configview.CNI(cfg); cni != "none" {
					t.Errorf("%s: CNI %q", r.Machine, cni)
				}
				if m.IsControlPlane() && configview.KubeProxy(cfg) {
					t.Errorf("%s: kube-proxy on", r.Machine)
				}
				labels := cfg.K8sNodeConfig().Labels()
				for k, v := range m.Labels {
					if labels[k] != v {
						t.Errorf("%s: label %s=%q, want %q", r.Machine, k, labels[k], v)
					}
				}
				if m.IsControlPlane() {
					if _, ok := labels["node-role.kubernetes.io/control-plane"]; !ok {
						t.Errorf("%s: lost the control-plane label: %v", r.Machine, slices.Collect(maps.Keys(labels)))
					}
				}
				install := installDiskOf(cfg)
				if want := m.InstallDisk; want != "" && !strings.Contains(install, want) {
					t.Errorf("%s: install disk %q, want %s", r.Machine, install, want)
				}
				if m.InstallDiskSelector != nil && install == "" {
					t.Errorf("%s: no install disk selector", r.Machine)
				}
				if img := configview.InstallImage(cfg); img != inv.Cluster.InstallImage {
					t.Errorf("%s: installer %q, want %s", r.Machine, img, inv.Cluster.InstallImage)
				}
				var vols int
				for _, d := range cfg.Documents() {
					if _, ok := d.(*block.UserVolumeConfigV1Alpha1); ok {
						vols++
					}
				}
				if vols != len(m.Volumes) {
					t.Errorf("%s: %d volumes, want %d", r.Machine, vols, len(m.Volumes))
				}
				mounts := cfg.K8sKubeletConfig().ExtraMounts()
				for _, v := range m.Volumes {
					if !slices.ContainsFunc(mounts, func(mt specs.Mount) bool {
						return mt.Destination == "/var/mnt/"+v.Name && slices.Contains(mt.Options, "rshared")
					}) {
						t.Errorf("%s: no rshared kubelet mount for %s: %v", r.Machine, v.Name, mounts)
					}
				}
				if want := "ghcr.io/siderolabs/kubelet:" + c.kube; cfg.K8sKubeletConfig().Image() != want {
					t.Errorf("%s: kubelet %s, want %s", r.Machine, cfg.K8sKubeletConfig().Image(), want)
				}
			}
		})
	}
}

// installDiskOf is the install disk or selector as the contract keeps it.
func installDiskOf(cfg config.Config) string {
	if d := configview.InstallDisk(cfg); d != "" {
		return d
	}
	if e, err := cfg.Machine().Install().DiskMatchExpression(); err == nil && e != nil {
		return e.String()
	}
	return ""
}

// A patch may restate a machine's hostname, not change it: devata confirms
// each machine by its hostname before it writes.
func TestAPatchCannotRenameAMachine(t *testing.T) {
	_, b := loadFixture(t)
	dir := t.TempDir()
	for _, f := range []string{"inventory.yaml", "patches/common.yaml", "patches/controlplane.yaml", "patches/worker.yaml", "patches/cp-1.yaml"} {
		data, err := os.ReadFile(filepath.Join("../examples/homelab-v1.14", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "patches/cp-1.yaml" {
			data = []byte(strings.Replace(string(data), "hostname: cp-1", "hostname: db-7", 1))
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := inventory.Load(filepath.Join(dir, "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = render.Render(inv, b)
	if err == nil || !strings.Contains(err.Error(), `cp-1: its patches [patches/common.yaml patches/controlplane.yaml patches/cp-1.yaml] set the hostname to "db-7"`) {
		t.Errorf("a patch renaming cp-1: %v", err)
	}
}

// A machine still on an older release than the inventory's gets its
// config for that release (Desired.For), so a fleet half-way through an
// upgrade is never sent a document its Talos refuses; a patch that only
// the newer release can hold is refused for it, saying what to do.
func TestDesiredForAnOlderRelease(t *testing.T) {
	_, b := loadFixture(t)
	inv, err := inventory.Load("../examples/homelab-v1.14/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := render.DesiredOf(t.Context(), inv, b, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	m := inv.Machine("worker-1")
	target, err := d.Config(m)
	if err != nil {
		t.Fatal(err)
	}
	for running, wantMinor := range map[string]int{"": 14, "v1.14.1": 14, "v1.15.0-beta.1": 14, "v1.13.9": 13, "v1.12.4": 12} {
		cfg, err := d.For(m, running)
		if err != nil {
			t.Fatalf("For(%q): %v", running, err)
		}
		if wantMinor == 14 && !bytes.Equal(cfg, target) {
			t.Errorf("For(%q) is not the inventory's own config", running)
		}
		c, err := configloader.NewFromBytes(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range c.Documents() {
			if since := talos.DocumentKinds[doc.Kind()]; since > wantMinor {
				t.Errorf("For(%q): a %s document, which Talos 1.%d refuses", running, doc.Kind(), wantMinor)
			}
		}
		if configview.Hostname(c) != "worker-1" || configview.CNI(c) != "none" {
			t.Errorf("For(%q): hostname %q, CNI %q", running, configview.Hostname(c), configview.CNI(c))
		}
		if _, err := render.Validate(cfg); err != nil {
			t.Errorf("For(%q): does not validate: %v", running, err)
		}
	}

	// a 1.14 document in a patch: fine for 1.14, refused for a 1.13 machine
	dir := t.TempDir()
	path, err := examples.WriteExample(dir, examples.HomelabV114Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "patches/worker.yaml"), []byte("apiVersion: v1alpha1\nkind: KernelModuleConfig\nname: nbd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if inv, err = inventory.Load(path); err != nil {
		t.Fatal(err)
	}
	if d, err = render.DesiredOf(t.Context(), inv, b, nil, false); err != nil {
		t.Fatal(err)
	}
	_, err = d.For(inv.Machine("worker-1"), "v1.13.9")
	if err == nil || !strings.Contains(err.Error(), "worker-1 runs Talos 1.13, which refuses the KernelModuleConfig document its patches [patches/common.yaml patches/worker.yaml] write (it came with Talos 1.14): upgrade it first (devata upgrade)") {
		t.Errorf("a 1.14 document for a 1.13 machine: %v", err)
	}
}
