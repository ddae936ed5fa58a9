// Package simfleet turns an inventory into a simulated fleet: a sim machine
// per inventory machine (configured with its rendered config, or in
// maintenance mode), etcd bootstrapped as an operator would, a real
// kube-apiserver shaped as the cluster's, and the talosconfig and settings
// file that point devata and talosctl at it. It serves `devata sim` and the
// demo; it prints nothing and runs none of devata's commands.
package simfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/sim"
)

// All, in Options.Maintenance, starts every machine in maintenance mode.
const All = "all"

// Options say how an inventory is served.
type Options struct {
	// Maintenance names the machines that start unconfigured, in
	// maintenance mode (All: every one); the others start configured with
	// their rendered configs.
	Maintenance []string
	// InventoryAddresses serves each machine on its inventory address and
	// port instead of 127.0.0.1 and a random port.
	InventoryAddresses bool
	// Bootstrap bootstraps etcd on the first control plane by name and waits
	// for the fleet to settle; only when no machine starts in maintenance.
	Bootstrap bool
	// Kubernetes also runs a real kube-apiserver (StartKubernetes) where the
	// simulated kubelets register their Nodes.
	Kubernetes bool
	// Cilium, with Kubernetes, installs the Kubernetes side of Cilium so
	// that the Nodes can become Ready.
	Cilium bool
	// Dir receives the talosconfig and the settings file (default: a new
	// temporary directory).
	Dir string
	// RebootDelay is how long a simulated reboot takes a machine away.
	RebootDelay time.Duration
	// Logger receives the fleet's own log lines.
	Logger *slog.Logger
	// Progress receives the progress of building kube-apiserver and etcd.
	Progress io.Writer
}

// Fleet is an inventory served by the sim.
type Fleet struct {
	*sim.Fleet
	// Dir holds Talosconfig and Settings, both absolute paths.
	Dir, Talosconfig, Settings string
	// Bootstrapped names the control plane etcd was bootstrapped on; "" when
	// nothing was bootstrapped.
	Bootstrapped string
	// Kubernetes is the API server, nil without Options.Kubernetes.
	Kubernetes *Kubernetes

	maintenance  map[string]bool
	stopKubelets context.CancelFunc
}

// Start serves every machine of the inventory as a simulated Talos node:
// rendered and started, bootstrapped, its API server up and its files
// written, in that order. On an error nothing is left running.
func Start(ctx context.Context, inv *inventory.Inventory, bundle *secrets.Bundle, opts Options) (f *Fleet, err error) {
	r, err := render.NewRenderer(inv, bundle)
	if err != nil {
		return nil, err
	}
	specs, err := Specs(inv, r, opts)
	if err != nil {
		return nil, err
	}
	dir, err := directory(opts.Dir)
	if err != nil {
		return nil, err
	}
	fleet, err := sim.Start(ctx, sim.Options{Bundle: bundle, Machines: specs, RebootDelay: opts.RebootDelay, Logger: opts.Logger, Schematics: Schematics(inv)})
	if err != nil {
		return nil, err
	}
	f = &Fleet{Fleet: fleet, Dir: dir, maintenance: make(map[string]bool, len(specs)), stopKubelets: func() {}}
	defer func() {
		if err != nil {
			f.Close() //nolint:errcheck // the error that stopped Start is the one to report
		}
	}()
	for _, s := range specs {
		f.maintenance[s.Name] = s.Config == nil
	}
	if opts.Bootstrap && len(opts.Maintenance) == 0 {
		if f.Bootstrapped, err = bootstrapEtcd(inv, fleet); err != nil {
			return f, err
		}
		// Serve once the fleet settled (the other control planes
		// joined, every configured machine ended its boot), so a
		// drift run right after "serving" sees a whole cluster.
		if err := awaitRunning(ctx, fleet, 30*time.Second); err != nil {
			return f, err
		}
	}
	kubeconfig := ""
	if opts.Kubernetes {
		if err := f.startKubernetes(ctx, inv, bundle, opts); err != nil {
			return f, err
		}
		kubeconfig = f.Kubernetes.Kubeconfig
	}
	f.Talosconfig, f.Settings, err = WriteFiles(dir, inv, r, fleet, kubeconfig)
	return f, err
}

