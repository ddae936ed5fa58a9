package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

// applyFlags are apply's flags.
type applyFlags struct {
	mode           string
	dryRun, yes    bool
	allowQuorum    bool
	machines       []string
	maxUnavailable int
	wait           time.Duration
	lock           lockFlags
	// upgrade plans Talos upgrades too (apply --upgrade); upgrades, set
	// by devata upgrade, plans only them.
	upgrade  bool
	upgrades *reconcile.Upgrades
	// dropExtensions: --drop-extensions (reconcile.Upgrades.DropExtensions)
	dropExtensions bool
	// pullTimeout: --pull-timeout (reconcile.Rollout.PullTimeout);
	// pullTimeoutSet when given on the command line
	pullTimeout    time.Duration
	pullTimeoutSet bool
	// drain, drainTimeout: --drain, --drain-timeout (reconcile.Rollout.Drain)
	drain        bool
	drainTimeout time.Duration
	// output: -o, text or json (the plan as JSON, with --dry-run)
	output string
	// ignoreHold: --ignore-hold, the held machines --machines names may be changed
	ignoreHold bool
	// forceDeprecated: apply --force, a Kubernetes minor upgrade while
	// clients still request APIs it removes (reconcile.Planner.ForceDeprecatedAPIs)
	forceDeprecated bool
}

// addIgnoreHoldFlag adds --ignore-hold to apply and upgrade.
func addIgnoreHoldFlag(cmd *cobra.Command, p *bool) {
	cmd.Flags().BoolVar(p, "ignore-hold", false, "change the machines --machines names even when the inventory holds them (machines[].hold); other held machines stay untouched")
}

// ignoredHolds is the held machines --ignore-hold lets this run change:
// those --machines names, which it must name.
func ignoredHolds(ignore bool, only []*inventory.Machine) (map[string]bool, error) {
	if !ignore {
		return nil, nil
	}
	if len(only) == 0 {
		return nil, usageError(errors.New("--ignore-hold goes with --machines NAME: name each held machine to change (the others stay held)"))
	}
	out := map[string]bool{}
	var notHeld []string
	for _, m := range only {
		if m.ActiveHold() == nil {
			notHeld = append(notHeld, m.Name)
			continue
		}
		out[m.Name] = true
	}
	if len(out) == 0 {
		return nil, usageError(fmt.Errorf("--ignore-hold: %s %s not held by the inventory (machines[].hold): drop --ignore-hold", strings.Join(notHeld, ", "), plural(len(notHeld), "is", "are")))
	}
	return out, nil
}

// addDrainFlags adds --drain and --drain-timeout.
func addDrainFlags(cmd *cobra.Command, drain *bool, timeout *time.Duration) {
	cmd.Flags().BoolVar(drain, "drain", true, "cordon and drain a machine's Node before a change that reboots it (an upgrade, a rebooting apply; Talos itself drains only inside the legacy MachineService.Upgrade) through the Eviction API, PodDisruptionBudgets respected, DaemonSet and mirror pods left; uncordon it once the machine is back and ready; --drain=false reboots without a drain")
	cmd.Flags().DurationVar(timeout, "drain-timeout", reconcile.DefaultDrainTimeout, "how long a drain may take: past it that machine is not changed, its Node is uncordoned again, and the pods that block the drain are named with their PodDisruptionBudgets")
}

// checkDrainTimeout refuses a --drain-timeout that is not positive.
func checkDrainTimeout(d time.Duration) error {
	if d <= 0 {
		return usageError(fmt.Errorf("--drain-timeout %s: give a positive duration, e.g. %s", d, reconcile.DefaultDrainTimeout))
	}
	return nil
}

// pullTimeoutUsage is --pull-timeout's help.
const pullTimeoutUsage = "how long Talos may take to pull an upgrade's installer, inside the call that pulls it (MachineService.Upgrade; ImageService.Pull on Talos 1.13 and later): Talos cancels the pull at this deadline, and devata then reports the upgrade not started"

