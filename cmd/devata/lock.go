package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/lock"
	"devata.dev/devata/talosapi"
)

// lockFlags are how a writing command takes the cluster's lock.
type lockFlags struct {
	wait                      time.Duration
	noLease                   bool
	leaseNamespace, leaseName string
	// electing: the command campaigns for the Lease itself
	// (reconcile --leader-elect), so only the host's lock is taken here.
	electing bool
}

// register adds --wait-lock and --no-lease and, unless the command has its
// own (reconcile's --leader-elect uses the same Lease), --lease-namespace
// and --lease-name.
func (f *lockFlags) register(cmd *cobra.Command, leaseFlags bool) {
	cmd.Flags().DurationVar(&f.wait, "wait-lock", 0, "if another devata writer holds the cluster's lock or Lease, wait up to this long for it (default: refuse at once, naming the holder)")
	cmd.Flags().BoolVar(&f.noLease, "no-lease", false, "take only this host's lock, not the cluster's Lease: for when the Kubernetes API is down (then no in-cluster writer can renew the Lease either)")
	if leaseFlags {
		cmd.Flags().StringVar(&f.leaseNamespace, "lease-namespace", "", "namespace of the cluster's writer Lease (default: the pod's namespace, else devata)")
		cmd.Flags().StringVar(&f.leaseName, "lease-name", defaultLeaseName, "name of the cluster's writer Lease (the one devata reconcile --leader-elect campaigns for)")
	}
}

const defaultLeaseName = "devata-reconcile"

// clusterLock is a held cluster lock: this host's flock and, when the
// Kubernetes API serves, the cluster's writer Lease.
type clusterLock struct {
	host  *lock.Lock
	lease *lock.HeldLease
	ctx   context.Context
}

// Context ends when the Lease is lost: start no further change after it.
func (l *clusterLock) Context() context.Context { return l.ctx }

// Lost says why the Lease was lost, or nil.
func (l *clusterLock) Lost() error {
	if l == nil || l.lease == nil || l.ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: the rollout stopped before its next change; run the command again once the Lease is free", context.Cause(l.ctx))
}

// Release gives both up, the Lease first.
func (l *clusterLock) Release() {
	if l == nil {
		return
	}
	l.lease.Release()
	_ = l.host.Release()
}

// writeLock takes the cluster's lock before a command plans any write
// (package lock): one writer per cluster. Without an inventory that loads
// it takes none: the command fails on the inventory before it could write
// anything.
func (a *app) writeLock(ctx context.Context, inventoryPath string, kube kubernetes.Interface, f lockFlags, failOpen bool) (*clusterLock, error) {
	inv, lerr := inventory.Load(inventoryPath)
	if lerr != nil {
		return &clusterLock{ctx: ctx}, nil //nolint:nilerr // the command reports the inventory's errors itself
	}
	return a.lockCluster(ctx, inv, kube, f, failOpen)
}

// lockCluster takes this host's lock on the inventory's cluster, then,
// with a Kubernetes client, the cluster's writer Lease (and every shard's),
// so that writers on other hosts (a reconcile Deployment, another
// operator) are excluded too. The Lease is renewed until Release. With
// failOpen (bootstrap, whose job is to make the API exist), an API that
// does not answer leaves only the host's lock, with a warning; otherwise
// the write is refused and the error names --no-lease.
func (a *app) lockCluster(ctx context.Context, inv *inventory.Inventory, kube kubernetes.Interface, f lockFlags, failOpen bool) (*clusterLock, error) {
	me := lock.Me(commandLine())
	path, err := lock.Path(inv.Path, inv.Cluster.Name)
	if err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	hl, err := lock.Acquire(ctx, path, me, f.wait)
	if err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	a.log.Debug("holding this host's lock on the cluster", "path", hl.Path)
	cl := &clusterLock{host: hl, ctx: ctx}
	switch {
	case f.electing:
		return cl, nil
	case f.noLease:
		fmt.Fprintln(a.streams.Err, "warning: --no-lease: only this host's lock guards this write; a devata writer on another host (a reconcile Deployment) is not excluded")
		return cl, nil
	case kube == nil:
		a.log.Info("no Kubernetes API configured: only this host's lock guards this write (pass --kubeconfig to take the cluster's Lease too)")
		return cl, nil
	}
	spec := lock.LeaseSpec{Client: kube, Namespace: a.leaseNamespace(f.leaseNamespace), Name: cmp.Or(f.leaseName, defaultLeaseName)}
	lease, err := spec.Acquire(ctx, lock.Identity(me), f.wait)
	var noNS *lock.NoNamespaceError
	var unreachable *lock.UnreachableError
	switch {
	case err == nil:
		a.log.Debug("holding the cluster's Lease", "namespace", spec.Namespace, "names", lease.Names)
		cl.lease, cl.ctx = lease, lease.Context()
		return cl, nil
	case errors.As(err, &noNS):
		// advice, not alarm: nothing is wrong with this write, and the
		// line says what to do once (issue 33: it read as a warning)
		fmt.Fprintf(a.streams.Err, "advice: kubectl create namespace %s, so that devata writers on different hosts (a reconcile Deployment too) exclude each other through the cluster's Lease; namespace %s does not exist, so this write is guarded by this host's lock only\n", noNS.Namespace, noNS.Namespace)
		return cl, nil
	case failOpen && errors.As(err, &unreachable):
		fmt.Fprintf(a.streams.Err, "warning: the cluster's Lease could not be taken (%v); bootstrap goes on with only this host's lock\n", unreachable.Err)
		return cl, nil
	}
	_ = hl.Release()
	return nil, exitWith(exitTrouble, err)
}

// existingKubeClient is a client for the kubeconfig at path when that file
// exists, else nil: a cluster without Kubernetes yet has no Lease.
func existingKubeClient(path string) (kubernetes.Interface, error) {
	if path == "" {
		return nil, nil
	}
	// KUBECONFIG may be a list (kubectl's form): any file of it will do
	for _, p := range filepath.SplitList(path) {
		if _, err := os.Stat(p); err == nil {
			return talosapi.KubeClient(path)
		}
	}
	return nil, nil // no kubeconfig yet: no API to take a Lease in
}

// commandLine is how this process was started, for the lock's holder.
func commandLine() string {
	line := "devata " + strings.Join(os.Args[1:], " ")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}
