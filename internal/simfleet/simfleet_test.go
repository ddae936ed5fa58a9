package simfleet_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// homelab is the example inventory with the fixture bundle next to it.
func homelab(t *testing.T) (*inventory.Inventory, *secrets.Bundle) {
	t.Helper()
	dir := t.TempDir()
	path, err := examples.WriteHomelab(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(simtest.FixtureSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := render.LoadSecrets(inv.SecretsPath())
	if err != nil {
		t.Fatal(err)
	}
	return inv, bundle
}

func TestSpecs(t *testing.T) {
	inv, bundle := homelab(t)
	r, err := render.NewRenderer(inv, bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name        string
		opts        simfleet.Options
		maintenance []string
	}{
		{"configured", simfleet.Options{}, nil},
		{"one in maintenance", simfleet.Options{Maintenance: []string{"worker-2"}}, []string{"worker-2"}},
		{"all in maintenance", simfleet.Options{Maintenance: []string{simfleet.All}}, []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}},
		{"inventory addresses", simfleet.Options{InventoryAddresses: true}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			specs, err := simfleet.Specs(inv, r, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(specs) != len(inv.Machines) {
				t.Fatalf("%d specs for %d machines", len(specs), len(inv.Machines))
			}
			for i, s := range specs {
				m := &inv.Machines[i]
				if s.Name != m.Name || s.Role != m.Role || s.TalosVersion != inv.Cluster.TalosVersion {
					t.Errorf("spec %d: %s %s %s, want %s %s %s", i, s.Name, s.Role, s.TalosVersion, m.Name, m.Role, inv.Cluster.TalosVersion)
				}
				if got, want := s.Config == nil, slices.Contains(tt.maintenance, m.Name); got != want {
					t.Errorf("%s: in maintenance %v, want %v", m.Name, got, want)
				}
				want := "" // the sim's default, 127.0.0.1 and a random port
				if tt.opts.InventoryAddresses {
					want = m.Endpoint()
				}
				if s.Address != want {
					t.Errorf("%s: address %q, want %q", m.Name, s.Address, want)
				}
			}
		})
	}
}

// Start with a machine in maintenance: nothing bootstrapped, and the files
// point at the simulated addresses.
func TestStartWritesFilesThatPointAtTheFleet(t *testing.T) {
	inv, bundle := homelab(t)
	dir := t.TempDir()
	f, err := simfleet.Start(context.Background(), inv, bundle, simfleet.Options{Maintenance: []string{"worker-2"}, Bootstrap: true, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() //nolint:errcheck // test cleanup
	if f.Bootstrapped != "" || f.Kubernetes != nil || f.Dir != dir {
		t.Errorf("bootstrapped %q, kubernetes %v, dir %q", f.Bootstrapped, f.Kubernetes, f.Dir)
	}
	if !f.InMaintenance("worker-2") || f.InMaintenance("cp-1") {
		t.Errorf("maintenance: worker-2 %v, cp-1 %v", f.InMaintenance("worker-2"), f.InMaintenance("cp-1"))
	}

	tc, err := clientconfig.Open(f.Talosconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := tc.Contexts[tc.Context]
	var cps, all []string
	dial := map[string]string{}
	for _, m := range f.Machines() {
		all = append(all, m.Name())
		dial[m.Name()] = m.Addr()
		if strings.HasPrefix(m.Name(), "cp-") {
			cps = append(cps, m.Addr())
		}
	}
	if !slices.Equal(ctx.Endpoints, cps) || !slices.Equal(ctx.Nodes, all) {
		t.Errorf("talosconfig endpoints %v nodes %v, want %v and %v", ctx.Endpoints, ctx.Nodes, cps, all)
	}

	for _, p := range []string{f.Talosconfig, f.Settings} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v", p, err)
		}
	}
	data, err := os.ReadFile(f.Settings)
	if err != nil {
		t.Fatal(err)
	}
	var settings struct {
		Inventory, Talosconfig, Kubeconfig string
		Dial                               map[string]string
		Simulated                          bool
	}
	if err := yaml.Unmarshal(data, &settings); err != nil {
		t.Fatal(err)
	}
	invPath, _ := filepath.Abs(inv.Path)
	if settings.Inventory != invPath || settings.Talosconfig != f.Talosconfig || settings.Kubeconfig != "" || !settings.Simulated || len(settings.Dial) != len(dial) {
		t.Errorf("settings file:\n%s", data)
	}
	for name, addr := range dial {
		if settings.Dial[name] != addr {
			t.Errorf("dial %s: %q, want %q", name, settings.Dial[name], addr)
		}
	}
}

// A built cluster: etcd bootstrapped on the first control plane by name, and
// Start returns once every machine runs.
func TestStartBootstrapsTheFirstControlPlane(t *testing.T) {
	inv, bundle := homelab(t)
	f, err := simfleet.Start(context.Background(), inv, bundle, simfleet.Options{Bootstrap: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() //nolint:errcheck // test cleanup
	if f.Bootstrapped != "cp-1" {
		t.Errorf("bootstrapped on %q, want cp-1", f.Bootstrapped)
	}
	for _, m := range f.Machines() {
		if !m.Running() {
			t.Errorf("%s not running after Start", m.Name())
		}
	}
}