// addPullTimeoutFlag adds --pull-timeout (default
// reconcile.DefaultPullTimeout); withUpgrade: it goes with --upgrade.
func addPullTimeoutFlag(cmd *cobra.Command, d *time.Duration, withUpgrade bool) {
	usage := pullTimeoutUsage
	if withUpgrade {
		usage = "with --upgrade: " + usage
	}
	cmd.Flags().DurationVar(d, "pull-timeout", reconcile.DefaultPullTimeout, usage)
}

// checkPullTimeout refuses a --pull-timeout that is not positive, or
// given where no upgrade runs.
func checkPullTimeout(d time.Duration, set, upgrades bool) error {
	switch {
	case d <= 0:
		return usageError(fmt.Errorf("--pull-timeout %s: give a positive duration, e.g. %s", d, reconcile.DefaultPullTimeout))
	case set && !upgrades:
		return usageError(errors.New("--pull-timeout goes with --upgrade: only an upgrade pulls an installer"))
	}
	return nil
}

// changes are the settings of apply's plan and rollout as the flags give
// them (the connections are the caller's to add): apply joins machines in
// maintenance mode, and keeps no maintenance window (an operator at the
// console chose the time).
func (f applyFlags) changes(mode talosapi.Mode, concurrency int, timeout time.Duration) reconcile.Changes {
	return reconcile.Changes{
		Mode: mode, Concurrency: concurrency, Timeout: timeout, Wait: f.wait, PullTimeout: f.pullTimeout,
		MaxUnavailable: f.maxUnavailable, AllowQuorumLoss: f.allowQuorum,
		Upgrades: f.upgrades, Joins: true, ForceDeprecatedAPIs: f.forceDeprecated,
		Drain: f.drain, DrainTimeout: f.drainTimeout,
	}
}

// verb is the command that rolls the plan out, for messages.
func (f applyFlags) verb() string {
	if f.upgrades != nil && f.upgrades.Only {
		return "upgrade"
	}
	return "apply"
}

