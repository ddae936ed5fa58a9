package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// The loop ends a Kubernetes version change as devata apply does
// (kubemanifests.go): the bootstrap manifests synced once every component
// moved. The loop plans and changes one machine at a time, so no single
// change knows that it was the last: the reconciler notes the version its
// changes moved components to (kubeMoves), and the pass, once its changes
// are done, looks at every machine of the inventory (every shard's: the
// manifests are the cluster's) and syncs when all of them run that
// version. A machine still behind (held, unreachable, in another shard's
// queue) keeps the sync pending, said on each pass, until it moved; a sync
// that fails is tried again on the next pass. The note lives in memory: a
// loop restarted between the last move and the sync does not sync (devata
// apply, or talosctl upgrade-k8s, does).

// kubeMoves is the Kubernetes version the reconciler's changes moved a
// component to and whose bootstrap manifests are not synced yet.
type kubeMoves struct {
	mu sync.Mutex
	to string
}

// note records that a (started) change moved Kubernetes components.
func (k *kubeMoves) note(a Action) {
	if a.Kubernetes == nil || a.Kubernetes.moves() == "no component now" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.to = a.Kubernetes.To
}

func (k *kubeMoves) pending() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.to
}

// done clears the note of to (a later move to another version stays).
func (k *kubeMoves) done(to string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.to == to {
		k.to = ""
	}
}

// syncManifestsAfter syncs the bootstrap manifests when this loop's changes
// moved Kubernetes components and every machine now runs the version they
// moved to; it says on res what it did (PassResult.Manifests) or why the
// sync failed (PassResult.ManifestsErr).
func (l *Loop) syncManifestsAfter(ctx context.Context, d *Desired, res *PassResult) {
	to := l.rec.moved.pending()
	if to == "" || ctx.Err() != nil || l.opts.ReportOnly || l.opts.DryRun {
		return
	}
	inv := d.Inventory
	if to != inv.Cluster.KubernetesVersion {
		// the inventory moved on: the changes toward the new version note it
		l.rec.moved.done(to)
		return
	}
	log := l.opts.Log.With("kubernetes", to)
	if behind := l.kubeBehind(ctx, inv, to); len(behind) > 0 {
		res.Manifests = "pending: " + strings.Join(behind, "; ")
		log.Info("bootstrap manifests wait until every machine runs the new Kubernetes version", "behind", strings.Join(behind, "; "))
		return
	}
	if l.opts.Changes.Kube == nil {
		l.rec.moved.done(to)
		res.ManifestsErr = "the bootstrap manifests (CoreDNS, kube-proxy) were not synced: devata has no kubeconfig (pass --kubeconfig, or run in a pod); run talosctl upgrade-k8s --to " + strings.TrimPrefix(to, "v") + " against a control plane"
		log.Error(res.ManifestsErr)
		return
	}
	if l.opts.Leading != nil && !l.opts.Leading() {
		log.Warn("bootstrap manifests not synced: this instance no longer leads")
		return
	}
	ro := l.opts.Changes.Rollout(inv, nil, func(format string, args ...any) {
		log.Info(strings.TrimSpace(fmt.Sprintf(format, args...)))
	})
	if err := ro.syncBootstrapManifests(ctx, to); err != nil {
		res.ManifestsErr = err.Error()
		if apierrors.IsForbidden(err) {
			// deploy/'s role writes nothing in Kubernetes: no later pass can either
			l.rec.moved.done(to)
			res.ManifestsErr += "; devata's Kubernetes identity may not write them (deploy/'s role grants no writes; deploy/components/kubernetes-upgrade does): not tried again"
		}
		l.opts.Metrics.errors.WithLabelValues(stageApply).Inc()
		log.Error("bootstrap manifests not synced; tried again on the next pass", "error", err.Error())
		return
	}
	l.rec.moved.done(to)
	res.Manifests = "synced for Kubernetes " + to
}

// kubeBehind names the machines whose applied config does not run every
// Kubernetes component at to, each with what it runs (or why it could not
// be read); machines in maintenance mode run none and are not behind.
func (l *Loop) kubeBehind(ctx context.Context, inv *inventory.Inventory, to string) []string {
	ms := make([]*inventory.Machine, len(inv.Machines))
	behind := make([]string, len(ms))
	for i := range inv.Machines {
		ms[i] = &inv.Machines[i]
		behind[i] = ms[i].Name + ": not observed" // until its look says otherwise
	}
	c := l.opts.Changes
	_ = talosapi.ForEach(ctx, ms, c.Concurrency, c.Timeout, func(ctx context.Context, m *inventory.Machine) error {
		behind[slices.Index(ms, m)] = kubeBehindOne(talosapi.Observe(ctx, c.Dialer, m), to)
		return nil
	})
	return slices.DeleteFunc(behind, func(s string) bool { return s == "" })
}

// kubeBehindOne says how one observed machine is behind Kubernetes to, or "".
func kubeBehindOne(o *talosapi.Observation, to string) string {
	name := o.Machine.Name
	switch {
	case o.Maintenance:
		return ""
	case o.Err != nil:
		return name + ": " + o.Err.Error()
	case o.ConfigErr != nil:
		return name + ": " + o.ConfigErr.Error()
	}
	k, err := talosapi.KubeComponentsOf(o.Active)
	if err != nil {
		return name + ": " + err.Error()
	}
	for _, v := range k.Versions() {
		if strings.TrimPrefix(v, "v") != strings.TrimPrefix(to, "v") {
			return name + " runs " + strings.Join(k.Versions(), ", ")
		}
	}
	return ""
}
