package main

import (
	"time"

	"github.com/spf13/cobra"

	"devata.dev/devata/reconcile"
)

// dropExtensionsUsage is --drop-extensions' help.
const dropExtensionsUsage = "allow an upgrade whose installer lacks system extensions the machine runs (they are removed), or whose machine's extensions could not be read"

func (a *app) newUpgradeCommand() *cobra.Command {
	flags := applyFlags{mode: "auto", upgrades: &reconcile.Upgrades{Only: true}}
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade Talos on the machines to the inventory's cluster.talosVersion and installer",
		Long: `upgrade asks every machine which Talos version it runs and upgrades those that
do not run cluster.talosVersion to it, from cluster.installImage (an Image
Factory installer carries its schematic): control planes one at a time, each
gated before and after on etcd health and on etcd keeping quorum while it is
down, then workers in batches of --max-unavailable; under the cluster's lock
and Lease, as devata apply. A machine on Talos 1.13 or later is upgraded as
talosctl does it there: the installer is pulled (ImageService.Pull) and run
(LifecycleService.Upgrade, its output the wait's heartbeat), then the machine
is rebooted; an older one through MachineService.Upgrade, which pulls, installs
and reboots in one call. devata waits until the machine is back, running and
ready, on the new version, and stops at the first failure (a machine that comes
back on its old version did not take the new one). Rerunning continues from
what the machines report: machines already upgraded get no call.

System extensions: a machine's installer is the Image Factory installer of its
schematic (cluster.schematic, the role's, or its own) unless
cluster.installImage is given. A machine that runs cluster.talosVersion but
booted from another schematic is reinstalled at that version (how Talos adds
or removes extensions), and the wait then needs the new schematic booted. An
upgrade whose installer lacks extensions the machine runs (ExtensionStatus)
would remove them: it is refused unless --drop-extensions, as is one whose
machine's extensions could not be read.

The installer pull: Talos pulls the installer inside the call that asks for
it (MachineService.Upgrade, or ImageService.Pull on 1.13 and later) and
cancels the pull when that call's deadline passes. --pull-timeout bounds that
call, not --timeout; while it waits devata prints a line every 15 seconds
(on 1.13 and later with the bytes downloaded so far). A call that runs out of
--pull-timeout started nothing: devata says so at once, with what to do (a
faster registry or a mirror, on 1.13 and later a pull beforehand with
talosctl image pull --namespace system, or a longer --pull-timeout), and
stops there.

The drain: Talos drains a Node only in the legacy MachineService.Upgrade
sequence, not on a LifecycleService upgrade or a staged one
(v1alpha1_sequencer.go). devata cordons and drains each machine's Node itself
before its upgrade, through the Eviction API (PodDisruptionBudgets respected,
DaemonSet and mirror pods left), and uncordons it once the machine is back on
the new version and ready. A drain that does not finish within
--drain-timeout leaves that machine on its version, its Node uncordoned,
names the pods and budgets that block it, and stops. Without a kubeconfig it
says so and upgrades undrained; --drain=false never drains.

The version rule: never a downgrade (talosctl rollback goes back to the
previous boot), and one minor release at a time: a longer way goes hop by hop,
each on the newest patch of the minor in between from the same installer
repository (v1.12.4 → v1.13.9 → v1.14.1), one round per hop in the same run;
--force jumps straight to cluster.talosVersion. Configs are not changed
(devata apply does that; apply --upgrade does both, configs first), but each
machine's config is compared for the Talos it runs. Every upgrade reboots its
machine, so it is confirmed at the terminal unless --yes.

Exit 0 done (or nothing to do), 1 some machines not upgraded, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags.pullTimeoutSet = cmd.Flags().Changed("pull-timeout")
			return a.apply(cmd.Context(), flags)
		},
	}
	cmd.Flags().BoolVar(&flags.dryRun, "dry-run", false, "print the plan; upgrade nothing")
	addPlanOutputFlag(cmd, &flags.output)
	cmd.Flags().BoolVar(&flags.yes, "yes", false, "do not ask before upgrading (every upgrade reboots its machine)")
	addMachinesFlags(cmd, &flags.machines)
	cmd.Flags().IntVar(&flags.maxUnavailable, "max-unavailable", 1, "workers upgraded at once")
	cmd.Flags().BoolVar(&flags.allowQuorum, "allow-quorum-loss", false, quorumLossUsage)
	cmd.Flags().DurationVar(&flags.wait, "wait", 15*time.Minute, "how long to wait for a machine to come back on the new version and for etcd to be healthy")
	cmd.Flags().BoolVar(&flags.upgrades.Force, "force", false, "allow a downgrade or a jump of more than one minor release")
	cmd.Flags().BoolVar(&flags.upgrades.DropExtensions, "drop-extensions", false, dropExtensionsUsage)
	addPullTimeoutFlag(cmd, &flags.pullTimeout, false)
	addDrainFlags(cmd, &flags.drain, &flags.drainTimeout)
	addIgnoreHoldFlag(cmd, &flags.ignoreHold)
	cmd.Flags().BoolVar(&flags.upgrades.Stage, "stage", false, "stage the upgrade: Talos reboots and installs it during that boot, before anything holds the files (talosctl upgrade --stage)")
	flags.lock.register(cmd, true)
	return cmd
}
