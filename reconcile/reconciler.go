package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"devata.dev/devata/inventory"
)

// machineReconciler is one machine's sync, as a controller-runtime
// Reconciler is one object's: a worker hands it a key and it observes and
// decides (plans that machine afresh with the Planner) and acts (changes it
// under the rollout policy when the plan says apply). It keeps no state of
// its own: the settings, the spec in force and the gate's stop are the
// Loop's; the write rate, the worker slots and the changes in flight are the
// term's.
type machineReconciler struct {
	loop *Loop
	term *term
}

// Reconcile plans one machine afresh and, when its config differs, changes it.
// key is the machine's name, as the work queue holds it.
func (r *machineReconciler) Reconcile(ctx context.Context, key string) (string, error) {
	l := r.loop
	l.mu.Lock()
	d := l.desired
	l.mu.Unlock()
	m := d.Inventory.Machine(key)
	if m == nil || !l.Shard.Owns(m) {
		return OutcomeGone, nil
	}
	desired, err := d.Configs.Only(m)
	if err != nil {
		return OutcomeFailed, err
	}
	a, outcome, err := r.planOne(ctx, d, desired, m)
	if outcome != "" {
		return outcome, err
	}
	rec := AuditRecord{Machine: key, Action: string(a.Kind), Mode: string(a.Mode), Reboots: a.Reboots, Reason: a.Reason, Diff: diffSummary(a),
		InventoryCommit: d.Provenance.Commit, InventoryDirty: d.Provenance.Dirty, InventorySHA256: d.Provenance.InventorySHA256}
	if l.DryRun {
		rec.Result = ResultDryRun
		l.audit(rec)
		l.Metrics.actions.WithLabelValues(rec.Action, ResultDryRun).Inc()
		l.Log.Info("would "+rec.Action+" (dry run)", "machine", key, "mode", a.Mode, "reboots", a.Reboots, "diff", rec.Diff, "reason", a.Reason)
		return OutcomeDryRun, nil
	}
	return r.change(ctx, d, desired, a, rec)
}

// diffSummary is an action's config diff for the audit log; an upgrade has none.
func diffSummary(a Action) string {
	if a.Kind != KindApply {
		return ""
	}
	return a.Diff.Summary()
}

// planOne plans the machine alone; a non-empty outcome means there is
// nothing to apply (in sync, held, failed to plan, interrupted).
func (r *machineReconciler) planOne(ctx context.Context, d *Desired, desired map[string][]byte, m *inventory.Machine) (Action, string, error) {
	l := r.loop
	p := &Planner{Inventory: d.Inventory, Desired: desired, DesiredFor: d.Configs.For, Dialer: l.Dialer, Mode: l.Mode, Concurrency: 1, Timeout: l.Timeout, Upgrades: l.Upgrades, Kube: l.Kube, Joins: l.Joins, Drain: l.Drain,
		Windows: true, Now: l.Now}
	plan, err := p.Plan(ctx, []*inventory.Machine{m})
	if err != nil {
		return Action{}, OutcomeInterrupted, nil
	}
	a := plan.Actions[0]
	l.Metrics.setHeld(m.Name, a.HeldBy)
	switch a.Kind {
	case KindNone:
		return a, OutcomeInSync, nil
	case KindSkip:
		if a.Held {
			l.Log.Warn("not changed", "machine", m.Name, "reason", a.Reason)
			l.mu.Lock()
			if l.held != nil {
				l.held[m.Name] = a.Reason
			}
			l.mu.Unlock()
			return a, OutcomeHeld, nil
		}
		l.Metrics.errors.WithLabelValues(stagePlan).Inc()
		return a, OutcomeFailed, fmt.Errorf("%s: %s", m.Name, a.Reason)
	}
	return a, "", nil
}

