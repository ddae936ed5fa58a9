// Package simtest starts the homelab example on devata's simulated fleet for
// tests: the inventory, its rendered configs, the fleet and a dialer that
// reaches it. It is test support only; production code never imports it.
package simtest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// Fleet is the homelab example served by the sim.
type Fleet struct {
	Dir       string // holds inventory.yaml, patches/ and secrets.yaml
	Inventory *inventory.Inventory
	Bundle    *secrets.Bundle
	Renderer  *render.Renderer
	Desired   map[string][]byte
	// Started are the configs the machines started with (the Desired one,
	// unless KubernetesVersion or an older Talos made it another).
	Started map[string][]byte
	Sim     *sim.Fleet
	Dialer  *talosapi.Dialer
	// Overrides maps machine names to their simulated addresses.
	Overrides map[string]string
}

// Options choose how the fleet starts.
type Options struct {
	// Maintenance names machines that start unconfigured.
	Maintenance []string
	// Bootstrap bootstraps etcd on cp-1 and waits for every control plane to join.
	Bootstrap bool
	// EtcdJoinDelay is how long a control plane takes to join etcd (default 50ms).
	EtcdJoinDelay time.Duration
	// LoopbackNet, e.g. "127.77.0", gives machine i the address
	// <LoopbackNet>.<i+1>:50000 (the Talos API port), so that each machine
	// has an address of its own as on a real network, and its Node's
	// InternalIP is that address. Default: 127.0.0.1, a port each.
	LoopbackNet string
	// Example is the example inventory served (examples: default the
	// homelab, for Talos 1.11).
	Example string
	// TalosVersion is the version every machine starts on (default the
	// sim's, v1.11.0), e.g. an older one to upgrade from; TalosVersions
	// overrides it per machine. A machine on an older release than the
	// inventory's starts with its config for that release's contract
	// (bootstrap Desired.For), as a fleet half-way through an upgrade.
	TalosVersion  string
	TalosVersions map[string]string
	// KubernetesVersion, when set, is the version every machine's config
	// runs when the fleet starts (rendered from the inventory with
	// cluster.kubernetesVersion set to it), e.g. an older one to upgrade
	// from; Desired stays the inventory's.
	KubernetesVersion string
	// DesiredKubernetesVersion, when set, replaces the inventory's
	// cluster.kubernetesVersion (in its file too): a fleet on an older Talos
	// runs a Kubernetes that Talos supports, since a machine refuses
	// images its own Talos does not run.
	DesiredKubernetesVersion string
	// RestartDelay is the sim's (sim.Options.RestartDelay; default its own).
	RestartDelay time.Duration
	// EtcdJoinTimeout and BootTimeout are the sim's (sim.Options; default
	// Talos' 30 and 70 minutes).
	EtcdJoinTimeout, BootTimeout time.Duration
	// EtcdPrepareDelay is the sim's (sim.Options.EtcdPrepareDelay).
	EtcdPrepareDelay time.Duration
	// EditInventory, when set, rewrites the example inventory's text (in
	// its file too) before the fleet starts from it.
	EditInventory func(string) string
	// Schematics are the schematics the simulated Image Factory holds
	// (default: the inventory's, simfleet.Schematics); an empty map holds
	// none but the empty schematic.
	Schematics map[string]sim.Schematic
}

// kubernetesVersionLine is the example inventory's cluster.kubernetesVersion.
var kubernetesVersionLine = regexp.MustCompile(`(?m)^(  kubernetesVersion: )v[0-9.]+$`)

// editInventory rewrites the inventory file at path with edit.
func editInventory(t testing.TB, path string, edit func(string) string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(edit(string(raw))), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FixtureSecrets is the path of the committed test bundle (a fake cluster's).
func FixtureSecrets() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "render", "testdata", "secrets.yaml")
}

