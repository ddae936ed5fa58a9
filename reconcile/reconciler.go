package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"devata.dev/devata/inventory"
)

// Reconciler syncs one machine, as a controller-runtime Reconciler syncs
// one object: Reconcile observes and decides (plans that machine afresh)
// and acts (changes it under the rollout policy when the plan says so). It
// knows nothing of the queue, the pass or the workers that call it: the
// loop hands it a machine's name and reads the Result; a test or a runbook
// may call it alone. Several Reconciles may run at once; what keeps them
// from changing too much at once (one control plane at a time, the
// workers' and groups' limits, the write rate) is the caller's admission,
// given by the loop, and nothing when it is called alone.
type Reconciler struct {
	// Spec is the spec in force, read at the start of every Reconcile.
	Spec func() *Desired
	// Changes plan and change the machine (Changes.Planner,
	// Changes.Rollout).
	Changes Changes
	// Shard is the part of the fleet this reconciler owns; a machine
	// outside it is gone.
	Shard Shard
	// DryRun plans (the dry runs reach the machine) and records what it
	// would do.
	DryRun bool
	// Leading reports whether this instance may act (nil: always); it is
	// asked right before every write.
	Leading func() bool
	Metrics *Metrics
	Audit   *AuditLog
	Log     *slog.Logger

	setup sync.Once
	// stop is a failed gate's stop: while it holds no change is made.
	stop gateStop
	// moved is what its changes know of the note that the bootstrap
	// manifests are due (kubemanifests_note.go), for the loop's sync
	// (loop_manifests.go).
	moved kubeMoves
}

// Result is how one Reconcile ended.
type Result struct {
	Outcome Outcome
	// Held says why the machine was left alone on purpose (OutcomeHeld):
	// the inventory holds it, a change waits for a maintenance window, or
	// a pending config.
	Held string
}

// admission is what a Reconciler asks of a caller that runs several at
// once (the loop's workers). A Reconciler called alone has none and waits
// for nothing.
type admission interface {
	// admit waits until m's change may start under the rollout policy;
	// release ends its turn. ok is false when ctx ended first.
	admit(ctx context.Context, inv *inventory.Inventory, m *inventory.Machine) (release func(), ok bool)
	// pace waits for the fleet's write rate.
	pace(ctx context.Context) error
	// begin records a change in flight (a stop waits out its grace period
	// for it) and returns the context it runs on; end takes it out again
	// and says whether it was still in flight (false: abandoned at a stop).
	begin(machine string, rec AuditRecord) context.Context
	end(machine string) bool
}

// gateStop holds why changes are stopped; empty when they are not.
type gateStop struct {
	mu  sync.Mutex
	why string
}

func (s *gateStop) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why
}

func (s *gateStop) set(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.why = why
}

func (r *Reconciler) defaults() {
	r.Changes = r.Changes.withDefaults()
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.Metrics == nil {
		r.Metrics = NewMetrics()
	}
}

// Reconcile plans one machine afresh and, when its config differs, changes
// it. machine is its name, as the inventory has it.
func (r *Reconciler) Reconcile(ctx context.Context, machine string) (Result, error) {
	return r.sync(ctx, machine, nil)
}

// sync is Reconcile under adm, the caller's admission (nil: none).
func (r *Reconciler) sync(ctx context.Context, machine string, adm admission) (Result, error) {
	r.setup.Do(r.defaults)
	var d *Desired
	if r.Spec != nil {
		d = r.Spec()
	}
	if d == nil {
		return Result{Outcome: OutcomeFailed}, errors.New("no valid inventory is in force yet")
	}
	m := d.Inventory.Machine(machine)
	if m == nil || !r.Shard.Owns(m) {
		return Result{Outcome: OutcomeGone}, nil
	}
	desired, err := d.Configs.Only(m)
	if err != nil {
		return Result{Outcome: OutcomeFailed}, err
	}
	a, res, err := r.planOne(ctx, d, desired, m)
	if res.Outcome != "" {
		return res, err
	}
	rec := AuditRecord{Machine: machine, Action: string(a.Kind), Mode: string(a.Mode), Reboots: a.Reboots, Reason: a.Reason, Diff: diffSummary(a),
		InventoryCommit: d.Provenance.Commit, InventoryDirty: d.Provenance.Dirty, InventorySHA256: d.Provenance.InventorySHA256}
	if r.DryRun {
		rec.Result = ResultDryRun
		r.audit(rec)
		r.Metrics.actions.WithLabelValues(rec.Action, ResultDryRun).Inc()
		r.Log.Info("would "+rec.Action+" (dry run)", "machine", machine, "mode", a.Mode, "reboots", a.Reboots, "diff", rec.Diff, "reason", a.Reason)
		return Result{Outcome: OutcomeDryRun}, nil
	}
	return r.change(ctx, adm, d, desired, a, rec)
}

