package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/sim"
)

// The steps of the story, in order. Each prints its own "==>" line.

func (s *scenario) inventory(context.Context) error {
	st := startStep(s.Out, "inventory: examples/homelab/inventory.yaml (embedded)")
	var err error
	if s.invPath, err = examples.WriteHomelab(s.dir); err != nil {
		return err
	}
	if s.inv, err = inventory.Load(s.invPath); err != nil {
		return fmt.Errorf("the embedded example is invalid (a devata bug): %w", err)
	}
	st.done("valid: %s", s.DescribeFleet(s.inv))
	return nil
}

func (s *scenario) secrets(context.Context) error {
	st := startStep(s.Out, "secrets: a new bundle for this demo only")
	var err error
	if s.bundle, err = render.NewSecrets(s.inv.Cluster.TalosVersion); err != nil {
		return err
	}
	if err := render.WriteSecrets(filepath.Join(s.dir, s.inv.Cluster.Secrets), s.bundle, false); err != nil {
		return err
	}
	st.done("generated for Talos %s, written 0600 into the demo's temporary directory", s.inv.Cluster.TalosVersion)
	return nil
}

func (s *scenario) render(context.Context) error {
	st := startStep(s.Out, "render: each machine's config, validated by Talos machinery (metal mode)")
	var err error
	if s.rendered, err = render.Validated(s.inv, s.bundle); err != nil {
		return err
	}
	s.PrintRendered(s.Out, s.inv, s.rendered)
	st.done("%d configs", len(s.rendered))
	return nil
}

func (s *scenario) kubernetes(ctx context.Context) error {
	if !s.Kubernetes {
		return nil
	}
	st := startStep(s.Out, "Kubernetes: a real kube-apiserver %s and etcd (envtest)", testenv.KubernetesVersion)
	k, err := simfleet.StartKubernetes(ctx, s.Err, s.inv, s.bundle)
	if err != nil {
		return err
	}
	s.onClose(func() { k.Stop() }) //nolint:errcheck // best effort on the way out
	s.kube = k
	st.done("API server up at %s", k.Config.Host)
	return nil
}

// fleet serves every machine unconfigured, writes the files that point
// devata's commands at it and pins them on every command line.
func (s *scenario) fleet(ctx context.Context) error {
	st := startStep(s.Out, "fleet: %d SIMULATED Talos machines on 127.0.0.1, in maintenance mode (real gRPC; mTLS from the bundle's CA once configured)", len(s.inv.Machines))
	renderer, err := render.NewRenderer(s.inv, s.bundle)
	if err != nil {
		return err
	}
	specs, err := simfleet.Specs(s.inv, renderer, simfleet.Options{Maintenance: []string{simfleet.All}})
	if err != nil {
		return err
	}
	if s.sim, err = sim.Start(ctx, sim.Options{Bundle: s.bundle, Machines: specs, RebootDelay: 300 * time.Millisecond, Schematics: simfleet.Schematics(s.inv)}); err != nil {
		return err
	}
	s.onClose(func() { s.sim.Close() }) //nolint:errcheck // best effort on the way out
	simDir := filepath.Join(s.dir, "sim")
	if err := os.MkdirAll(simDir, 0o700); err != nil {
		return err
	}
	kubeconfig := ""
	if s.kube != nil {
		kubeconfig = s.kube.Kubeconfig
	}
	talosconfig, settings, err := simfleet.WriteFiles(simDir, s.inv, renderer, s.sim, kubeconfig)
	if err != nil {
		return err
	}
	if s.kube != nil {
		kctx, stopKubelets := context.WithCancel(ctx)
		s.onClose(stopKubelets)
		go s.sim.RunKubelets(kctx, s.kube.Client, 300*time.Millisecond)
	}
	st.done("listening; each kubelet registers its Node once its machine is configured")

	s.checks = "--checks=" + strings.Join(checkNames(s.kube != nil), ",")
	// The demo runs devata's own commands; explicit flags keep a user's
	// DEVATA_* or TALOSCONFIG variables from pointing them elsewhere.
	s.pinned = []string{"--config", settings, "-i", s.invPath, "--talosconfig", talosconfig, "--kubeconfig", kubeconfig}
	return nil
}

func (s *scenario) bootstrap(ctx context.Context) error {
	startStep(s.Out, "bootstrap: from bare maintenance-mode machines to a ready control plane")
	// the simulated etcd starts at once after a boot: a short settle will do
	args := append([]string{"bootstrap", "--yes", "--etcd-settle", "2s"}, s.kubeconfigOut()...)
	if code := s.devata(ctx, args...); code != 0 {
		return fmt.Errorf("bootstrap exited %d", code)
	}
	fmt.Fprintln(s.Out, "    exit 0")
	return s.followLeaseAdvice(ctx)
}

// kubeconfigOut are bootstrap's flags for the kubeconfig it writes. With
// Kubernetes, next to the inventory, where later commands find it. Without,
// that kubeconfig names cluster.endpoint (10.20.0.10:6443), which nothing
// serves in the demo: it goes where no later command looks, and the Nodes
// are not waited for, so that every command stays on loopback (issue 33:
// apply dialled 10.20.0.10:6443 for the cluster's Lease and failed).
func (s *scenario) kubeconfigOut() []string {
	if s.kube != nil {
		return []string{"--kubeconfig-out", filepath.Join(s.dir, "kubeconfig")}
	}
	unserved := filepath.Join(s.dir, "unserved")
	_ = os.RemoveAll(unserved) // a recovery's bootstrap must not find the first one's: it would take the Lease
	return []string{"--kubeconfig-out", filepath.Join(unserved, "kubeconfig"), "--skip-nodes"}
}