// change applies one planned action under the rollout policy.
func (r *machineReconciler) change(ctx context.Context, d *Desired, desired map[string][]byte, a Action, rec AuditRecord) (string, error) {
	l, t := r.loop, r.term
	key := a.Machine.Name
	if a.Machine.IsControlPlane() {
		l.changeMu.Lock()
		defer l.changeMu.Unlock()
	} else {
		// control planes first: a worker waits until the pass has
		// finished with every control plane it queued
		l.mu.Lock()
		cps := l.cpsDone
		l.mu.Unlock()
		if cps != nil {
			select {
			case <-cps:
			case <-ctx.Done():
				return OutcomeInterrupted, nil
			}
		}
		l.changeMu.RLock()
		defer l.changeMu.RUnlock()
		// the machine's groups' limits first (in the inventory's order, the
		// same for every worker, so no two wait on each other), then the global one
		for _, sem := range append(t.groupSems(d.Inventory, a.Machine), t.sem) {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				return OutcomeInterrupted, nil
			}
		}
	}
	l.mu.Lock()
	blocked := l.blocked
	l.mu.Unlock()
	switch {
	case blocked != "":
		l.Metrics.actions.WithLabelValues(rec.Action, ResultBlocked).Inc()
		l.Log.Warn("not changed: the rollout is stopped by a failed gate", "machine", key, "stopped", blocked)
		return OutcomeBlocked, nil
	case t.writes.Wait(ctx) != nil, ctx.Err() != nil:
		return OutcomeInterrupted, nil
	case l.Leading != nil && !l.Leading():
		l.Log.Warn("not changed: this instance no longer leads", "machine", key)
		return OutcomeInterrupted, nil
	}
	if a.Machine.IsControlPlane() {
		// A control plane waited for the change lock, maybe through another
		// one's reboot: plan it again now that the lock is held, never act
		// on the plan made before it.
		fresh, outcome, err := r.planOne(ctx, d, desired, a.Machine)
		if outcome != "" {
			return outcome, err
		}
		a = fresh
		rec.Action, rec.Mode, rec.Reboots, rec.Reason, rec.Diff = string(a.Kind), string(a.Mode), a.Reboots, a.Reason, diffSummary(a)
	}

	// The audit log fails closed: a change whose record cannot be written
	// is not made.
	// In flight from here on, so that a stop from now waits out its grace
	// for this change rather than racing the audit record.
	rec.Result = ResultStarted
	t.mu.Lock()
	t.inflight[key] = rec
	t.mu.Unlock()
	if err := l.Audit.Record(rec); err != nil {
		t.mu.Lock()
		delete(t.inflight, key)
		t.mu.Unlock()
		l.Metrics.errors.WithLabelValues(stageAudit).Inc()
		l.Log.Error("not changed: the audit log cannot be written", "machine", key, "error", err)
		return OutcomeFailed, fmt.Errorf("%s not changed: %w; fix or free the audit log path, or run without --audit-log", key, err)
	}
	ro := &Rollout{
		Inventory: d.Inventory, Desired: desired, Dialer: l.Dialer, MaxUnavailable: 1,
		Timeout: l.Timeout, Wait: l.Wait, TryTimeout: l.TryTimeout, Poll: l.Poll, PullTimeout: l.PullTimeout,
		AllowQuorumLoss: l.AllowQuorumLoss, Kube: l.Kube, Drain: l.Drain, DrainTimeout: l.DrainTimeout,
		Say: func(format string, args ...any) {
			l.Log.Info(strings.TrimSpace(fmt.Sprintf(format, args...)), "machine", key)
		},
	}
	// recorded as started: it runs to its end or to the end of the grace
	// period, not to the stop signal
	out := ro.Run(t.changes, &Plan{Actions: []Action{a}})
	t.mu.Lock()
	_, recorded := t.inflight[key]
	delete(t.inflight, key)
	t.mu.Unlock()
	if !recorded {
		l.Log.Warn("a change recorded abandoned has ended", "machine", key, "converged", len(out.Converged) > 0, "stopped", out.Stopped)
		return OutcomeInterrupted, nil
	}

	rec.Time, rec.Interrupted = time.Time{}, out.InFlight != ""
	if u := a.Upgrade; u != nil {
		rec.Via, rec.Installer = u.Via, u.Installer
	}
	var outcome string
	var err error
	switch {
	case len(out.Failed) > 0:
		rec.Result, rec.Error = ResultFailed, out.Stopped
		outcome, err = OutcomeFailed, errors.New(out.Stopped)
		l.Metrics.errors.WithLabelValues(stageApply).Inc()
	case len(out.Converged) > 0 || len(out.Partial) > 0:
		rec.Result = ResultConverged
		outcome = OutcomeConverged
		switch {
		case a.Kind == KindUpgrade:
			outcome = OutcomeUpgraded
		case a.Kind == KindJoin && out.JoinedOn[key] == d.Inventory.Cluster.TalosVersion:
			outcome = OutcomeJoined
		case a.Kind == KindJoin:
			outcome = OutcomeJoinedOtherVersion
		case len(out.Partial) > 0:
			outcome = OutcomePartial
		}
		if out.Stopped != "" { // the gate after the change failed
			rec.Error = out.Stopped
			l.block(out.Stopped)
		}
	case out.Refused:
		// etcd is healthy but too small to lose this control plane: only
		// this machine waits (for --allow-quorum-loss or a third control
		// plane); the gate is not failed, so the others carry on.
		rec.Result, rec.Error = ResultBlocked, out.Stopped
		outcome = OutcomeBlocked
		l.Log.Warn("not changed: taking it down loses etcd quorum", "machine", key, "why", out.Stopped)
	case ctx.Err() != nil:
		rec.Result, rec.Error = ResultInterrupted, "stopped before anything was sent: "+out.Stopped
		outcome = OutcomeInterrupted
	default: // the gate before the change failed
		rec.Result, rec.Error = ResultBlocked, out.Stopped
		outcome = OutcomeBlocked
		l.block(out.Stopped)
	}
	if aerr := l.Audit.Record(rec); aerr != nil {
		// the change is made and cannot be unmade; no further one is made
		// in this pass (fail closed); the next pass tries again, and its
		// first started record is written or its change is not made
		l.Metrics.errors.WithLabelValues(stageAudit).Inc()
		l.block(fmt.Sprintf("the audit record of %s's %s could not be written: %v; fix or free the audit log path", key, rec.Result, aerr))
		if err == nil {
			err = fmt.Errorf("%s %s, but its audit record could not be written: %w", key, rec.Result, aerr)
		}
	}
	l.Metrics.actions.WithLabelValues(rec.Action, rec.Result).Inc()
	l.Log.Info("action done", "machine", key, "result", rec.Result, "interrupted", rec.Interrupted, "error", rec.Error)
	return outcome, err
}