// diffSummary is an action's config diff for the audit log; an upgrade has none.
func diffSummary(a Action) string {
	if a.Kind != KindApply {
		return ""
	}
	return a.Diff.Summary()
}

// planOne plans the machine alone; a Result with an outcome means there
// is nothing to apply (in sync, held, failed to plan, interrupted).
func (r *Reconciler) planOne(ctx context.Context, d *Desired, desired map[string][]byte, m *inventory.Machine) (Action, Result, error) {
	plan, err := r.Changes.Planner(d.Inventory, desired, d.Configs.For).Plan(ctx, []*inventory.Machine{m})
	if err != nil {
		return Action{}, Result{Outcome: OutcomeInterrupted}, nil
	}
	a := plan.Actions[0]
	r.Metrics.setHeld(m.Name, a.HeldBy)
	switch a.Kind {
	case KindNone:
		return a, Result{Outcome: OutcomeInSync}, nil
	case KindSkip:
		if a.Held {
			r.Log.Warn("not changed", "machine", m.Name, "reason", a.Reason)
			return a, Result{Outcome: OutcomeHeld, Held: a.Reason}, nil
		}
		r.Metrics.errors.WithLabelValues(stagePlan).Inc()
		return a, Result{Outcome: OutcomeFailed}, fmt.Errorf("%s: %s", m.Name, a.Reason)
	}
	return a, Result{}, nil
}

// change applies one planned action under the rollout policy, in its
// turn when adm admits it.
func (r *Reconciler) change(ctx context.Context, adm admission, d *Desired, desired map[string][]byte, a Action, rec AuditRecord) (Result, error) {
	key := a.Machine.Name
	if adm != nil {
		release, ok := adm.admit(ctx, d.Inventory, a.Machine)
		if !ok {
			return Result{Outcome: OutcomeInterrupted}, nil
		}
		defer release()
	}
	stopped := r.stop.get()
	switch {
	case stopped != "":
		r.Metrics.actions.WithLabelValues(rec.Action, ResultBlocked).Inc()
		r.Log.Warn("not changed: the rollout is stopped by a failed gate", "machine", key, "stopped", stopped)
		return Result{Outcome: OutcomeBlocked}, nil
	case adm != nil && adm.pace(ctx) != nil, ctx.Err() != nil:
		return Result{Outcome: OutcomeInterrupted}, nil
	case r.Leading != nil && !r.Leading():
		r.Log.Warn("not changed: this instance no longer leads", "machine", key)
		return Result{Outcome: OutcomeInterrupted}, nil
	}
	if a.Machine.IsControlPlane() {
		// A control plane waited for its turn, maybe through another
		// one's reboot: plan it again now that it holds the turn, never act
		// on the plan made before it.
		fresh, res, err := r.planOne(ctx, d, desired, a.Machine)
		if res.Outcome != "" {
			return res, err
		}
		a = fresh
		rec.Action, rec.Mode, rec.Reboots, rec.Reason, rec.Diff = string(a.Kind), string(a.Mode), a.Reboots, a.Reason, diffSummary(a)
	}

	// The audit log fails closed: a change whose record cannot be written
	// is not made.
	// In flight from here on, so that a stop from now waits out its grace
	// for this change rather than racing the audit record.
	rec.Result = ResultStarted
	changes := ctx
	if adm != nil {
		changes = adm.begin(key, rec)
	}
	if err := r.Audit.Record(rec); err != nil {
		if adm != nil {
			adm.end(key)
		}
		r.Metrics.errors.WithLabelValues(stageAudit).Inc()
		r.Log.Error("not changed: the audit log cannot be written", "machine", key, "error", err)
		return Result{Outcome: OutcomeFailed}, fmt.Errorf("%s not changed: %w; fix or free the audit log path, or run without --audit-log", key, err)
	}
	ro := r.Changes.Rollout(d.Inventory, desired, func(format string, args ...any) {
		r.Log.Info(strings.TrimSpace(fmt.Sprintf(format, args...)), "machine", key)
	})
	ro.MaxUnavailable = 1 // a plan of one machine
	// the note of due bootstrap manifests and the first move's pulls: kubeprepull.go
	ro.due, ro.fleet = &r.moved, r.fleetMoves(d)
	// recorded as started: it runs to its end or to the end of the grace
	// period, not to the stop signal
	out := ro.Run(changes, &Plan{Actions: []Action{a}})
	if adm != nil && !adm.end(key) {
		r.Log.Warn("a change recorded abandoned has ended", "machine", key, "converged", len(out.Converged) > 0, "stopped", out.Stopped)
		return Result{Outcome: OutcomeInterrupted}, nil
	}
	outcome, err := r.finished(ctx, d, a, rec, out)
	return Result{Outcome: outcome}, err
}

