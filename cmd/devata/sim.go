package main

import (
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
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

A real kube-apiserver (envtest, built once on first use) holds the Nodes the
simulated kubelets register, with the Kubernetes side of a Cilium install
(--kubernetes=false and --cilium=false leave them out), so devata drift
pointed at it reports a healthy cluster: every check InSync, exit 0.

Nothing here is a real machine: reports made against it say SIMULATED.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, err := inventory.Load(a.settings.Inventory)
			if err != nil {
				return a.invalid(err)
			}
			for _, name := range flags.maintenance {
				if name != simfleet.All && inv.Machine(name) == nil {
					return exitWith(exitTrouble, fmt.Errorf("--maintenance: no machine %q in %s", name, inv.Path))
				}
			}
			bundle, err := a.loadSecrets(inv.SecretsPath())
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			ctx := cmd.Context()
			fleet, err := simfleet.Start(ctx, inv, bundle, simfleet.Options{
				Maintenance: flags.maintenance, InventoryAddresses: flags.inventoryAddresses, Bootstrap: flags.bootstrap,
				Kubernetes: flags.kubernetes, Cilium: flags.cilium, Dir: flags.dir, RebootDelay: flags.rebootDelay,
				Logger: a.log, Progress: a.streams.Err,
			})
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			defer fleet.Close() //nolint:errcheck // best effort on the way out
			faultsPath := cmp.Or(flags.faults, filepath.Join(fleet.Dir, "faults.yaml"))
			go fleet.WatchFaultsFile(ctx, faultsPath, 500*time.Millisecond, func(err error) {
				fmt.Fprintf(a.streams.Err, "sim: faults file: %v (faults unchanged)\n", err)
			})
			printServing(a.streams.Out, inv, fleet, faultsPath, flags.cilium)
			<-ctx.Done()
			fmt.Fprintf(a.streams.Err, "sim: stopped after serving %d calls\n", fleet.TotalCalls())
			return nil
		},
	}
	cmd.Flags().StringVar(&flags.dir, "dir", "", "directory for talosconfig and devata.yaml (default: a new temporary directory)")
	cmd.Flags().StringSliceVar(&flags.maintenance, "maintenance", nil, "start these machines unconfigured (comma-separated names, or all)")
	cmd.Flags().Lookup("maintenance").NoOptDefVal = simfleet.All
	cmd.Flags().StringVar(&flags.faults, "faults", "", "faults file watched while serving (default DIR/faults.yaml): machine name → unreachable, latency, errorCodes, talosVersion, kubeletUnhealthy, driftedConfigFile, volumeFailed, volumeMissing, rebootDuringApply, installerPullDelay, etcdSnapshotCorrupt, etcdSnapshotCutAt, volumeFilesystem, volumeSize, disksMissing, diskSignatures, mountMissing, partitionMissing, kubeletMountMissing, kubeletMountOptions, ciliumAgentNotReady, ciliumAgentStarting, ciliumStatusReply, ciliumControllersFailing, ciliumBackendsMissing, ciliumFrontendsStuck, ciliumNoShell, ciliumPodNetworkBroken")
	cmd.Flags().BoolVar(&flags.inventoryAddresses, "inventory-addresses", false, "serve each machine on its own inventory address and port (local ones, e.g. 127.1.0.5: all of 127/8 is loopback on Linux) instead of 127.0.0.1 and a random port")
	cmd.Flags().BoolVar(&flags.kubernetes, "kubernetes", true, "run a real kube-apiserver (envtest; built once, minutes) where the simulated kubelets register Nodes; false leaves the kubelet and cilium checks Unknown")
	cmd.Flags().BoolVar(&flags.cilium, "cilium", true, "with --kubernetes: install the Kubernetes side of Cilium (SIMULATED agents) so the Nodes become Ready and the cilium checks have something to check")
	cmd.Flags().DurationVar(&flags.rebootDelay, "reboot-delay", 2*time.Second, "how long a simulated reboot takes a machine away")
	cmd.Flags().BoolVar(&flags.bootstrap, "bootstrap", true, "bootstrap etcd on the first control plane by name at start (not with --maintenance)")
	return cmd
}

// printServing prints what devata sim serves and the export lines that
// point devata, talosctl and kubectl at it.
func printServing(out io.Writer, inv *inventory.Inventory, fleet *simfleet.Fleet, faultsPath string, cilium bool) {
	fmt.Fprintf(out, "# SIMULATED Talos fleet: %d machines of %s on loopback (not real machines)\n", len(fleet.Machines()), inv.Path)
	for _, m := range fleet.Machines() {
		state := "configured"
		if fleet.InMaintenance(m.Name()) {
			state = "maintenance"
		}
		fmt.Fprintf(out, "#   %-20s %-21s %s\n", m.Name(), m.Addr(), state)
	}
	if fleet.Bootstrapped != "" {
		fmt.Fprintf(out, "# etcd bootstrapped on %s, as talosctl bootstrap would; the other control planes join it\n", fleet.Bootstrapped)
	}
	fmt.Fprintf(out, "# inject faults by writing %s, e.g.  worker-1: {kubeletUnhealthy: true}  (the file is the whole fault state)\n", faultsPath)
	if k := fleet.Kubernetes; k != nil {
		apiHost := k.Host()
		fmt.Fprintf(out, "# a real kube-apiserver %s (envtest) at %s holds the Nodes the simulated kubelets register; it serves and trusts the bundle's Kubernetes CA, so the kubeconfig from `talosctl kubeconfig` works with kubectl --server https://%s, and talosctl health --server=false --k8s-endpoint %s passes\n", testenv.KubernetesVersion, apiHost, apiHost, apiHost)
		if cilium {
			fmt.Fprintln(out, "# and the Kubernetes side of a Cilium 1.20 install; the cilium agents are SIMULATED (one pod per node, cilium-dbg through pods/exec)")
		}
		fmt.Fprintf(out, "export KUBECONFIG=%s\n", k.Kubeconfig)
	}
	fmt.Fprintf(out, "export DEVATA_CONFIG=%s\nexport TALOSCONFIG=%s\n", fleet.Settings, fleet.Talosconfig)
	fmt.Fprintln(out, "# serving until interrupted (Ctrl-C)")
}
