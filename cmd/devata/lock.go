package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"devata.dev/devata/inventory"
	"devata.dev/devata/lock"
)

// waitLockFlag registers --wait-lock on a command that writes to machines.
func waitLockFlag(cmd *cobra.Command, d *time.Duration) {
	cmd.Flags().DurationVar(d, "wait-lock", 0, "if another devata writer holds the cluster's lock, wait up to this long for it (default: refuse at once, naming the holder)")
}

// writeLock takes the cluster's lock before a command plans any write
// (package lock): one writer per cluster from this host. Without an
// inventory that loads it takes none: the command fails on the inventory
// before it could write anything.
func (a *app) writeLock(ctx context.Context, inventoryPath string, wait time.Duration) (release func(), err error) {
	inv, lerr := inventory.Load(inventoryPath)
	if lerr != nil {
		return func() {}, nil //nolint:nilerr // the command reports the inventory's errors itself
	}
	return a.lockCluster(ctx, inv, wait)
}

// lockCluster is writeLock for a command that has loaded the inventory.
func (a *app) lockCluster(ctx context.Context, inv *inventory.Inventory, wait time.Duration) (release func(), err error) {
	l, err := lock.Acquire(ctx, lock.Path(inv.Path, inv.Cluster.Name), lock.Me(commandLine()), wait)
	if err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	a.log.Debug("holding the cluster's lock", "path", l.Path)
	return func() { _ = l.Release() }, nil
}

// commandLine is how this process was started, for the lock's holder.
func commandLine() string {
	line := "devata " + strings.Join(os.Args[1:], " ")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}
