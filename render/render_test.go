package render_test

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"

	"devata.dev/devata/internal/configview"
	"devata.dev/devata/internal/golden"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/redact"
	"devata.dev/devata/render"
)

const exampleInventory = "../examples/homelab/inventory.yaml"

func loadFixture(t testing.TB) (*inventory.Inventory, *secrets.Bundle) {
	t.Helper()
	inv, err := inventory.Load(exampleInventory)
	if err != nil {
		t.Fatal(err)
	}
	b, err := render.LoadSecrets("testdata/secrets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return inv, b
}

func TestRenderExample(t *testing.T) {
	inv, b := loadFixture(t)
	out, err := render.Render(inv, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(inv.Machines) {
		t.Fatalf("rendered %d configs for %d machines", len(out), len(inv.Machines))
	}
	for _, r := range out {
		m := inv.Machine(r.Machine)
		warnings, err := render.Validate(r.Config)
		if err != nil {
			t.Errorf("%s: rendered config does not validate: %v", r.Machine, err)
		}
		if len(warnings) > 0 {
			t.Errorf("%s: validation warnings: %v", r.Machine, warnings)
		}
		cfg, err := configloader.NewFromBytes(r.Config)
		if err != nil {
			t.Fatal(err)
		}
		raw := cfg.RawV1Alpha1()
		if got := raw.MachineConfig.MachineNetwork.NetworkHostname; got != m.Name {
			t.Errorf("%s: hostname %q", r.Machine, got)
		}
		if got := cfg.Machine().Type().String(); got != m.Role {
			t.Errorf("%s: type %q, want %q", r.Machine, got, m.Role)
		}
		if cni := configview.CNI(cfg); cni != "none" {
			t.Errorf("%s: cni %q, want none", r.Machine, cni)
		}
		if configview.KubeProxy(cfg) {
			t.Errorf("%s: kube-proxy not disabled", r.Machine)
		}
		for k, v := range m.Labels {
			if got := cfg.K8sNodeConfig().Labels()[k]; got != v {
				t.Errorf("%s: label %s=%q, want %q", r.Machine, k, got, v)
			}
		}
		if m.InstallDisk != "" {
			if got := cfg.Machine().Install().Disk(); got != m.InstallDisk {
				t.Errorf("%s: install disk %q, want %q", r.Machine, got, m.InstallDisk)
			}
		}
		if !slices.Contains(r.Patches, "patches/common.yaml") {
			t.Errorf("%s: common patch not reported: %v", r.Machine, r.Patches)
		}
		if cfg.NetworkTimeSyncConfig().Servers()[0] != "time.cloudflare.com" {
			t.Errorf("%s: common patch not applied", r.Machine)
		}
		var vols []string
		for _, doc := range cfg.Documents() {
			if uv, ok := doc.(*block.UserVolumeConfigV1Alpha1); ok {
				vols = append(vols, uv.Name())
			}
		}
		if len(vols) != len(m.Volumes) {
			t.Errorf("%s: %d UserVolumeConfig documents, want %d", r.Machine, len(vols), len(m.Volumes))
		}
		mounts := cfg.K8sKubeletConfig().ExtraMounts()
		for _, v := range m.Volumes {
			found := false
			for _, mnt := range mounts {
				if mnt.Destination == "/var/mnt/"+v.Name && slices.Equal(mnt.Options, []string{"bind", "rshared", "rw"}) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no rshared rw kubelet mount for volume %s: %+v", r.Machine, v.Name, mounts)
			}
		}
	}
	if sans := certSANsOf(t, out, "cp-1"); !slices.Contains(sans, "cp-1.homelab.internal") {
		t.Errorf("cp-1: machine patch not applied: certSANs %v", sans)
	}
	if slices.Contains(certSANsOf(t, out, "cp-2"), "cp-1.homelab.internal") {
		t.Errorf("cp-2 got cp-1's patch")
	}
}

func certSANsOf(t *testing.T, out []*render.Rendered, name string) []string {
	t.Helper()
	for _, r := range out {
		if r.Machine == name {
			cfg, err := configloader.NewFromBytes(r.Config)
			if err != nil {
				t.Fatal(err)
			}
			return cfg.Machine().Security().CertSANs()
		}
	}
	t.Fatalf("no config for %s", name)
	return nil
}

func TestRenderIsDeterministic(t *testing.T) {
	inv, b := loadFixture(t)
	a, err := render.Render(inv, b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := render.Render(inv, b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if !bytes.Equal(a[i].Config, c[i].Config) {
			t.Errorf("%s: two renders differ", a[i].Machine)
		}
	}
}

// The goldens hold the example's rendered configs with every secret redacted.
func TestRenderGolden(t *testing.T) {
	inv, b := loadFixture(t)
	out, err := render.Render(inv, b)
	if err != nil {
		t.Fatal(err)
	}
	secretValues := simtest.BundleSecrets(b)
	for _, r := range out {
		red, _, err := redact.Config(r.Config)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secretValues {
			if bytes.Contains(red, []byte(s)) {
				t.Fatalf("%s: redacted config still holds a secret of the bundle", r.Machine)
			}
		}
		golden.Assert(t, filepath.Join("testdata", "golden", r.Machine+".yaml"), red)
	}
}
