package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/sim"
)

func (a *app) newSimCommand() *cobra.Command {
	var flags struct {
		dir                string
		maintenance        []string
		rebootDelay        time.Duration
		kubernetes         bool
		faults             string
		inventoryAddresses bool
		cilium             bool
		bootstrap          bool
	}
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Serve a simulated Talos fleet for the inventory on loopback until interrupted",
		Long: `sim serves every machine of the inventory as a simulated Talos node on
127.0.0.1 (real gRPC and mTLS, certificates from the inventory's secrets
bundle) and writes DIR/talosconfig and DIR/devata.yaml, a settings file whose
dial overrides point each machine at its simulated address. It prints the
export lines that make devata and talosctl use them, then serves until
interrupted (Ctrl-C).

Machines start configured with their rendered configs and etcd bootstrapped on
the first configured control plane by name, as a built cluster; --bootstrap=false
leaves etcd unbootstrapped (control planes then stay at stage booting, as on
Talos), and --maintenance starts all of them (or the named ones) unconfigured,
in maintenance mode, with nothing bootstrapped.

Nothing here is a real machine: reports made against it say SIMULATED.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, err := inventory.Load(a.settings.Inventory)
			if err != nil {
				return a.invalid(err)
			}
			for _, name := range flags.maintenance {
				if name != "all" && inv.Machine(name) == nil {
					return exitWith(exitTrouble, fmt.Errorf("--maintenance: no machine %q in %s", name, inv.Path))
				}
			}
			bundle, err := bootstrap.LoadSecrets(inv.SecretsPath())
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			r, err := bootstrap.NewRenderer(inv, bundle)
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			specs := make([]sim.MachineSpec, 0, len(inv.Machines))
			for i := range inv.Machines {
				m := &inv.Machines[i]
				spec := sim.MachineSpec{Name: m.Name, Role: m.Role, TalosVersion: inv.Cluster.TalosVersion, SystemDisk: sim.SystemDiskFor(m.InstallDisk, m.InstallDiskType())}
				if flags.inventoryAddresses {
					spec.Address = m.Endpoint()
				}
				if !slices.Contains(flags.maintenance, "all") && !slices.Contains(flags.maintenance, m.Name) {
					rd, err := r.Render(m)
					if err != nil {
						return exitWith(exitTrouble, err)
					}
					spec.Config = rd.Config
				}
				specs = append(specs, spec)
			}
			dir := flags.dir
			if dir == "" {
				if dir, err = os.MkdirTemp("", "devata-sim-"); err != nil {
					return exitWith(exitTrouble, err)
				}
			}
			if dir, err = filepath.Abs(dir); err != nil {
				return exitWith(exitTrouble, err)
			}
			ctx := cmd.Context()
			fleet, err := sim.Start(ctx, sim.Options{Bundle: bundle, Machines: specs, RebootDelay: flags.rebootDelay, Logger: a.log})
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			defer fleet.Close()
			bootstrapped := ""
			if flags.bootstrap && len(flags.maintenance) == 0 {
				if bootstrapped, err = bootstrapSim(inv, fleet); err != nil {
					return exitWith(exitTrouble, err)
				}
				// Serve once the fleet settled (the other control planes
				// joined, every configured machine ended its boot), so a
				// drift run right after "serving" sees a whole cluster.
				if err := awaitRunning(ctx, fleet, 30*time.Second); err != nil {
					return exitWith(exitTrouble, err)
				}
			}
			kubeconfig, apiHost := "", ""
			if flags.kubernetes {
				env, stop, err := testenv.RunWith(ctx, a.streams.Err, clusterAPIServer(inv, bundle))
				if err != nil {
					return exitWith(exitTrouble, fmt.Errorf("start kube-apiserver: %w", err))
				}
				defer stop() //nolint:errcheck // best effort on the way out
				kc, err := kubernetes.NewForConfig(env.Config)
				if err != nil {
					return exitWith(exitTrouble, err)
				}
				if flags.cilium {
					// cluster.network.cni none: without it no Node is Ready.
					if err := sim.InstallCilium(ctx, env.Config); err != nil {
						return exitWith(exitTrouble, err)
					}
				}
				go fleet.RunKubelets(ctx, kc, 2*time.Second)
				kubeconfig, apiHost = env.Kubeconfig, env.Config.Host
				if u, err := url.Parse(env.Config.Host); err == nil && u.Host != "" {
					apiHost = u.Host
				}
			}
			tcPath, cfgPath, err := writeSimFiles(dir, inv, r, fleet, kubeconfig)
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			out := a.streams.Out
			fmt.Fprintf(out, "# SIMULATED Talos fleet: %d machines of %s on loopback (not real machines)\n", len(specs), inv.Path)
			inMaintenance := make(map[string]bool, len(specs))
			for _, s := range specs {
				inMaintenance[s.Name] = s.Config == nil
			}
			for _, m := range fleet.Machines() {
				state := "configured"
				if inMaintenance[m.Name()] {
					state = "maintenance"
				}
				fmt.Fprintf(out, "#   %-20s %-21s %s\n", m.Name(), m.Addr(), state)
			}
			if bootstrapped != "" {
				fmt.Fprintf(out, "# etcd bootstrapped on %s, as talosctl bootstrap would; the other control planes join it\n", bootstrapped)
			}
			faultsPath := flags.faults
			if faultsPath == "" {
				faultsPath = filepath.Join(dir, "faults.yaml")
			}
			go fleet.WatchFaultsFile(ctx, faultsPath, 500*time.Millisecond, func(err error) {
				fmt.Fprintf(a.streams.Err, "sim: faults file: %v (faults unchanged)\n", err)
			})
			fmt.Fprintf(out, "# inject faults by writing %s, e.g.  worker-1: {kubeletUnhealthy: true}  (the file is the whole fault state)\n", faultsPath)
			if kubeconfig != "" {
				fmt.Fprintf(out, "# a real kube-apiserver %s (envtest) at %s holds the Nodes the simulated kubelets register; it serves and trusts the bundle's Kubernetes CA, so the kubeconfig from `talosctl kubeconfig` works with kubectl --server https://%s, and talosctl health --server=false --k8s-endpoint %s passes\n", testenv.KubernetesVersion, apiHost, apiHost, apiHost)
				if flags.cilium {
					fmt.Fprintln(out, "# and the Kubernetes side of a Cilium 1.20 install; the cilium agents are SIMULATED (one pod per node, cilium-dbg through pods/exec)")
				}
				fmt.Fprintf(out, "export KUBECONFIG=%s\n", kubeconfig)
			}
			fmt.Fprintf(out, "export DEVATA_CONFIG=%s\nexport TALOSCONFIG=%s\n", cfgPath, tcPath)
			fmt.Fprintln(out, "# serving until interrupted (Ctrl-C)")
			<-ctx.Done()
			fmt.Fprintf(a.streams.Err, "sim: stopped after serving %d calls\n", fleet.TotalCalls())
			return nil
		},
	}
	cmd.Flags().StringVar(&flags.dir, "dir", "", "directory for talosconfig and devata.yaml (default: a new temporary directory)")
	cmd.Flags().StringSliceVar(&flags.maintenance, "maintenance", nil, "start these machines unconfigured (comma-separated names, or all)")
	cmd.Flags().Lookup("maintenance").NoOptDefVal = "all"
	cmd.Flags().StringVar(&flags.faults, "faults", "", "faults file watched while serving (default DIR/faults.yaml): machine name → unreachable, latency, errorCodes, talosVersion, kubeletUnhealthy, driftedConfigFile, volumeFailed, volumeMissing, rebootDuringApply, volumeFilesystem, volumeSize, disksMissing, diskSignatures, mountMissing, partitionMissing, kubeletMountMissing, kubeletMountOptions, ciliumAgentNotReady, ciliumStatusReply, ciliumControllersFailing, ciliumBackendsMissing, ciliumFrontendsStuck, ciliumNoShell, ciliumPodNetworkBroken")
	cmd.Flags().BoolVar(&flags.inventoryAddresses, "inventory-addresses", false, "serve each machine on its own inventory address and port (local ones, e.g. 127.1.0.5: all of 127/8 is loopback on Linux) instead of 127.0.0.1 and a random port")
	cmd.Flags().BoolVar(&flags.kubernetes, "kubernetes", false, "also run a real kube-apiserver (envtest; builds it once, minutes) where the simulated kubelets register Nodes")
	cmd.Flags().BoolVar(&flags.cilium, "cilium", true, "with --kubernetes: install the Kubernetes side of Cilium (SIMULATED agents) so the Nodes become Ready and the cilium checks have something to check")
	cmd.Flags().DurationVar(&flags.rebootDelay, "reboot-delay", 2*time.Second, "how long a simulated reboot takes a machine away")
	cmd.Flags().BoolVar(&flags.bootstrap, "bootstrap", true, "bootstrap etcd on the first control plane by name at start (not with --maintenance)")
	return cmd
}

// bootstrapSim bootstraps etcd on the first control plane by name, as an
// operator's talosctl bootstrap would, and names it; "" without control planes.
func bootstrapSim(inv *inventory.Inventory, fleet *sim.Fleet) (string, error) {
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

// writeSimFiles writes the talosconfig (endpoints: the control planes' simulated
// addresses; nodes: every machine by name, which the sim routes) and the
// settings file with one dial override per machine.
func writeSimFiles(dir string, inv *inventory.Inventory, r *bootstrap.Renderer, fleet *sim.Fleet, kubeconfig string) (string, string, error) {
	tcBytes, err := r.Talosconfig()
	if err != nil {
		return "", "", err
	}
	tc, err := clientconfig.FromBytes(tcBytes)
	if err != nil {
		return "", "", err
	}
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints, ctx.Nodes = nil, nil
	dial := map[string]string{}
	for _, m := range fleet.Machines() {
		dial[m.Name()] = m.Addr()
		ctx.Nodes = append(ctx.Nodes, m.Name())
		if im := inv.Machine(m.Name()); im != nil && im.IsControlPlane() {
			ctx.Endpoints = append(ctx.Endpoints, m.Addr())
		}
	}
	tcBytes, err = tc.Bytes()
	if err != nil {
		return "", "", err
	}
	tcPath := filepath.Join(dir, "talosconfig")
	if err := bootstrap.WriteSecretFile(tcPath, tcBytes, true); err != nil {
		return "", "", err
	}
	invPath, err := filepath.Abs(inv.Path)
	if err != nil {
		return "", "", err
	}
	values := map[string]any{
		"inventory":   invPath,
		"talosconfig": tcPath,
		"dial":        dial,
		"simulated":   true,
	}
	if kubeconfig != "" {
		values["kubeconfig"] = kubeconfig
	}
	settings, err := yaml.Marshal(values)
	if err != nil {
		return "", "", err
	}
	cfgPath := filepath.Join(dir, "devata.yaml")
	header := "# written by devata sim: dial overrides point the inventory's machines at a SIMULATED fleet\n"
	if err := os.WriteFile(cfgPath, append([]byte(header), settings...), 0o600); err != nil {
		return "", "", err
	}
	return tcPath, cfgPath, nil
}

// clusterAPIServer shapes the sim's kube-apiserver as a Talos control
// plane's: serving and client certificates from the bundle's Kubernetes
// CA, the cluster endpoint's host in its serving certificate.
func clusterAPIServer(inv *inventory.Inventory, bundle *secrets.Bundle) testenv.Options {
	opts := testenv.Options{ClusterCA: bundle.Certs.K8s}
	if u, err := url.Parse(inv.Cluster.Endpoint); err == nil && u.Hostname() != "" {
		opts.ServingHosts = []string{u.Hostname()}
	}
	return opts
}