// Start serves the homelab example with the fixture bundle; everything stops
// when the test ends.
func Start(t testing.TB, opts Options) *Fleet {
	t.Helper()
	dir := t.TempDir()
	invPath, err := examples.WriteExample(dir, cmp.Or(opts.Example, examples.HomelabName))
	if err != nil {
		t.Fatal(err)
	}
	if v := opts.DesiredKubernetesVersion; v != "" {
		editInventory(t, invPath, func(raw string) string {
			edited := kubernetesVersionLine.ReplaceAllString(raw, "${1}"+v)
			if edited == raw {
				t.Fatalf("the example says no kubernetesVersion to replace with %s", v)
			}
			return edited
		})
	}
	if opts.EditInventory != nil {
		editInventory(t, invPath, opts.EditInventory)
	}
	data, err := os.ReadFile(FixtureSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	f := &Fleet{Dir: dir, Desired: map[string][]byte{}, Started: map[string][]byte{}, Overrides: map[string]string{}}
	if f.Inventory, err = inventory.Load(invPath); err != nil {
		t.Fatal(err)
	}
	if f.Bundle, err = render.LoadSecrets(filepath.Join(dir, "secrets.yaml")); err != nil {
		t.Fatal(err)
	}
	if f.Renderer, err = render.NewRenderer(f.Inventory, f.Bundle); err != nil {
		t.Fatal(err)
	}
	// the machines start on opts.KubernetesVersion when it is given
	start, startInv := f.Renderer, f.Inventory
	if opts.KubernetesVersion != "" {
		inv := *f.Inventory
		inv.Cluster.KubernetesVersion = opts.KubernetesVersion
		startInv = &inv
		if start, err = render.NewRenderer(startInv, f.Bundle); err != nil {
			t.Fatal(err)
		}
	}
	older, err := render.DesiredOf(context.Background(), startInv, f.Bundle, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	specs := f.machineSpecs(t, opts, start, older)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	schematics := opts.Schematics
	if schematics == nil {
		schematics = simfleet.Schematics(f.Inventory)
	}
	if f.Sim, err = sim.Start(ctx, sim.Options{Bundle: f.Bundle, Machines: specs, RebootDelay: 50 * time.Millisecond, EtcdJoinDelay: cmp.Or(opts.EtcdJoinDelay, 50*time.Millisecond), EtcdClientWait: 300 * time.Millisecond, EtcdNoLeaderWait: 300 * time.Millisecond, RestartDelay: opts.RestartDelay, Schematics: schematics, EtcdJoinTimeout: opts.EtcdJoinTimeout, BootTimeout: opts.BootTimeout, EtcdPrepareDelay: opts.EtcdPrepareDelay}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Sim.Close() })
	for _, m := range f.Sim.Machines() {
		f.Overrides[m.Name()] = m.Addr()
	}
	if f.Dialer, err = talosapi.NewDialer(f.Talosconfig(t), f.Overrides); err != nil {
		t.Fatal(err)
	}
	if opts.Bootstrap {
		f.BootstrapEtcd(t, len(f.Inventory.ControlPlanes())-countControlPlanes(f.Inventory, opts.Maintenance))
	}
	return f
}

// machineSpecs are the sim's machines: each started with its config
// rendered by start (the inventory at opts.KubernetesVersion), for the
// release it runs when older than the inventory's (older), and none for
// those in maintenance mode. f.Desired and f.Started record both configs.
func (f *Fleet) machineSpecs(t testing.TB, opts Options, start *render.Renderer, older *render.Desired) []sim.MachineSpec {
	t.Helper()
	var specs []sim.MachineSpec
	for i := range f.Inventory.Machines {
		m := &f.Inventory.Machines[i]
		rd, err := f.Renderer.Render(m)
		if err != nil {
			t.Fatal(err)
		}
		f.Desired[m.Name] = rd.Config
		if start != f.Renderer {
			if rd, err = start.Render(m); err != nil {
				t.Fatal(err)
			}
		}
		version := cmp.Or(opts.TalosVersions[m.Name], opts.TalosVersion)
		config := rd.Config
		if version != "" {
			// its config for the release it runs, when older than the inventory's
			if config, err = older.For(m, version); err != nil {
				t.Fatal(err)
			}
		}
		f.Started[m.Name] = config
		spec := sim.MachineSpec{Name: m.Name, Role: m.Role, Config: config, TalosVersion: version, SystemDisk: sim.SystemDiskFor(m.InstallDisk, m.InstallDiskType())}
		if opts.LoopbackNet != "" {
			spec.Address = fmt.Sprintf("%s.%d:50000", opts.LoopbackNet, i+1)
		}
		for _, name := range opts.Maintenance {
			if name == m.Name {
				spec.Config = nil
			}
		}
		specs = append(specs, spec)
	}
	return specs
}

// Talosconfig is an os:admin talosconfig for the fleet.
func (f *Fleet) Talosconfig(t testing.TB) *clientconfig.Config {
	t.Helper()
	b, err := f.Renderer.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}
	tc, err := clientconfig.FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func countControlPlanes(inv *inventory.Inventory, names []string) int {
	n := 0
	for _, name := range names {
		if m := inv.Machine(name); m != nil && m.IsControlPlane() {
			n++
		}
	}
	return n
}

// BootstrapEtcd bootstraps etcd on cp-1 and waits until the configured
// control planes report members members.
func (f *Fleet) BootstrapEtcd(t testing.TB, members int) {
	t.Helper()
	ctx := context.Background()
	c, err := f.Dialer.Client(ctx, f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap cp-1: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, m := range f.Inventory.ControlPlanes() {
			o := talosapi.Observe(ctx, f.Dialer, m)
			if o.Maintenance {
				continue
			}
			if o.Etcd == nil || len(o.Etcd.Members) != members {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd did not reach full membership")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Drift replaces a machine's applied config behind devata's back with its
// desired config edited by old → new.
func (f *Fleet) Drift(t testing.TB, machine, old, new string) []byte {
	t.Helper()
	if !strings.Contains(string(f.Desired[machine]), old) {
		t.Fatalf("%q not found in %s's config", old, machine)
	}
	cfg := []byte(strings.Replace(string(f.Desired[machine]), old, new, 1))
	m := f.Sim.Machine(machine)
	faults := m.Faults()
	faults.DriftedConfig = cfg
	m.SetFaults(faults)
	return cfg
}
