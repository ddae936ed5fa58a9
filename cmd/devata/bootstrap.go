package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/backup"
	"devata.dev/devata/bootstrap"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// sequenceFlags are the flags bootstrap and plan share.
type sequenceFlags struct {
	kubeconfigOut string
	skipNodes     bool
	wait          time.Duration
	etcdSettle    time.Duration
	recoverFrom   string
	// foreignSnapshot restores a snapshot whose members or sidecar name
	// another cluster (backup.CheckSnapshotOf)
	foreignSnapshot bool
	// plan: --recover-from URL reads only the sidecar
	plan bool
}

// register adds the sequence's flags; plan, which waits for nothing and
// writes no kubeconfig, gets only those it reads (issue 33: plan --help
// offered --wait and --etcd-settle).
func (f *sequenceFlags) register(cmd *cobra.Command, plan bool) {
	f.plan = plan
	if plan {
		cmd.Flags().StringVar(&f.kubeconfigOut, "kubeconfig-out", "", "the kubeconfig bootstrap wrote (its --kubeconfig-out), read for the Nodes' step (default: kubeconfig next to the inventory)")
		cmd.Flags().BoolVar(&f.skipNodes, "skip-nodes", false, "plan without the Nodes' step, as bootstrap --skip-nodes runs")
	} else {
		cmd.Flags().StringVar(&f.kubeconfigOut, "kubeconfig-out", "", "where the admin kubeconfig is written (default: kubeconfig next to the inventory)")
		cmd.Flags().BoolVar(&f.skipNodes, "skip-nodes", false, "do not wait for the Kubernetes Nodes (and leave the kubelet check out of the report)")
		cmd.Flags().DurationVar(&f.wait, "wait", 10*time.Minute, "how long each wait lasts: a machine's return, etcd health, the Nodes")
		cmd.Flags().DurationVar(&f.etcdSettle, "etcd-settle", 15*time.Second, "how long every control plane's etcd must be seen waiting for a bootstrap before one is bootstrapped; a control plane with etcd data passes through that state on every boot, which its data directory (/var/lib/etcd, listed) tells whatever this says")
	}
	cmd.Flags().StringVar(&f.recoverFrom, "recover-from", "", "rebuild etcd from this snapshot (devata backup etcd writes one) instead of bootstrapping an empty one: it is verified, uploaded to the first control plane and restored there (talosctl bootstrap --recover-from); refused while etcd still runs the cluster it was taken of. A FILE, or s3://BUCKET/PREFIX/latest|NAME (file:///DIR/latest|NAME): latest is the newest snapshot of the inventory's cluster there; plan reads only its sidecar, bootstrap fetches it into a private copy first")
	cmd.Flags().BoolVar(&f.foreignSnapshot, "foreign-snapshot", false, "with --recover-from: restore the snapshot although its sidecar names another cluster or its etcd members are not the inventory's control planes (control planes renamed since)")
}

// bootstrapFlags are bootstrap's flags.
type bootstrapFlags struct {
	sequenceFlags
	yes, force bool
	lock       lockFlags
}