func (f *Fleet) startKubernetes(ctx context.Context, inv *inventory.Inventory, bundle *secrets.Bundle, opts Options) error {
	k, err := StartKubernetes(ctx, opts.Progress, inv, bundle)
	if err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	f.Kubernetes = k
	if opts.Cilium {
		// cluster.network.cni none: without it no Node is Ready.
		if err := sim.InstallCilium(ctx, k.Config); err != nil {
			return err
		}
	}
	kctx, cancel := context.WithCancel(ctx)
	f.stopKubelets = cancel
	if opts.Cilium && f.Bootstrapped != "" {
		// Serve once every configured machine's Node is registered and
		// Ready, so a drift run right after "serving" sees a healthy
		// cluster (the README's try-it path).
		f.SyncKubelets(ctx, k.Client)
		configured := 0
		for _, inMaintenance := range f.maintenance {
			if !inMaintenance {
				configured++
			}
		}
		if err := WaitNodesReady(ctx, k.Client, configured, 60*time.Second); err != nil {
			cancel()
			return fmt.Errorf("the simulated kubelets' Nodes: %w", err)
		}
	}
	go f.RunKubelets(kctx, k.Client, 2*time.Second)
	return nil
}

// InMaintenance says the named machine started in maintenance mode.
func (f *Fleet) InMaintenance(name string) bool { return f.maintenance[name] }

// Close stops the simulated kubelets, the API server and the fleet.
func (f *Fleet) Close() error {
	f.stopKubelets()
	var errs []error
	if f.Kubernetes != nil {
		errs = append(errs, f.Kubernetes.Stop())
	}
	return errors.Join(append(errs, f.Fleet.Close())...)
}

// Schematics are the schematics the inventory declares, by Image Factory
// id, as the simulated factory should hold them: an operator creates them
// at the factory (POST /schematics) before installing from them.
func Schematics(inv *inventory.Inventory) map[string]sim.Schematic {
	out := map[string]sim.Schematic{}
	for i := range inv.Machines {
		s := inv.SchematicOf(&inv.Machines[i])
		if s == nil {
			continue
		}
		out[s.ID()] = sim.Schematic{
			Extensions: s.Customization.SystemExtensions.OfficialExtensions,
			KernelArgs: s.Customization.ExtraKernelArgs,
		}
	}
	return out
}

// Specs is a sim.MachineSpec per inventory machine, in inventory order:
// configured with its rendered config unless opts.Maintenance names it, on
// its inventory address with opts.InventoryAddresses.
func Specs(inv *inventory.Inventory, r *render.Renderer, opts Options) ([]sim.MachineSpec, error) {
	specs := make([]sim.MachineSpec, 0, len(inv.Machines))
	for i := range inv.Machines {
		m := &inv.Machines[i]
		spec := sim.MachineSpec{Name: m.Name, Role: m.Role, TalosVersion: inv.Cluster.TalosVersion, SystemDisk: sim.SystemDiskFor(m.InstallDisk, m.InstallDiskType())}
		if opts.InventoryAddresses {
			spec.Address = m.Endpoint()
		}
		if !slices.Contains(opts.Maintenance, All) && !slices.Contains(opts.Maintenance, m.Name) {
			rd, err := r.Render(m)
			if err != nil {
				return nil, err
			}
			spec.Config = rd.Config
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// directory is dir made absolute, or a new temporary directory.
func directory(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "devata-sim-"); err != nil {
			return "", err
		}
	}
	return filepath.Abs(dir)
}

// bootstrapEtcd bootstraps etcd on the first control plane by name, as an
// operator's talosctl bootstrap would, and names it; "" without control planes.
func bootstrapEtcd(inv *inventory.Inventory, fleet *sim.Fleet) (string, error) {
	cps := inv.ControlPlanes()
	if len(cps) == 0 {
		return "", nil
	}
	first := slices.MinFunc(cps, func(a, b *inventory.Machine) int { return strings.Compare(a.Name, b.Name) })
	if err := fleet.Machine(first.Name).Bootstrap(); err != nil {
		return "", fmt.Errorf("bootstrap etcd on %s: %w", first.Name, err)
	}
	return first.Name, nil
}

// awaitRunning waits until every configured machine of the fleet is in
// stage running, or names those that are not when the wait runs out.
func awaitRunning(ctx context.Context, fleet *sim.Fleet, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		var booting []string
		for _, m := range fleet.Machines() {
			if m.Configured() && !m.Running() {
				booting = append(booting, m.Name())
			}
		}
		if len(booting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sim: %s still booting %s after bootstrap (a sim bug: report it; --bootstrap=false serves without waiting)", strings.Join(booting, ", "), wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