func (a *app) newApplyCommand() *cobra.Command {
	var flags applyFlags
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Roll the desired configs out to the machines that drifted",
		Long: `apply observes every machine, dry-runs the desired config on each one whose
applied config differs (the others get no call at all), prints the plan with
redacted diffs, then rolls it out: control planes one at a time, each gated
before and after on etcd health and quorum, then workers in batches of
--max-unavailable, none with more of a group's machines than the group's
rollout.maxUnavailable. A change that reboots a control plane must leave etcd a
quorum without it: with n members, n−1 healthy ones must be at least ⌊n/2⌋+1,
so with one or two control planes it is refused (the Kubernetes API would stop
until the machine returns) unless --allow-quorum-loss. After each change it waits until the machine runs the
desired config again, through its reboot if there is one. It stops at the first
failed gate or step and says where; rerunning continues from what the machines
report.

A machine that answers in maintenance mode (added to the inventory, or its disk
lost) joins the running cluster: its config goes over the maintenance
connection, which authenticates no one (as talosctl apply-config --insecure),
control planes one at a time under the etcd gates; apply waits until it runs
its config, a control plane is an etcd member, and its Node registered.

A changed cluster.kubernetesVersion moves one component at a time, as
talosctl upgrade-k8s does: every kube-apiserver, then the controller-managers,
schedulers and kubelets, each confirmed on its static pod or Node; the plan
shows the steps, and what waits while an API server lags. A new minor
release is refused while clients still request an API it removes (the API
server's apiserver_requested_deprecated_apis, read through --kubeconfig),
unless --force.

Before a change that reboots a configured machine devata cordons its Node and
drains it through the Eviction API (PodDisruptionBudgets respected, DaemonSet
and mirror pods left, as kubectl drain --ignore-daemonsets
--delete-emptydir-data): Talos does not drain on a rebooting apply or on an
upgrade through LifecycleService or a staged one. It uncordons the Node once
the machine is back and ready (a Node someone else cordoned stays so). A
drain that does not finish within --drain-timeout leaves that machine
unchanged, its Node uncordoned, names the pods and budgets that block it, and
stops the rollout. Without a kubeconfig it says so and reboots undrained;
--drain=false never drains. The plan says which applies drain.

Then it sets each machine's viaKubernetes labels and taints (those
NodeRestriction forbids a worker's kubelet, and so Talos, to set) on its Node
through the Kubernetes API with --kubeconfig, changed machines or not: it
owns only the keys it set (the annotations devata.dev/owned-labels and
owned-taints), so labels and taints Talos or kubectl set stay, and removes
those the inventory dropped. A held machine's Node is left alone; a Node not
registered yet waits for the next apply or the reconcile loop. Nothing of
this goes to Talos; --dry-run says what it would set, take over and remove
(with -o json, as the document's nodeKeys).

A change that reboots a machine (a join too) is confirmed at the terminal
unless --yes; with no terminal apply refuses rather than guess.

Exit 0 done (or nothing to do), 1 some machines not converged, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags.pullTimeoutSet = cmd.Flags().Changed("pull-timeout")
			return a.apply(cmd.Context(), flags)
		},
	}
	cmd.Flags().StringVar(&flags.mode, "mode", "auto", "apply mode: auto, no-reboot, reboot, staged, try")
	addPlanOutputFlag(cmd, &flags.output)
	cmd.Flags().BoolVar(&flags.dryRun, "dry-run", false, "print the plan and diffs; write nothing")
	cmd.Flags().BoolVar(&flags.yes, "yes", false, "do not ask before changes that reboot machines")
	addMachinesFlags(cmd, &flags.machines)
	cmd.Flags().IntVar(&flags.maxUnavailable, "max-unavailable", 1, "workers changed at once")
	cmd.Flags().BoolVar(&flags.allowQuorum, "allow-quorum-loss", false, quorumLossUsage)
	cmd.Flags().DurationVar(&flags.wait, "wait", 10*time.Minute, "how long to wait for a machine to return and for etcd to be healthy")
	cmd.Flags().BoolVar(&flags.upgrade, "upgrade", false, "also upgrade Talos on machines whose config is in sync and whose version or booted schematic is not the inventory's (as devata upgrade)")
	cmd.Flags().BoolVar(&flags.dropExtensions, "drop-extensions", false, dropExtensionsUsage)
	cmd.Flags().BoolVar(&flags.forceDeprecated, "force", false, forceDeprecatedUsage)
	addPullTimeoutFlag(cmd, &flags.pullTimeout, true)
	addDrainFlags(cmd, &flags.drain, &flags.drainTimeout)
	addIgnoreHoldFlag(cmd, &flags.ignoreHold)
	flags.lock.register(cmd, true)
	return cmd
}

// forceDeprecatedUsage is --force's help, in apply and reconcile.
const forceDeprecatedUsage = "upgrade Kubernetes to a new minor release even though clients still request APIs it removes (the API server's apiserver_requested_deprecated_apis)"

const quorumLossUsage = "let a change reboot a control plane even when etcd loses quorum meanwhile (one or two control planes): the Kubernetes API stops until it returns"

// addMachinesFlags adds --machines and its talosctl spelling -n/--nodes;
// both add to one list.
func addMachinesFlags(cmd *cobra.Command, refs *[]string) {
	v := (*machineRefs)(refs)
	cmd.Flags().Var(v, "machines", "only these machines (comma-separated names or addresses; repeatable)")
	cmd.Flags().VarP(v, "nodes", "n", "the same as --machines, as talosctl spells it")
}

// machineRefs is a list flag that every occurrence adds to.
type machineRefs []string

func (r *machineRefs) String() string { return strings.Join(*r, ",") }
func (r *machineRefs) Type() string   { return "strings" }
func (r *machineRefs) Set(s string) error {
	for _, ref := range strings.Split(s, ",") {
		if ref = strings.TrimSpace(ref); ref != "" {
			*r = append(*r, ref)
		}
	}
	return nil
}

func selectMachines(inv *inventory.Inventory, refs []string) ([]*inventory.Machine, error) {
	names, err := inv.Resolve(refs)
	if err != nil {
		return nil, err
	}
	var out []*inventory.Machine
	for _, n := range names {
		out = append(out, inv.Machine(n))
	}
	return out, nil
}

// planExit: 2 when a machine could not be planned, 1 when changes are pending, else 0.
func planExit(pending, skipped []reconcile.Action) error {
	switch {
	case len(skipped) > 0:
		return exitWith(exitTrouble, fmt.Errorf("%d %s could not be planned (see skipped above)", len(skipped), plural(len(skipped), "machine", "machines")))
	case len(pending) > 0:
		return exitWith(exitFailed, nil)
	}
	return nil
}

// confirmReboots asks at a terminal; without one it refuses.
func (a *app) confirmReboots(plan *reconcile.Plan) error {
	var rebooting []string
	for _, act := range plan.Pending() {
		if act.Reboots {
			rebooting = append(rebooting, act.Machine.Name)
		}
	}
	f, ok := a.streams.In.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return exitWith(exitTrouble, fmt.Errorf("these changes reboot %s and there is no terminal to confirm: rerun with --yes to proceed", strings.Join(rebooting, ", ")))
	}
	fmt.Fprintf(a.streams.Err, "These changes reboot %s, one at a time. Continue? [y/N] ", strings.Join(rebooting, ", "))
	line, _ := bufio.NewReader(f).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
		return exitWith(exitFailed, fmt.Errorf("not confirmed: nothing was applied"))
	}
	return nil
}

// apply plans under the cluster's lock (unless a dry run), prints the plan,
// confirms reboots and rolls it out.
func (a *app) apply(ctx context.Context, flags applyFlags) error {
	mode, err := talosapi.ParseMode(flags.mode)
	if err != nil {
		return usageError(err)
	}
	if flags.upgrade && flags.upgrades == nil {
		flags.upgrades = &reconcile.Upgrades{}
	}
	if flags.upgrades != nil {
		flags.upgrades.DropExtensions = flags.upgrades.DropExtensions || flags.dropExtensions
	} else if flags.dropExtensions {
		return usageError(errors.New("--drop-extensions goes with --upgrade: only an upgrade changes a machine's extensions"))
	}
	if err := checkPullTimeout(flags.pullTimeout, flags.pullTimeoutSet, flags.upgrades != nil); err != nil {
		return err
	}
	if err := checkDrainTimeout(flags.drainTimeout); err != nil {
		return err
	}
	switch {
	case flags.output != "text" && flags.output != "json":
		return usageError(fmt.Errorf("-o %q: want text or json", flags.output))
	case flags.output == "json" && !flags.dryRun:
		return usageError(errors.New("-o json prints the plan and goes with --dry-run: a rollout's progress is text"))
	}
	s, err := a.openSession(ctx, false)
	if err != nil {
		return err
	}
	only, err := selectMachines(s.inv, flags.machines)
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	ignoreHold, err := ignoredHolds(flags.ignoreHold, only)
	if err != nil {
		return err
	}
	var held *clusterLock
	if !flags.dryRun {
		// plan under the lock: a plan made before it may be stale
		if held, err = a.lockCluster(ctx, s.inv, s.kube, flags.lock, false); err != nil {
			return err
		}
		defer held.Release()
		ctx = held.Context() // ends if the cluster's Lease is lost
	}
	out := a.streams.Out
	if a.settings.Simulated && flags.output != "json" {
		fmt.Fprintln(out, "SIMULATED: the machines are devata's simulated fleet.")
	}
	changes := flags.changes(mode, a.settings.Concurrency, a.settings.Timeout)
	changes.Dialer, changes.Kube, changes.IgnoreHold = s.dialer, s.kube, ignoreHold
	planner := changes.Planner(s.inv, s.desired.Held(), s.desired.For)
	if flags.output == "json" {
		plan, err := planner.Plan(ctx, only)
		if err != nil {
			return exitWith(exitTrouble, fmt.Errorf("planning interrupted: %w; nothing was changed", err))
		}
		nk := a.runNodeKeys(ctx, flags, s, only, ignoreHold, true)
		if err := writePlanJSON(out, flags.verb(), s.inv, a.inventoryProvenance(ctx, s.inv.Path), a.settings.Simulated, plan, nk); err != nil {
			return exitWith(exitTrouble, err)
		}
		if err := plan.Refusal(); err != nil {
			return exitWith(exitTrouble, err)
		}
		if err := planExit(plan.Pending(), plan.Skipped()); err != nil {
			return err
		}
		return nk.exit
	}
	if line := a.inventoryProvenance(ctx, s.inv.Path).Line(s.inv.Path); line != "" {
		fmt.Fprintln(out, line)
	}
	// an upgrade across several minor releases goes one hop per round: each
	// round plans again from what the machines report, under the same lock
	for round := 0; ; round++ {
		again, err := a.applyRound(ctx, flags, s, changes, planner, held, only, round)
		if !again {
			return a.applyNodeKeys(ctx, flags, s, only, ignoreHold, err)
		}
		fmt.Fprintln(out, plan.StepLine("", "this round is done: planning again (the upgrades its configs went before, or the next hop)"))
	}
}

// applyRound plans, prints, confirms (in the first round) and rolls out
// one plan; again says that it upgraded machines on a hop of a longer way
// (reconcile UpgradeStep.Final) and that another round should follow.
func (a *app) applyRound(ctx context.Context, flags applyFlags, s *session, changes reconcile.Changes, planner *reconcile.Planner, held *clusterLock, only []*inventory.Machine, round int) (again bool, _ error) {
	out := a.streams.Out
	plan, err := planner.Plan(ctx, only)
	if err != nil {
		if lost := held.Lost(); lost != nil {
			err = lost
		}
		return false, exitWith(exitTrouble, fmt.Errorf("planning interrupted: %w; nothing was changed", err))
	}
	if round > 0 {
		fmt.Fprintln(out, "plan, round", round+1)
	}
	plan.Write(out)
	if err := plan.Refusal(); err != nil {
		return false, exitWith(exitTrouble, err)
	}
	pending, skipped := plan.Pending(), plan.Skipped()
	switch {
	case flags.dryRun:
		fmt.Fprintln(out, "dry run: nothing was written")
		return false, planExit(pending, skipped)
	case len(pending) == 0 && flags.verb() == "upgrade":
		fmt.Fprintf(out, "nothing to upgrade: %d of %d machines run Talos %s\n", len(plan.Actions)-len(skipped), len(plan.Actions), s.inv.Cluster.TalosVersion)
		return false, planExit(nil, skipped)
	case len(pending) == 0:
		fmt.Fprintf(out, "nothing to apply: %d of %d machines run their desired config\n", len(plan.Actions)-len(skipped), len(plan.Actions))
		// a Kubernetes version change an earlier run or the loop left unsynced
		if err := changes.Rollout(s.inv, s.desired.Held(), func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }).SyncDueManifests(ctx); err != nil {
			return false, exitWith(exitFailed, err)
		}
		return false, planExit(nil, skipped)
	}
	// the first round's confirmation covers the hops after it: its plan
	// says where each leads
	if round == 0 && plan.Reboots() && !flags.yes {
		if err := a.confirmReboots(plan); err != nil {
			return false, err
		}
	}
	ro := changes.Rollout(s.inv, s.desired.Held(), func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) })
	res := ro.Run(ctx, plan)
	res.Write(out)
	switch lost := held.Lost(); {
	case lost != nil:
		return false, exitWith(exitTrouble, lost)
	case res.Done() && len(res.Partial) > 0 && len(skipped) == 0:
		return false, exitWith(exitFailed, fmt.Errorf("%s changed part way: some Kubernetes components wait (see the plan's warnings); resolve what holds them, then run devata %s again", strings.Join(res.Partial, ", "), flags.verb()))
	case res.Done() && len(skipped) == 0 && (plan.Hops() || plan.UpgradesNext()) && round < maxUpgradeRounds:
		return true, nil
	case res.Done():
		return false, planExit(nil, skipped)
	}
	return false, exitWith(exitFailed, fmt.Errorf("rollout stopped: %s\nresolve it, then run devata %s again: it continues from what the machines report", res.Stopped, flags.verb()))
}

// maxUpgradeRounds bounds the rounds of one run: a hop per minor release
// between the oldest Talos devata supports and the newest.
const maxUpgradeRounds = 4
