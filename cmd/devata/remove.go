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

	"devata.dev/devata/gate"
	"devata.dev/devata/membership"
)

type removeFlags struct {
	dryRun, yes, powerOff, force bool
	address                      string
	wait                         time.Duration
	lock                         lockFlags
}

func (a *app) newRemoveCommand() *cobra.Command {
	var flags removeFlags
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a machine the inventory no longer has: drain, leave etcd, reset, delete its Node",
		Long: `remove takes out of the cluster a machine that was deleted from the inventory
(devata plan lists such orphans: etcd members and Nodes no machine of the
inventory has). The loop never does this on its own. Under the cluster's lock
and Lease it plans from what the cluster reports, prints the plan with the
talosctl and kubectl equivalent of each step, asks, then:

  1. cordons the Node and drains it through the Eviction API
     (PodDisruptionBudgets hold; DaemonSet and mirror pods stay; pods no
     controller owns stop it before anything changes, unless --force);
  2. on a control plane, takes its member out of etcd: EtcdLeaveCluster on
     the machine itself (it stops its etcd and deletes its data), or, when
     the machine is gone, EtcdRemoveMemberByID through a member that stays.
     First the quorum rule: every member that stays must be healthy, and it
     is never etcd's last member;
  3. resets the machine (graceful, the system disk wiped, user disks left
     alone); it reboots into maintenance mode, or halts with --power-off;
  4. deletes the Node.

The machine is found at the dial settings' address for NAME, else --address,
else its Node's InternalIP; before a reset it must prove to be NAME (its
config's hostname or its etcd member ID). Rerunning after a failure continues
from what the cluster reports.

Exit 0 removed (or nothing left to do), 1 the dry run has steps pending or
the plan was not confirmed, 2 error, 64 usage error.`,
		Example: `  devata plan                       # lists orphans: "devata remove cp-3"
  devata remove cp-3 --dry-run
  devata remove cp-3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.remove(cmd.Context(), args[0], flags)
		},
	}
	cmd.Flags().BoolVar(&flags.dryRun, "dry-run", false, "print the plan; change nothing (no lock is taken)")
	cmd.Flags().BoolVar(&flags.yes, "yes", false, "do not ask before removing")
	cmd.Flags().StringVar(&flags.address, "address", "", "the machine's Talos API address (host or host:port) when the dial settings do not name it and its Node has no InternalIP")
	cmd.Flags().BoolVar(&flags.force, "force", false, "also evict pods no controller owns, which deletes them for good (kubectl drain --force); without it such pods stop the removal before anything changes")
	cmd.Flags().BoolVar(&flags.powerOff, "power-off", false, "halt the machine after its reset instead of rebooting it into maintenance mode")
	cmd.Flags().DurationVar(&flags.wait, "wait", 10*time.Minute, "how long each wait may take: the drain, etcd agreeing the member left, the machine coming back after its reset")
	flags.lock.register(cmd, true)
	return cmd
}

func (a *app) remove(ctx context.Context, name string, flags removeFlags) error {
	s, err := a.openSession(ctx, false)
	if err != nil {
		return err
	}
	if s.kube == nil {
		return exitWith(exitTrouble, errors.New("devata remove needs the Kubernetes API to cordon, drain and delete the Node: pass --kubeconfig or set KUBECONFIG; nothing was changed"))
	}
	var held *clusterLock
	if !flags.dryRun {
		if held, err = a.lockCluster(ctx, s.inv, s.kube, flags.lock, false); err != nil {
			return err
		}
		defer held.Release()
		ctx = held.Context()
	}
	out := a.streams.Out
	if a.settings.Simulated {
		fmt.Fprintln(out, "SIMULATED: the machines are devata's simulated fleet.")
	}
	r := &membership.Remover{
		Inventory: s.inv, Dialer: s.dialer, Kube: s.kube,
		Timeout: a.settings.Timeout, Wait: flags.wait, Poll: 2 * time.Second,
		Address: flags.address, PowerOff: flags.powerOff, Force: flags.force,
		Say: func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) },
	}
	plan, err := r.Plan(ctx, name)
	var notOrphan *membership.NotOrphanError
	var unowned *membership.UnownedPodsError
	switch {
	case errors.As(err, &notOrphan), errors.As(err, &unowned):
		return exitWith(exitTrouble, err)
	case errors.Is(err, membership.ErrNothingToRemove):
		fmt.Fprintf(out, "nothing to remove: %v\n", err)
		return nil
	case err != nil:
		var qe *gate.QuorumError
		if lost := held.Lost(); lost != nil {
			err = lost
		} else if errors.As(err, &qe) {
			err = fmt.Errorf("%w; nothing was changed", err)
		}
		return exitWith(exitTrouble, err)
	}
	plan.Write(out)
	pending := plan.Pending()
	switch {
	case flags.dryRun:
		fmt.Fprintln(out, "dry run: nothing was changed")
		if len(pending) > 0 {
			return exitWith(exitFailed, nil)
		}
		return nil
	case len(pending) == 0:
		fmt.Fprintf(out, "nothing left to do: %s is out of the cluster\n", name)
		return nil
	}
	if !flags.yes {
		if err := a.confirmRemove(name); err != nil {
			return err
		}
	}
	err = r.Run(ctx, plan)
	var qe *gate.QuorumError
	switch lost := held.Lost(); {
	case lost != nil:
		return exitWith(exitTrouble, lost)
	case errors.As(err, &qe):
		return exitWith(exitTrouble, fmt.Errorf("%w; nothing more was changed", err))
	case err != nil:
		return exitWith(exitTrouble, err)
	}
	fmt.Fprintf(out, "removed %s: run devata drift to see the cluster without it\n", name)
	return nil
}

// confirmRemove asks at a terminal; without one it refuses.
func (a *app) confirmRemove(name string) error {
	f, ok := a.streams.In.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return exitWith(exitTrouble, fmt.Errorf("removing %s wipes it and there is no terminal to confirm: rerun with --yes to proceed", name))
	}
	fmt.Fprintf(a.streams.Err, "Remove %s from the cluster and wipe it? [y/N] ", name)
	line, _ := bufio.NewReader(f).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
		return exitWith(exitFailed, fmt.Errorf("not confirmed: nothing was changed"))
	}
	return nil
}
