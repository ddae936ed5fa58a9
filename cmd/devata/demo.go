package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/checks"
	"devata.dev/devata/examples"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/sim"
	"devata.dev/devata/storagecheck"
)

func (a *app) newDemoCommand() *cobra.Command {
	var flags struct{ kubernetes bool }
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The whole story on an embedded simulated fleet: drift, faults, apply (no real machine is touched)",
		Long: `demo runs devata's main job on the homelab example embedded in the binary,
against a SIMULATED Talos fleet on loopback and a real kube-apiserver (envtest):

  render the example → start the fleet in maintenance mode → bootstrap it →
  drift (clean) → inject faults (a config
  edited behind devata's back, kubelet down on a worker, a machine unreachable)
  → drift (each reported) → apply → drift (clean but for the unreachable one)

The first run builds kube-apiserver and etcd from the Go module proxy (minutes,
once; --kubernetes=false skips Kubernetes and the kubelet check). Everything
is written to a temporary directory that is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.demo(cmd.Context(), flags.kubernetes)
		},
	}
	cmd.Flags().BoolVar(&flags.kubernetes, "kubernetes", true, "run a real kube-apiserver for the kubelet check (built once on first use)")
	return cmd
}

func (a *app) demo(ctx context.Context, withKubernetes bool) error {
	out := a.streams.Out
	dir, err := os.MkdirTemp("", "devata-demo-")
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	defer os.RemoveAll(dir)
	fail := func(err error) error { return exitWith(exitTrouble, fmt.Errorf("demo: %w", err)) }
	step := func(format string, args ...any) func(string, ...any) {
		start := time.Now()
		fmt.Fprintf(out, "\n==> %s\n", fmt.Sprintf(format, args...))
		return func(format string, args ...any) {
			fmt.Fprintf(out, "    %s (%s)\n", fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
		}
	}
	fmt.Fprintln(out, "devata demo: SIMULATED Talos machines on loopback; no real machine is touched.")

	done := step("inventory: examples/homelab/inventory.yaml (embedded)")
	invPath, err := examples.WriteHomelab(dir)
	if err != nil {
		return fail(err)
	}
	inv, err := inventory.Load(invPath)
	if err != nil {
		return fail(fmt.Errorf("the embedded example is invalid (a devata bug): %w", err))
	}
	done("valid: %s", describeFleet(inv))

	done = step("secrets: a new bundle for this demo only")
	bundle, err := bootstrap.NewSecrets(inv.Cluster.TalosVersion)
	if err != nil {
		return fail(err)
	}
	if err := bootstrap.WriteSecrets(filepath.Join(dir, inv.Cluster.Secrets), bundle, false); err != nil {
		return fail(err)
	}
	done("generated for Talos %s, written 0600 into the demo's temporary directory", inv.Cluster.TalosVersion)

	done = step("render: each machine's config, validated by Talos machinery (metal mode)")
	rendered, err := bootstrap.RenderValidated(inv, bundle)
	if err != nil {
		return fail(err)
	}
	printRendered(out, inv, rendered)
	done("%d configs", len(rendered))

	var kc kubernetes.Interface
	var kcfg *rest.Config
	kubeconfig := ""
	if withKubernetes {
		done = step("Kubernetes: a real kube-apiserver %s and etcd (envtest)", testenv.KubernetesVersion)
		env, stop, err := testenv.RunWith(ctx, a.streams.Err, clusterAPIServer(inv, bundle))
		if err != nil {
			return fail(err)
		}
		defer stop() //nolint:errcheck // best effort on the way out
		if kc, err = kubernetes.NewForConfig(env.Config); err != nil {
			return fail(err)
		}
		kcfg, kubeconfig = env.Config, env.Kubeconfig
		done("API server up at %s", env.Config.Host)
	}

	done = step("fleet: %d SIMULATED Talos machines on 127.0.0.1, in maintenance mode (real gRPC; mTLS from the bundle's CA once configured)", len(inv.Machines))
	specs := make([]sim.MachineSpec, 0, len(rendered))
	for _, r := range rendered {
		m := inv.Machine(r.Machine)
		specs = append(specs, sim.MachineSpec{Name: r.Machine, Role: r.Role, TalosVersion: inv.Cluster.TalosVersion, SystemDisk: sim.SystemDiskFor(m.InstallDisk, m.InstallDiskType())})
	}
	fleet, err := sim.Start(ctx, sim.Options{Bundle: bundle, Machines: specs, RebootDelay: 300 * time.Millisecond})
	if err != nil {
		return fail(err)
	}
	defer fleet.Close()
	renderer, err := bootstrap.NewRenderer(inv, bundle)
	if err != nil {
		return fail(err)
	}
	simDir := filepath.Join(dir, "sim")
	if err := os.MkdirAll(simDir, 0o700); err != nil {
		return fail(err)
	}
	_, settings, err := writeSimFiles(simDir, inv, renderer, fleet, kubeconfig)
	if err != nil {
		return fail(err)
	}
	syncKubelets := func() {
		if kc != nil {
			fleet.SyncKubelets(ctx, kc)
		}
	}
	if kc != nil {
		kctx, stopKubelets := context.WithCancel(ctx)
		defer stopKubelets()
		go fleet.RunKubelets(kctx, kc, 300*time.Millisecond)
	}
	done("listening; each kubelet registers its Node once its machine is configured")

	checks := "--checks=" + strings.Join(demoChecks(kc != nil), ",")
	// The demo runs devata's own commands; explicit flags keep a user's
	// DEVATA_* or TALOSCONFIG variables from pointing them elsewhere.
	pinned := []string{"--config", settings, "-i", invPath, "--talosconfig", filepath.Join(simDir, "talosconfig"), "--kubeconfig", kubeconfig}
	devata := func(args ...string) int {
		fmt.Fprintf(out, "\n$ devata %s\n", strings.Join(args, " "))
		return run(ctx, append(args, pinned...), a.streams, a.getenv)
	}

	step("bootstrap: from bare maintenance-mode machines to a ready control plane")
	// the simulated etcd starts at once after a boot: a short settle will do
	bootArgs := []string{"bootstrap", "--yes", "--etcd-settle", "2s", "--kubeconfig-out", filepath.Join(dir, "kubeconfig")}
	if kc == nil {
		bootArgs = append(bootArgs, "--skip-nodes")
	}
	if code := devata(bootArgs...); code != 0 {
		return exitWith(exitTrouble, fmt.Errorf("demo: bootstrap exited %d", code))
	}
	fmt.Fprintln(out, "    exit 0")

	if kc != nil {
		done = step("Cilium: what `helm install cilium` (1.20, kube-proxy replacement via KubePrism) puts in Kubernetes; SIMULATED agents, one per node")
		if err := sim.InstallCilium(ctx, kcfg); err != nil {
			return fail(err)
		}
		syncKubelets()
		// As an operator would: kubectl wait --for=condition=Ready nodes --all.
		if err := waitNodesReady(ctx, kc, len(inv.Machines), 30*time.Second); err != nil {
			return fail(err)
		}
		done("CiliumNodeConfig CRD (Cilium's own), cilium-config, the agent DaemonSet; the sim plays its pods and answers cilium-dbg through pods/exec; %d Nodes Ready", len(inv.Machines))
	}

	step("drift on the healthy fleet")
	fmt.Fprintf(out, "    exit %d\n", devata("drift", checks))

	faults := "cp-2's config edited behind devata's back; kubelet down and the Longhorn disk gone on worker-1; worker-2 unreachable"
	if kc != nil {
		faults += "; a CiliumNodeConfig left from debugging turns kube-proxy replacement off on cp-3"
	}
	step("faults: %s", faults)
	desired := map[string][]byte{}
	for _, r := range rendered {
		desired[r.Machine] = r.Config
	}
	edited, err := editConfig(desired["cp-2"], "time.cloudflare.com", "pool.ntp.org")
	if err != nil {
		return fail(err)
	}
	fleet.Machine("cp-2").SetFaults(sim.Faults{DriftedConfig: edited})
	fleet.Machine("worker-1").SetFaults(sim.Faults{KubeletUnhealthy: true, VolumeFailed: map[string]string{"longhorn": "no disk matched the selector: disk.size >= 100GiB && !system_disk"}})
	fleet.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	cnc, err := kprOverride(kcfg, "cp-3")
	if err != nil {
		return fail(err)
	}
	if err := cnc.create(ctx); err != nil {
		return fail(err)
	}
	syncKubelets()

	step("drift: each fault reported, with the next thing to do")
	fmt.Fprintf(out, "    exit %d (2: something could not be observed)\n", devata("drift", checks))

	step("apply: the plan, then a gated rollout of what drifted")
	// Meanwhile the operator restarted the kubelet and replaced the disk, and
	// deleted the override (and with it cp-3's agent pod, which restarts).
	fleet.Machine("worker-1").SetFaults(sim.Faults{})
	if err := cnc.remove(ctx); err != nil {
		return fail(err)
	}
	fmt.Fprintf(out, "    exit %d (worker-2 could not be planned: it is unreachable)\n", devata("apply", "--yes"))
	syncKubelets()

	step("drift after apply: in sync but for the unreachable machine")
	code := devata("drift", checks)
	fmt.Fprintf(out, "    exit %d\n", code)
	fmt.Fprintln(out, "\nEverything above ran against SIMULATED machines. Against a real cluster: devata validate, devata gen secrets, devata plan, devata bootstrap, then devata drift, devata apply or devata reconcile.")
	return nil
}

// waitNodesReady waits until n Nodes are Ready.
func waitNodesReady(ctx context.Context, kc kubernetes.Interface, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		nodes := machines.ObserveNodes(ctx, kc)
		ready := 0
		for _, f := range nodes.ByName {
			if f.Ready {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Nodes Ready after %s (%v)", ready, n, timeout, nodes.Err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cncOverride is a CiliumNodeConfig the demo creates and removes; nil
// without Kubernetes.
type cncOverride struct {
	res dynamic.ResourceInterface
	obj *unstructured.Unstructured
}

// kprOverride is the CiliumNodeConfig that turns kube-proxy replacement off
// on one node, as one left from debugging would.
func kprOverride(cfg *rest.Config, node string) (*cncOverride, error) {
	if cfg == nil {
		return nil, nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": "CiliumNodeConfig",
		"metadata": map[string]any{"name": "debug-kpr-off-" + node, "namespace": "kube-system"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": node}},
			"defaults":     map[string]any{"kube-proxy-replacement": "false"},
		},
	}}
	return &cncOverride{res: dyn.Resource(netcheck.CiliumNodeConfigs).Namespace("kube-system"), obj: obj}, nil
}

func (c *cncOverride) create(ctx context.Context) error {
	if c == nil {
		return nil
	}
	_, err := c.res.Create(ctx, c.obj, metav1.CreateOptions{})
	return err
}

func (c *cncOverride) remove(ctx context.Context) error {
	if c == nil {
		return nil
	}
	return c.res.Delete(ctx, c.obj.GetName(), metav1.DeleteOptions{})
}

func editConfig(cfg []byte, old, new string) ([]byte, error) {
	if !bytes.Contains(cfg, []byte(old)) {
		return nil, fmt.Errorf("%q not in config", old)
	}
	return bytes.Replace(cfg, []byte(old), []byte(new), 1), nil
}

// demoChecks are the checks the demo's drift reports run: every check that
// always runs but storage-declaration and storage-raw-disks, and without
// Kubernetes neither the kubelet nor the cilium checks.
func demoChecks(kubernetes bool) []string {
	families := []checks.Family{checks.FamilyMachine, checks.FamilyStorage}
	if kubernetes {
		families = append(families, checks.FamilyCilium)
	}
	return slices.DeleteFunc(checks.Of(families...), func(n string) bool {
		return n == storagecheck.CheckDeclaration || n == storagecheck.CheckRawDisks || !kubernetes && n == machines.CheckKubelet
	})
}
