package reconcile

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The loop ends a Kubernetes version change as devata apply does
// (kubemanifests.go): the bootstrap manifests synced once every component
// moved. The loop plans and changes one machine at a time, so no single
// change knows that it was the last: the first change toward a version
// notes on the kube-system Namespace that its manifests are due
// (kubemanifests_note.go), and every pass, once its changes are done,
// reads the note and, when it names the inventory's version, looks at
// every machine of the inventory (every shard's: the manifests are the
// cluster's) and syncs when all of them run it. The pass is
// level-triggered on the note: a loop restarted between the last move and
// the sync finds it and syncs; with no note nothing is synced, so an
// operator's own edit of CoreDNS stays. A machine still behind (held,
// unreachable, in another shard's queue) keeps the sync pending, said on
// each pass, until it moved; a sync that fails is tried again on the next
// pass. Where the note could not be written it is in the reconciler's
// memory, and a restart loses it (said once, when it was kept there).
//
// The sync is an action of the audit log like a machine's change, of the
// cluster (machine ""): a started record before anything is sent, and
// exactly one final record after, converged or failed, with the version
// and the objects it changed (by name).

// ActionSyncManifests is the audit log's and the metrics' action of a
// sync of the bootstrap manifests.
const ActionSyncManifests = "sync-bootstrap-manifests"

// syncManifestsAfter syncs the bootstrap manifests when the note says
// they are due for the inventory's Kubernetes version and every machine
// now runs it; it says on res what it did (PassResult.Manifests) or why
// the sync failed (PassResult.ManifestsErr).
func (l *Loop) syncManifestsAfter(ctx context.Context, d *Desired, res *PassResult) {
	if ctx.Err() != nil || l.opts.ReportOnly || l.opts.DryRun {
		return
	}
	to := d.Inventory.Cluster.KubernetesVersion
	log := l.opts.Log.With("kubernetes", to)
	ro := l.opts.Changes.Rollout(d.Inventory, nil, func(format string, args ...any) {
		log.Info(strings.TrimSpace(fmt.Sprintf(format, args...)))
	})
	notes := &l.rec.moved
	ro.due = notes
	rctx, cancel := context.WithTimeout(ctx, ro.Timeout)
	due, err := notes.due(rctx, ro.Kube)
	cancel()
	if err != nil {
		log.Debug("the note of due bootstrap manifests could not be read; the one in memory counts", "error", err.Error())
	}
	switch {
	case due == "":
		return
	case due != to:
		res.Manifests = fmt.Sprintf("the inventory moved on: the bootstrap manifests of Kubernetes %s were never synced, and the inventory says %s; the next change toward it replaces the note", due, to)
		log.Warn(res.Manifests)
		notes.forget(due)
		return
	case notes.refusedFor(to):
		res.Manifests = "not synced: devata's Kubernetes identity may not write them; run talosctl upgrade-k8s --to " + strings.TrimPrefix(to, "v") + " against a control plane"
		return
	}
	if behind := kubeBehind(ctx, ro.Dialer, d.Inventory, to, l.opts.Changes.Concurrency, ro.Timeout); len(behind) > 0 {
		res.Manifests = "pending: " + strings.Join(behind, "; ")
		log.Info("bootstrap manifests wait until every machine runs the new Kubernetes version", "behind", strings.Join(behind, "; "))
		return
	}
	if l.opts.Leading != nil && !l.opts.Leading() {
		log.Warn("bootstrap manifests not synced: this instance no longer leads")
		return
	}
	l.syncAudited(ctx, d, ro, to, res)
}

// syncAudited syncs the bootstrap manifests of to between its audit
// records and forgets the note once they are synced.
func (l *Loop) syncAudited(ctx context.Context, d *Desired, ro *Rollout, to string, res *PassResult) {
	notes := ro.notes()
	rec := AuditRecord{Action: ActionSyncManifests, Kubernetes: to, Reason: "every machine runs Kubernetes " + to,
		InventoryCommit: d.Provenance.Commit, InventoryDirty: d.Provenance.Dirty, InventorySHA256: d.Provenance.InventorySHA256, Result: ResultStarted}
	if ro.Kube == nil {
		notes.forget(to)
		res.ManifestsErr = "the bootstrap manifests (CoreDNS, kube-proxy) were not synced: devata has no kubeconfig (pass --kubeconfig, or run in a pod); run talosctl upgrade-k8s --to " + strings.TrimPrefix(to, "v") + " against a control plane"
		l.opts.Log.Error(res.ManifestsErr)
		return
	}
	// the audit log fails closed, as for a machine's change
	if err := l.opts.Audit.Record(rec); err != nil {
		l.opts.Metrics.errors.WithLabelValues(stageAudit).Inc()
		res.ManifestsErr = fmt.Sprintf("the bootstrap manifests were not synced: %v; fix or free the audit log path, or run without --audit-log", err)
		l.opts.Log.Error(res.ManifestsErr)
		return
	}
	changes, err := ro.syncBootstrapManifests(ctx, to)
	rec.Result = ResultConverged
	for _, c := range changes {
		if c.Action != "unchanged" {
			rec.Objects = append(rec.Objects, c.Action+" "+c.Object)
		}
	}
	if err != nil {
		rec.Result, rec.Error = ResultFailed, err.Error()
	}
	if aerr := l.opts.Audit.Record(rec); aerr != nil {
		l.opts.Metrics.errors.WithLabelValues(stageAudit).Inc()
		l.opts.Log.Error("the audit record of the bootstrap manifests' sync could not be written", "result", rec.Result, "error", aerr.Error())
	}
	l.opts.Metrics.actions.WithLabelValues(ActionSyncManifests, rec.Result).Inc()
	log := l.opts.Log.With("kubernetes", to)
	if err != nil {
		res.ManifestsErr = err.Error()
		if apierrors.IsForbidden(err) {
			// deploy/'s role writes none of them: no later pass can either
			notes.refuse(to)
			res.ManifestsErr += "; devata's Kubernetes identity may not write them (deploy/'s role grants no writes; deploy/components/kubernetes-upgrade does): not tried again until devata restarts"
		}
		l.opts.Metrics.errors.WithLabelValues(stageApply).Inc()
		log.Error("bootstrap manifests not synced; tried again on the next pass", "error", err.Error())
		return
	}
	res.Manifests = "synced for Kubernetes " + to
	if err := notes.done(ctx, ro.Kube, to); err != nil {
		log.Warn("the bootstrap manifests are synced, but their note stays: the next pass syncs them again (no change)", "error", err.Error())
	}
}