// finished records how a started change ended and sums it up as an Outcome.
func (r *Reconciler) finished(ctx context.Context, d *Desired, a Action, rec AuditRecord, out *RolloutResult) (Outcome, error) {
	key := a.Machine.Name
	rec.Time, rec.Interrupted = time.Time{}, out.InFlight != ""
	if u := a.Upgrade; u != nil {
		rec.Via, rec.Installer = u.Via, u.Installer
	}
	var outcome Outcome
	var err error
	switch {
	case len(out.Failed) > 0:
		rec.Result, rec.Error = ResultFailed, out.Stopped
		outcome, err = OutcomeFailed, errors.New(out.Stopped)
		r.Metrics.errors.WithLabelValues(stageApply).Inc()
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
			r.block(out.Stopped)
		}
	case out.Refused:
		// etcd is healthy but too small to lose this control plane: only
		// this machine waits (for --allow-quorum-loss or a third control
		// plane); the gate is not failed, so the others carry on.
		rec.Result, rec.Error = ResultBlocked, out.Stopped
		outcome = OutcomeBlocked
		r.Log.Warn("not changed: taking it down loses etcd quorum", "machine", key, "why", out.Stopped)
	case ctx.Err() != nil:
		rec.Result, rec.Error = ResultInterrupted, "stopped before anything was sent: "+out.Stopped
		outcome = OutcomeInterrupted
	default: // the gate before the change failed
		rec.Result, rec.Error = ResultBlocked, out.Stopped
		outcome = OutcomeBlocked
		r.block(out.Stopped)
	}
	if aerr := r.Audit.Record(rec); aerr != nil {
		// the change is made and cannot be unmade; no further one is made
		// in this pass (fail closed); the next pass tries again, and its
		// first started record is written or its change is not made
		r.Metrics.errors.WithLabelValues(stageAudit).Inc()
		r.block(fmt.Sprintf("the audit record of %s's %s could not be written: %v; fix or free the audit log path", key, rec.Result, aerr))
		if err == nil {
			err = fmt.Errorf("%s %s, but its audit record could not be written: %w", key, rec.Result, aerr)
		}
	}
	r.Metrics.actions.WithLabelValues(rec.Action, rec.Result).Inc()
	r.Log.Info("action done", "machine", key, "result", rec.Result, "interrupted", rec.Interrupted, "error", rec.Error)
	return outcome, err
}

// block stops every change until the gate passes again (Stopped, and the
// loop's next pass, which asks etcd).
func (r *Reconciler) block(why string) {
	r.stop.set(why)
	r.Metrics.gateBlocked.Set(1)
	r.Metrics.errors.WithLabelValues(stageGate).Inc()
	r.Log.Error("rollout stopped by a failed gate: no machine is changed until it passes", "stopped", why)
}

// Stopped says why changes are stopped by a failed gate; empty when they
// are not.
func (r *Reconciler) Stopped() string { return r.stop.get() }

func (r *Reconciler) audit(rec AuditRecord) {
	if err := r.Audit.Record(rec); err != nil {
		r.Log.Error("audit log write failed", "error", err, "machine", rec.Machine, "result", rec.Result)
	}
}