func (a *app) newBootstrapCommand() *cobra.Command {
	var flags bootstrapFlags
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Build the cluster from machines in maintenance mode, resumably",
		Long: `bootstrap takes machines from maintenance mode to a ready cluster, as named steps
that each say what they did:

  validate inventory → secrets bundle (created only when missing, 0600) → render
  → observe every machine → configure each machine in maintenance mode (apply
  its config, mode auto, over the insecure maintenance connection; wait until
  it answers on mTLS) → bootstrap etcd on the first control plane by name,
  only if no control plane has etcd data → wait until etcd is healthy with
  exactly the configured control planes → kubeconfig (0600) → wait until every
  Node is Ready → drift report

Every decision comes from what the machines report, so an interrupted run is
resumed by running bootstrap again; on a cluster it already built it changes
nothing. It refuses, naming the machine and what it saw, when a control plane
holds etcd data that is not a cluster of this inventory's control planes, and
never sends an insecure apply to a machine that answers on mTLS. Before the
cluster exists it also applies the desired config to configured machines
whose config differs; a change that reboots one is confirmed at the terminal
unless --yes (with no terminal it refuses).

--recover-from FILE rebuilds a cluster whose control planes lost etcd (or
were reinstalled): the snapshot is verified first (size, sha256, its members
and revision; nothing is sent when it fails), every machine is configured as
above, then instead of an empty bootstrap the snapshot is uploaded to the
first control plane (EtcdRecover) and etcd bootstrapped with recover_etcd;
the others join the restored cluster. It is refused while etcd still runs
the cluster the snapshot was taken of; a rerun after a recovery finds the
restored cluster (its members have new IDs) and goes on. A snapshot
backup etcd --encrypt-to wrote is decrypted first, with --age-identity, into
a private temporary directory (0700, in $TMPDIR) removed when the run ends;
what is read and its clear text must be those its sidecar names, and a
missing or wrong identity is refused, naming the recipients, before any
machine is asked anything.

--recover-from s3://BUCKET/PREFIX/latest (or …/NAME, or file:///DIR/latest
or …/NAME) restores from where backup etcd --to URL wrote: latest is the
newest snapshot of the inventory's cluster there (as backup verify --latest
picks it; only a snapshot with its sidecar counts). The snapshot and its
sidecar are fetched into a private temporary directory (0700, in $TMPDIR),
the snapshot held to its sidecar (size, sha256: an object changed since its
upload is refused) and then checked as a FILE is, all before any machine is
asked; an endpoint that is down, wrong credentials or a missing bucket stop
it there too (exit 2, nothing sent). The copy is removed when bootstrap
ends, whatever happens. S3 is configured as for backup etcd.

--kubeconfig (or KUBECONFIG) is used to watch the Nodes; by default the
fetched kubeconfig is.

Exit 0 ready and in sync, 1 ready but the drift report is not clean, 2 error or refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.bootstrap(cmd.Context(), flags)
		},
	}
	flags.register(cmd, false)
	cmd.Flags().BoolVar(&flags.yes, "yes", false, "do not ask before a change that reboots a running machine")
	cmd.Flags().BoolVar(&flags.force, "force", false, "replace an existing kubeconfig that belongs to another cluster")
	flags.lock.register(cmd, true)
	return cmd
}

// bootstrap runs the sequence under the cluster's lock, then the drift
// report that closes it.
func (a *app) bootstrap(ctx context.Context, flags bootstrapFlags) error {
	opts, _, cleanup, err := a.sequenceOptions(ctx, flags.sequenceFlags)
	defer cleanup()
	if err != nil {
		return err
	}
	defer cleanup()
	out := a.streams.Out
	opts.Out, opts.Yes, opts.Force = out, flags.yes, flags.force
	opts.Confirm = a.confirmBootstrapReboots
	if a.settings.Simulated {
		fmt.Fprintln(out, "SIMULATED: the machines are devata's simulated fleet.")
	}
	seq := bootstrap.New(opts)
	// a resumed bootstrap finds the kubeconfig it wrote: then the
	// cluster's Lease is taken too
	lockKube, err := existingKubeClient(seq.NodesKubeconfig())
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	held, err := a.writeLock(ctx, opts.InventoryPath, lockKube, flags.lock, true)
	if err != nil {
		return err
	}
	defer held.Release()
	if err := seq.Run(held.Context()); err != nil {
		if lost := held.Lost(); lost != nil {
			return exitWith(exitTrouble, lost)
		}
		return exitWith(exitTrouble, err)
	}
	fmt.Fprintln(out, plan.StepLine("", "drift report"))
	var kube kubernetes.Interface
	if !flags.skipNodes {
		if kube, err = talosapi.KubeClient(seq.NodesKubeconfig()); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	code, err := a.driftReport(ctx, seq, kube, seq.ReportChecks())
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	switch code {
	case drift.ExitInSync:
		fmt.Fprintf(out, "bootstrap complete: cluster %s is ready and in sync\n", seq.Inventory().Cluster.Name)
		if seq.CNINone() {
			ready, known := nodesReady(ctx, kube)
			agent := ""
			if known && !ready {
				agent = bootstrap.CiliumAgent(ctx, kube, a.settings.Timeout)
			}
			fmt.Fprintln(out, cniNext(ready, known, agent))
		}
		return nil
	case drift.ExitDrifted:
		return exitWith(exitFailed, errors.New("the cluster is up but the drift report is not clean: see above (devata apply converges configs)"))
	}
	return exitWith(exitTrouble, errors.New("the cluster is up but some checks could not observe: see above"))
}

// cniNext is bootstrap's closing advice for a cluster with
// cluster.network.cni none, true to what the Nodes say: install Cilium while
// they wait for a CNI, not once they are Ready (issue 33: a rebuild whose
// Nodes were Ready still said "install Cilium").
//
// agent names Cilium's agent DaemonSet when one is installed: Nodes not
// Ready then wait for its agents, not for the operator.
func cniNext(ready, known bool, agent string) string {
	const install = "install Cilium (kube-proxy replacement, k8sServiceHost localhost, k8sServicePort from cluster.cilium)"
	switch {
	case known && ready:
		return "next: every Node is Ready, so a CNI runs: devata drift with the kubelet and cilium checks"
	case known && agent != "":
		return "next: Cilium is installed (DaemonSet " + agent + ") but not every Node is Ready yet: once its agents run there, devata drift with the kubelet and cilium checks"
	case known:
		return "next: cluster.network.cni is none, so the Nodes become Ready once a CNI runs: " + install + ", then devata drift (the kubelet and cilium checks)"
	}
	return "next: the Nodes were not looked at (--skip-nodes); if no CNI runs yet (cluster.network.cni is none), " + install + ", then devata drift (the kubelet and cilium checks)"
}

// nodesReady says whether every Node is Ready, and whether that is known
// (a Kubernetes client that answered with at least one Node).
func nodesReady(ctx context.Context, kube kubernetes.Interface) (ready, known bool) {
	if kube == nil {
		return false, false
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		return false, false
	}
	for _, n := range nodes.Items {
		if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
			return false, true
		}
	}
	return true, true
}

// sequenceOptions resolves what bootstrap and plan share from the
// settings; with --recover-from URL also the snapshot's source, and
// cleanup, which removes a fetched copy: call it whatever happens, once
// the sequence is done.
func (a *app) sequenceOptions(ctx context.Context, f sequenceFlags) (bootstrap.Options, *plan.RecoverSource, func(), error) {
	opts := bootstrap.Options{
		InventoryPath: a.settings.Inventory,
		AgeIdentities: new(a.ageIdentities()),
		Overrides:     a.settings.Dial,
		Dial:          a.dialOptions(),
		KubeconfigOut: f.kubeconfigOut,
		Kubeconfig:    a.settings.Kubeconfig,
		SkipNodes:     f.skipNodes,
		Concurrency:   a.settings.Concurrency,
		Timeout:       a.settings.Timeout,
		Wait:          f.wait,
		EtcdSettle:    f.etcdSettle,
	}
	src, cleanup, err := a.recoverFrom(ctx, f, &opts)
	if err != nil {
		return opts, nil, cleanup, err
	}
	tc, err := talosapi.LoadTalosconfig(a.settings.Talosconfig)
	switch {
	case errors.Is(err, talosapi.ErrNoTalosconfig):
		// Without a talosconfig anywhere, the sequence derives one from the bundle.
	case err != nil:
		cleanup()
		return opts, nil, func() {}, exitWith(exitTrouble, err)
	default:
		opts.Talosconfig = tc
	}
	return opts, src, cleanup, nil
}

// recoverFrom resolves --recover-from into opts.Recover before any machine
// is asked: a FILE is verified in place (recoverSnapshot); a URL
// (s3://…/latest|NAME, file:///dir/latest|NAME) is, for plan, described by
// its sidecar alone, and for bootstrap fetched into a private copy and
// verified there, which cleanup removes (called whatever happens).
func (a *app) recoverFrom(ctx context.Context, f sequenceFlags, opts *bootstrap.Options) (*plan.RecoverSource, func(), error) {
	none := func() {}
	if f.recoverFrom == "" {
		return nil, none, nil
	}
	refused := func(err error) (*plan.RecoverSource, func(), error) {
		var ee *exitError
		if errors.As(err, &ee) { // a usage error, or recoverSnapshot's, which says nothing was sent
			return nil, none, err
		}
		return nil, none, exitWith(exitTrouble, fmt.Errorf("--recover-from: %w; nothing was sent to any machine", err))
	}
	if !backup.IsURL(f.recoverFrom) {
		// the one local path: decrypts an encrypted snapshot, verifies it
		// and sets opts.Recover (its errors say nothing was sent)
		cleanup, err := a.recoverSnapshot(ctx, opts, f.recoverFrom, nil, f.foreignSnapshot)
		if err != nil {
			return nil, none, err
		}
		return nil, cleanup, nil
	}
	inv, err := inventory.LoadContext(ctx, a.settings.Inventory)
	if err != nil {
		fmt.Fprintln(a.streams.Err, err)
		return refused(fmt.Errorf("%s is invalid: run devata validate", a.settings.Inventory))
	}
	if f.plan {
		snap, src, err := a.planRecoverURL(ctx, inv, f.recoverFrom, f.foreignSnapshot)
		if err != nil {
			return refused(err)
		}
		opts.Recover = snap
		return src, none, nil
	}
	src, cleanup, err := a.fetchRecoverURL(ctx, opts, inv, f.recoverFrom, f.foreignSnapshot)
	if err != nil {
		return refused(err)
	}
	return src, cleanup, nil
}

// driftReport renders the closing drift report and returns its exit code.
func (a *app) driftReport(ctx context.Context, seq *bootstrap.Sequence, kube kubernetes.Interface, checks []string) (int, error) {
	inv := seq.Inventory()
	// Cilium comes after bootstrap: its checks are not in this report.
	fc := a.fleetCheck(inv, seq.Desired(), seq.Dialer(), kube, nil)
	fc.Checks = checks
	rep, err := fc.Report(ctx, a.reportHeader(ctx, inv))
	if err != nil {
		return 0, err
	}
	if err := drift.Render(a.streams.Out, drift.FormatTable, rep, drift.TableOptions{Color: drift.AutoColor(a.streams.Out, a.getenv)}); err != nil {
		return 0, err
	}
	return rep.ExitCode(), nil
}

// confirmBootstrapReboots asks at a terminal; without one it refuses.
func (a *app) confirmBootstrapReboots(rebooting []string) error {
	f, ok := a.streams.In.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return fmt.Errorf("%w: applying the desired config reboots %s and there is no terminal to confirm: rerun with --yes to proceed", bootstrap.ErrRefused, strings.Join(rebooting, ", "))
	}
	fmt.Fprintf(a.streams.Err, "Applying the desired config reboots %s. Continue? [y/N] ", strings.Join(rebooting, ", "))
	line, _ := bufio.NewReader(f).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
		return errors.New("not confirmed: nothing was applied")
	}
	return nil
}
