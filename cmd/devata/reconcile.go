package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

// reconcileFlags are reconcile's flags.
type reconcileFlags struct {
	interval, grace, wait, backoffMax     time.Duration
	pullTimeout                           time.Duration
	pullTimeoutSet                        bool
	drain                                 bool
	drainTimeout                          time.Duration
	lock                                  lockFlags
	once, reportOnly, dryRun, leaderElect bool
	allowQuorumLoss, upgrade, join        bool
	// force: --force, a Kubernetes minor upgrade while clients still
	// request APIs it removes (reconcile.Changes.ForceDeprecatedAPIs)
	force                                     bool
	mode, metricsAddr, shard, auditLog        string
	leaseNamespace, leaseName                 string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	maxUnavailable, writeBurst                int
	writeRate                                 float64
	checks                                    []string
	certDays                                  int
}

// upgrades is what --upgrade asks of the loop: nil without it.
func (f reconcileFlags) upgrades() *reconcile.Upgrades {
	if !f.upgrade {
		return nil
	}
	return &reconcile.Upgrades{}
}

func (a *app) newReconcileCommand() *cobra.Command {
	var flags reconcileFlags
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Keep the machines equal to the inventory, in a loop",
		Long: `reconcile runs apply's policy as a level-triggered loop. Every --interval it
re-reads the inventory (an invalid edit is reported and the last valid one stays
in force), observes every machine it owns, and queues each machine whose applied
config is not the desired one. A queued machine is planned afresh (dry run) and
changed under apply's rollout policy: one control plane at a time with etcd
gates before and after, at most --max-unavailable workers, a global write rate.
A change that reboots a control plane is refused, and the machine left pending,
when etcd would lose quorum without it (one or two control planes) unless
--allow-quorum-loss. Before a change that reboots a machine its Node is
cordoned and drained, and uncordoned once it is back and ready, as devata
apply does (--drain, --drain-timeout).
A changed cluster.kubernetesVersion moves one component at a time, as devata
apply moves it; a new minor release is refused while clients still request
an API it removes (the API server's apiserver_requested_deprecated_apis,
read through --kubeconfig), unless --force.
A failed gate stops every change and is reported on every pass until it clears;
a machine that keeps failing is retried with exponential backoff while the
others carry on. Every action is written to --audit-log as a JSON line, synced
before the change is sent: when the record cannot be written the change is not
made and the pass fails.

--once runs one pass (exit 0 in sync or converged, 1 drift or changes left,
2 an error or an Unknown). --report-only observes and reports only; --dry-run
plans and records what it would do. --leader-elect acts only while holding a
Lease (several replicas are safe). --shard i/N owns the workers whose name
hashes to i; shard 0 also owns every control plane.

SIGTERM stops taking work, finishes changes in flight within --grace and exits 0.
Metrics, /healthz and /readyz are served on --metrics-addr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags.pullTimeoutSet = cmd.Flags().Changed("pull-timeout")
			return a.reconcile(cmd.Context(), flags)
		},
	}
	flags.lock.register(cmd, false)
	f := cmd.Flags()
	f.DurationVar(&flags.interval, "interval", 5*time.Minute, "time between the starts of two passes")
	f.BoolVar(&flags.once, "once", false, "run one pass and exit (for a CronJob or a runbook step)")
	f.BoolVar(&flags.reportOnly, "report-only", false, "observe and report; never plan or change anything")
	f.BoolVar(&flags.dryRun, "dry-run", false, "plan (dry runs on the machines) and record what would change; write nothing")
	f.StringVar(&flags.mode, "mode", "auto", "apply mode: auto, no-reboot, reboot, staged, try")
	f.IntVar(&flags.maxUnavailable, "max-unavailable", 1, "workers changed at once")
	f.BoolVar(&flags.allowQuorumLoss, "allow-quorum-loss", false, quorumLossUsage)
	f.BoolVar(&flags.join, "join", false, "also configure machines found in maintenance mode once etcd runs, so that they join the cluster, as devata apply does (off by default: their config, secrets included, goes over the maintenance connection, which authenticates no one)")
	f.BoolVar(&flags.upgrade, "upgrade", false, "also upgrade Talos on machines whose config is in sync and whose version is not cluster.talosVersion, as devata upgrade does (off by default: every upgrade reboots its machine)")
	f.BoolVar(&flags.force, "force", false, forceDeprecatedUsage)
	addPullTimeoutFlag(cmd, &flags.pullTimeout, true)
	addDrainFlags(cmd, &flags.drain, &flags.drainTimeout)
	f.StringVar(&flags.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address, e.g. :9090")
	f.StringVar(&flags.shard, "shard", "", "own only shard i of N (i/N): workers by FNV-1a of their name; control planes belong to shard 0")
	f.BoolVar(&flags.leaderElect, "leader-elect", false, "act only while holding a Lease (in-cluster config or --kubeconfig)")
	f.StringVar(&flags.leaseNamespace, "lease-namespace", "", "namespace of the Lease (default: the pod's namespace, else devata)")
	f.StringVar(&flags.leaseName, "lease-name", "devata-reconcile", "name of the Lease; with --shard, -<i>-of-<N> is appended")
	f.DurationVar(&flags.leaseDuration, "lease-duration", 15*time.Second, "how long a standby waits after the last renewal before taking over")
	f.DurationVar(&flags.renewDeadline, "renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops acting")
	f.DurationVar(&flags.retryPeriod, "retry-period", 2*time.Second, "how often to try to acquire or renew the Lease")
	f.StringVar(&flags.auditLog, "audit-log", "", "append a JSON line per action to this file")
	f.DurationVar(&flags.grace, "grace", 30*time.Second, "on SIGTERM, how long to let changes in flight finish")
	f.DurationVar(&flags.wait, "wait", 10*time.Minute, "how long to wait for a machine to return and for etcd to be healthy")
	f.Float64Var(&flags.writeRate, "write-rate", 1, "most config writes per second across the fleet (0: unlimited)")
	f.IntVar(&flags.writeBurst, "write-burst", 1, "config writes allowed at once before --write-rate applies")
	f.DurationVar(&flags.backoffMax, "backoff-max", 10*time.Minute, "longest wait before retrying a machine that keeps failing")
	f.StringSliceVar(&flags.checks, "checks", nil, "observe only these checks (comma-separated); config is always observed")
	addCertDaysFlag(cmd, &flags.certDays)
	return cmd
}

// checkReconcileFlags refuses flags that cannot go together or do not
// parse, before anything is opened, and reads the mode and the shard.
func (a *app) checkReconcileFlags(flags reconcileFlags) (mode talosapi.Mode, shard reconcile.Shard, err error) {
	if err := a.registry().Validate(flags.checks); err != nil {
		return mode, shard, usageError(err)
	}
	mode, err = talosapi.ParseMode(flags.mode)
	if err != nil {
		return mode, shard, usageError(err)
	}
	shard, err = reconcile.ParseShard(flags.shard)
	if err != nil {
		return mode, shard, usageError(err)
	}
	if flags.once && flags.leaderElect {
		return mode, shard, usageError(errors.New("--once runs one pass now and --leader-elect is for the long-running loop: use one or the other (give each Indexed Job pod its own --shard instead)"))
	}
	if flags.reportOnly && flags.dryRun {
		return mode, shard, usageError(errors.New("--report-only and --dry-run exclude each other: --report-only already sends nothing"))
	}
	if err := checkPullTimeout(flags.pullTimeout, flags.pullTimeoutSet, flags.upgrade); err != nil {
		return mode, shard, err
	}
	if err := checkDrainTimeout(flags.drainTimeout); err != nil {
		return mode, shard, err
	}
	if err := checkCertDays(flags.certDays); err != nil {
		return mode, shard, err
	}
	return mode, shard, nil
}

// reconcile runs the loop (or one pass) as flags say: it checks them, opens
// what the loop reads and writes, takes the cluster's lock unless nothing is
// written, and runs, with or without leader election.
func (a *app) reconcile(ctx context.Context, flags reconcileFlags) error {
	mode, shard, err := a.checkReconcileFlags(flags)
	if err != nil {
		return err
	}
	log := a.loopLogger()
	routeLibraryLogs(log) // client-go's leader election logs at info
	tc, err := talosapi.LoadTalosconfig(a.settings.Talosconfig)
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	dialer, err := a.newDialer(tc)
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	kube, ex, err := a.loopKubeClients()
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	var held *clusterLock
	if !flags.reportOnly && !flags.dryRun {
		// one writer per cluster, held for the whole run: a human's
		// apply is refused while it runs. With --leader-elect the
		// election is the Lease; without it the Lease is taken as
		// apply takes it, so a reconcile --once from cron and a
		// reconcile Deployment exclude each other.
		lf := flags.lock
		lf.leaseNamespace, lf.leaseName = flags.leaseNamespace, flags.leaseName
		lf.electing = flags.leaderElect
		if held, err = a.writeLock(ctx, a.settings.Inventory, kube, lf, false); err != nil {
			return err
		}
		defer held.Release()
		ctx = held.Context()
	}
	identity := a.identity()
	metrics := reconcile.NewMetrics()
	var audit *reconcile.AuditLog
	if flags.auditLog != "" {
		if audit, err = reconcile.OpenAuditLog(flags.auditLog, identity, shard); err != nil {
			return exitWith(exitTrouble, err)
		}
		defer audit.Close()
	}
	certs := a.certOptions(nil, dialer)
	certs.Threshold = certThreshold(flags.certDays)
	elect, err := a.election(flags, shard, kube, identity, log, metrics)
	if err != nil {
		return err
	}
	opts := flags.loopOptions(mode, shard, a.settings.Concurrency, a.settings.Timeout)
	opts.Source = reconcile.FileSourceWith(a.settings.Inventory, a.ageIdentities())
	opts.Changes.Dialer, opts.Changes.Kube = dialer, kube
	opts.Families = checks.Families(checks.Options{Exec: ex, Certs: certs})
	opts.Simulated = a.settings.Simulated
	opts.Metrics, opts.Audit, opts.Log = metrics, audit, log
	if elect != nil {
		opts.Leading = elect.Leading
	} else {
		metrics.SetLeader(true)
	}
	loop := reconcile.NewLoop(opts)
	if flags.metricsAddr != "" {
		ready := func() error {
			if elect != nil && !elect.Leading() {
				return nil // a standby is ready: it has nothing to do until it leads
			}
			return loop.Ready()
		}
		stop, err := serveMetrics(flags.metricsAddr, metrics.Handler(ready), log)
		if err != nil {
			return exitWith(exitTrouble, err)
		}
		defer stop()
	}
	log.Info("reconcile starting", "inventory", a.settings.Inventory, "interval", flags.interval, "shard", shard.String(),
		"report-only", flags.reportOnly, "dry-run", flags.dryRun, "leader-elect", flags.leaderElect, "identity", identity)
	return a.runLoop(ctx, flags.once, loop, elect, held, log)
}

// loopOptions are the loop's settings as the flags give them (the
// connections, logs and metrics are the caller's to add).
func (f reconcileFlags) loopOptions(mode talosapi.Mode, shard reconcile.Shard, concurrency int, timeout time.Duration) reconcile.LoopOptions {
	return reconcile.LoopOptions{
		Changes: reconcile.Changes{
			Mode: mode, MaxUnavailable: f.maxUnavailable, AllowQuorumLoss: f.allowQuorumLoss,
			Upgrades: f.upgrades(), Joins: f.join, ForceDeprecatedAPIs: f.force,
			Concurrency: concurrency, Timeout: timeout, Wait: f.wait, PullTimeout: f.pullTimeout,
			Drain: f.drain, DrainTimeout: f.drainTimeout,
		},
		Checks: f.checks, Interval: f.interval, ReportOnly: f.reportOnly, DryRun: f.dryRun,
		Workers: concurrency, Grace: f.grace, Shard: shard,
		WriteRate: f.writeRate, WriteBurst: f.writeBurst, BackoffMax: f.backoffMax,
	}
}

// election is the leader election of --leader-elect, nil without it.
func (a *app) election(flags reconcileFlags, shard reconcile.Shard, kube kubernetes.Interface, identity string, log *slog.Logger, metrics *reconcile.Metrics) (*reconcile.LeaderElection, error) {
	if !flags.leaderElect {
		return nil, nil
	}
	lc, err := leaseClient(kube)
	if err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	name := flags.leaseName
	if shard.Count > 1 {
		name = fmt.Sprintf("%s-%d-of-%d", name, shard.Index, shard.Count)
	}
	return &reconcile.LeaderElection{
		Client: lc, Namespace: a.leaseNamespace(flags.leaseNamespace), Name: name, Identity: identity,
		LeaseDuration: flags.leaseDuration, RenewDeadline: flags.renewDeadline, RetryPeriod: flags.retryPeriod,
		Release: true, Log: log, Metrics: metrics,
	}, nil
}

// runLoop runs one pass (once) or the loop, under elect when given, and
// says how it ended: a lost lock is exit 2 whatever the loop did.
func (a *app) runLoop(ctx context.Context, once bool, loop *reconcile.Loop, elect *reconcile.LeaderElection, held *clusterLock, log *slog.Logger) error {
	if once {
		res := loop.Once(ctx)
		printPass(a.streams.Out, res)
		if lost := held.Lost(); lost != nil {
			return exitWith(exitTrouble, lost)
		}
		if code := res.ExitCode(); code != 0 {
			return exitWith(code, res.InventoryErr)
		}
		return nil
	}
	var err error
	if elect != nil {
		err = elect.Run(ctx, loop.Run)
	} else {
		err = loop.Run(ctx)
	}
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	if lost := held.Lost(); lost != nil {
		return exitWith(exitTrouble, lost)
	}
	log.Info("reconcile stopped")
	return nil
}

// loopLogger logs at info by default: a loop that runs for months must say
// what it does without -v.
func (a *app) loopLogger() *slog.Logger {
	s := a.settings
	if s.Verbose == 0 {
		s.Verbose = 1
	}
	return newLogger(a.streams.Err, s)
}

// identity names this instance in the Lease and the audit log: the pod name
// when the Deployment passes it, else the host name, with a random suffix so
// that two processes on one host differ.
func (a *app) identity() string {
	if pod := a.getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

func (a *app) leaseNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if ns := a.getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return "devata" // deploy/'s namespace: where a reconcile Deployment holds it
}

// loopKubeClients are the kubeconfig's client and pods/exec transport or,
// in a pod, the in-cluster ones; nil when neither is there (the Kubernetes
// side of checks is then Unknown and --leader-elect refuses).
func (a *app) loopKubeClients() (kubernetes.Interface, netcheck.Execer, error) {
	if a.settings.Kubeconfig != "" {
		return kubeClients(a.settings.Kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, nil, nil //nolint:nilerr // not in a pod: no Kubernetes client
	}
	return kubeClientsFor(cfg)
}

// leaseClient is the Kubernetes client the Lease needs.
func leaseClient(kube kubernetes.Interface) (kubernetes.Interface, error) {
	if kube == nil {
		return nil, errors.New("--leader-elect needs the Kubernetes API: pass --kubeconfig or run in a pod")
	}
	return kube, nil
}

func serveMetrics(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// printPass prints a --once pass: the drift report and what happened to each
// queued machine.
func printPass(w io.Writer, res *reconcile.PassResult) {
	if res.Report != nil {
		_ = drift.WriteTable(w, res.Report, drift.TableOptions{})
	}
	if res.InventoryErr != nil {
		fmt.Fprintf(w, "inventory invalid: %v\n", res.InventoryErr)
	}
	for _, name := range res.Queued {
		fmt.Fprintf(w, "%-20s %s\n", name, res.Outcomes[name])
		if e := res.Errors[name]; e != "" {
			fmt.Fprintf(w, "    %s\n", e)
		}
		if h := res.Held[name]; h != "" {
			fmt.Fprintf(w, "    %s\n", h)
		}
	}
	for _, name := range res.BackingOff {
		fmt.Fprintf(w, "%-20s backing off\n", name)
	}
	if res.Blocked != "" {
		fmt.Fprintf(w, "rollout stopped: %s\n", res.Blocked)
	}
	if res.Manifests != "" {
		fmt.Fprintf(w, "bootstrap manifests: %s\n", res.Manifests)
	}
	if res.ManifestsErr != "" {
		fmt.Fprintf(w, "bootstrap manifests: %s\n", res.ManifestsErr)
	}
	// the viaKubernetes labels and taints (reconcile/loop_nodekeys.go)
	for _, line := range res.NodeKeys {
		fmt.Fprintln(w, line)
	}
	if res.NodeKeysErr != "" {
		fmt.Fprintln(w, res.NodeKeysErr)
	}
}