// followLeaseAdvice does what the first write's advice says, as an
// operator would: it creates the Lease's namespace, so the later writers
// take the cluster's Lease and the advice is printed once per demo.
func (s *scenario) followLeaseAdvice(ctx context.Context) error {
	if s.kube == nil {
		return nil
	}
	fmt.Fprintln(s.Out, "\n$ kubectl create namespace devata   # as the advice above says: from now on the writers take the cluster's Lease")
	_, err := s.kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "devata"}}, metav1.CreateOptions{})
	return err
}

func (s *scenario) cilium(ctx context.Context) error {
	if s.kube == nil {
		return nil
	}
	st := startStep(s.Out, "Cilium: what `helm install cilium` (1.20, kube-proxy replacement via KubePrism) puts in Kubernetes; SIMULATED agents, one per node")
	if err := sim.InstallCilium(ctx, s.kube.Config); err != nil {
		return err
	}
	s.syncKubelets(ctx)
	// As an operator would: kubectl wait --for=condition=Ready nodes --all.
	if err := simfleet.WaitNodesReady(ctx, s.kube.Client, len(s.inv.Machines), 30*time.Second); err != nil {
		return err
	}
	st.done("CiliumNodeConfig CRD (Cilium's own), cilium-config, the agent DaemonSet; the sim plays its pods and answers cilium-dbg through pods/exec; %d Nodes Ready", len(s.inv.Machines))
	return nil
}

func (s *scenario) driftHealthy(ctx context.Context) error {
	startStep(s.Out, "drift on the healthy fleet")
	fmt.Fprintf(s.Out, "    exit %d\n", s.devata(ctx, "drift", s.checks))
	return nil
}

// faults breaks the fleet in four ways (five with Kubernetes), each one a
// later step reports and apply, or the operator, repairs.
func (s *scenario) faults(ctx context.Context) error {
	faults := "cp-2's config edited behind devata's back; kubelet down and the Longhorn disk gone on worker-1; worker-2 unreachable"
	if s.kube != nil {
		faults += "; a CiliumNodeConfig left from debugging turns kube-proxy replacement off on cp-3"
	}
	startStep(s.Out, "faults: %s", faults)
	var desired []byte
	for _, r := range s.rendered {
		if r.Machine == "cp-2" {
			desired = r.Config
		}
	}
	edited, err := editConfig(desired, "time.cloudflare.com", "pool.ntp.org")
	if err != nil {
		return err
	}
	s.sim.Machine("cp-2").SetFaults(sim.Faults{DriftedConfig: edited})
	s.sim.Machine("worker-1").SetFaults(sim.Faults{KubeletUnhealthy: true, VolumeFailed: map[string]string{"longhorn": "no disk matched the selector: disk.size >= 100GiB && !system_disk"}})
	s.sim.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	if s.override, err = kprOverride(s.kube, "cp-3"); err != nil {
		return err
	}
	if err := s.override.create(ctx); err != nil {
		return err
	}
	s.syncKubelets(ctx)
	return nil
}

func (s *scenario) driftFaulty(ctx context.Context) error {
	startStep(s.Out, "drift: each fault reported, with the next thing to do")
	fmt.Fprintf(s.Out, "    exit %d (2: something could not be observed)\n", s.devata(ctx, "drift", s.checks))
	return nil
}

func (s *scenario) apply(ctx context.Context) error {
	startStep(s.Out, "apply: the plan, then a gated rollout of what drifted")
	// Meanwhile the operator restarted the kubelet and replaced the disk, and
	// deleted the override (and with it cp-3's agent pod, which restarts).
	s.sim.Machine("worker-1").SetFaults(sim.Faults{})
	if err := s.override.remove(ctx); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "    exit %d (worker-2 could not be planned: it is unreachable)\n", s.devata(ctx, "apply", "--yes"))
	s.syncKubelets(ctx)
	return nil
}

func (s *scenario) driftAfterApply(ctx context.Context) error {
	startStep(s.Out, "drift after apply: in sync but for the unreachable machine")
	fmt.Fprintf(s.Out, "    exit %d\n", s.devata(ctx, "drift", s.checks))
	return nil
}

// recovery is the rebuild devata is for: a verified snapshot, then every
// control plane's disk lost, then the cluster rebuilt from the snapshot by
// one command.
func (s *scenario) recovery(ctx context.Context) error {
	startStep(s.Out, "recovery: an etcd snapshot, every control plane's disk lost, the cluster rebuilt from the snapshot")
	snapshot := filepath.Join(s.dir, "etcd.snapshot")
	if code := s.devata(ctx, "backup", "etcd", "--to", snapshot); code != 0 {
		return fmt.Errorf("backup etcd exited %d", code)
	}
	cps := s.inv.ControlPlanes()
	var names []string
	for _, m := range cps {
		s.sim.Machine(m.Name).Wipe()
		names = append(names, m.Name)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range cps {
		sm := s.sim.Machine(m.Name)
		for sm.Configured() || sm.Observe().Down {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not come back in maintenance mode after its wipe", m.Name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	fmt.Fprintf(s.Out, "\n    SIMULATED: %s lost their system disks: back in maintenance mode, etcd gone with them\n", strings.Join(names, ", "))
	args := append([]string{"bootstrap", "--yes", "--etcd-settle", "2s", "--recover-from", snapshot}, s.kubeconfigOut()...)
	if code := s.devata(ctx, args...); code != 0 {
		return fmt.Errorf("bootstrap --recover-from exited %d", code)
	}
	fmt.Fprintln(s.Out, "    exit 0")
	s.syncKubelets(ctx)
	return nil
}

func (s *scenario) driftRecovered(ctx context.Context) error {
	startStep(s.Out, "drift after the rebuild")
	fmt.Fprintf(s.Out, "    exit %d\n", s.devata(ctx, "drift", s.checks))
	return nil
}
