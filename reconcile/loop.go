package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
)

// The loop itself: its settings, the state it keeps across passes, and Run
// and Once. A pass is in pass.go, the work queue and its workers in queue.go,
// one machine's sync in reconciler.go, and where the spec comes from in
// source.go.

// Loop is the level-triggered reconcile loop. Every pass reads the whole spec
// (keeping the last valid one when an edit is invalid), observes every machine
// it owns, and queues the machines whose applied config is not known to be the
// desired one. Queue workers hand each to the Reconciler, which plans it
// afresh and changes it under apply's rollout policy: never two control-plane
// changes at once and never a worker change beside one, etcd gates before and
// after each control-plane change, at most MaxUnavailable workers at once, a
// global write rate, and a stop on a failed gate that holds, and is reported
// on every pass, until the gate passes again. A machine whose sync fails is
// retried with a per-machine exponential backoff; the others carry on.
// NewLoop makes one.
type Loop struct {
	opts LoopOptions
	rec  *Reconciler

	changeMu sync.RWMutex // control-plane changes exclusive, worker changes shared

	// mu guards both groups below. They are embedded so that their fields
	// read as the Loop's own (l.desired, l.awaited) where they are used.
	mu sync.Mutex
	inForce
	passBook
	orderBook // rollout_order.go
}

// LoopOptions are the loop's settings. NewLoop gives every unset one its
// default (withDefaults, with Changes.withDefaults the only place they are
// written).
type LoopOptions struct {
	Source Source
	// Changes plan and change each queued machine, as devata apply's do;
	// the loop always keeps disruptive changes to the maintenance windows
	// (Windows) and ignores no hold (IgnoreHold). Changes.Dialer,
	// Changes.Kube, Changes.Concurrency and Changes.Timeout observe too.
	Changes Changes
	// Families are the checks every pass runs after the machine checks
	// (storage, Cilium: checks.Families); they are reported and exported
	// like the others, and fail open. Nil: none.
	Families []drift.Check[*target.Target]
	// Checks restricts the observation (empty: all); config is always observed.
	Checks []string
	// Simulated marks reports of devata's simulated fleet.
	Simulated bool

	// Interval is the time between the starts of two passes (5m).
	Interval time.Duration
	// ReportOnly observes and reports, never plans or acts; DryRun plans
	// (the dry runs reach the machines) and records what it would do.
	ReportOnly, DryRun bool
	// Workers handle queued machines at once (at least
	// Changes.MaxUnavailable+1, and 2).
	Workers int
	// Grace bounds how long a stop waits for in-flight changes (30s).
	Grace time.Duration
	Shard Shard
	// WriteRate is the most configuration writes per second across the fleet
	// (0: unlimited); WriteBurst the writes allowed at once.
	WriteRate  float64
	WriteBurst int
	// BackoffBase and BackoffMax bound a failing machine's retry delay
	// (1s, 10m).
	BackoffBase, BackoffMax time.Duration
	// Leading reports whether this instance may act (nil: always); it is
	// asked right before every write.
	Leading func() bool

	Metrics *Metrics
	Audit   *AuditLog
	Log     *slog.Logger
}

// withDefaults is o with every unset setting given its default.
func (o LoopOptions) withDefaults() LoopOptions {
	o.Changes = o.Changes.withDefaults()
	o.Changes.Windows, o.Changes.IgnoreHold = true, nil
	if o.Interval <= 0 {
		o.Interval = 5 * time.Minute
	}
	o.Workers = max(o.Workers, o.Changes.MaxUnavailable+1, 2)
	o.Grace = cmp.Or(o.Grace, 30*time.Second)
	o.BackoffBase = cmp.Or(o.BackoffBase, time.Second)
	o.BackoffMax = cmp.Or(o.BackoffMax, 10*time.Minute)
	if o.Shard.Count < 1 {
		o.Shard = Shard{Count: 1}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	return o
}

// NewLoop is the loop with options o, defaulted.
func NewLoop(o LoopOptions) *Loop {
	o = o.withDefaults()
	l := &Loop{opts: o}
	l.rec = &Reconciler{
		Spec: l.inForceSpec, Changes: o.Changes, Shard: o.Shard, DryRun: o.DryRun, Leading: o.Leading,
		Metrics: o.Metrics, Audit: o.Audit, Log: o.Log,
	}
	return l
}

// Metrics are the loop's metrics (LoopOptions.Metrics, or its own).
func (l *Loop) Metrics() *Metrics { return l.opts.Metrics }

// inForce is what one pass leaves to the next: the spec in force. A failed
// gate's stop is the reconciler's (Reconciler.Stopped).
type inForce struct {
	desired *Desired
	invErr  error
	provErr string // the provenance error last logged
}

// inForceSpec is the spec in force, for the reconciler.
func (l *Loop) inForceSpec() *Desired {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.desired
}

// Ready is nil once a valid inventory is in force (/readyz).
func (l *Loop) Ready() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.desired == nil && l.invErr != nil:
		return fmt.Errorf("no valid inventory yet: %v", l.invErr)
	case l.desired == nil:
		return errors.New("no pass has run yet")
	}
	return nil
}

// Run runs passes every Interval until ctx is done, then stops taking work,
// waits up to Grace for changes in flight and returns nil. A change still in
// flight when the grace period ends is recorded as abandoned: the next start
// observes the machine afresh.
func (l *Loop) Run(ctx context.Context) error {
	t := l.newTerm(false)
	stop := l.startWorkers(ctx, t)
	for {
		res := l.pass(ctx, t)
		next := res.Started.Add(l.opts.Interval)
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-time.After(time.Until(next)):
		}
	}
}

// Once runs a single pass (for a CronJob or a runbook step), with no retries.
func (l *Loop) Once(ctx context.Context) *PassResult {
	t := l.newTerm(true)
	stop := l.startWorkers(ctx, t)
	res := l.pass(ctx, t)
	stop()
	// Stopped mid-pass (SIGTERM), pass returned before the changes in
	// flight finished within the grace period: their outcomes arrived since.
	// A queued machine with none was not started, or was abandoned.
	l.mu.Lock()
	for _, name := range res.Queued {
		if o, ok := l.outcomes[name]; ok {
			res.Outcomes[name] = o
			if e, ok := l.errs[name]; ok {
				res.Errors[name] = e
			}
			if h, ok := l.held[name]; ok {
				res.Held[name] = h
			}
		} else if res.Outcomes[name] == "" {
			res.Outcomes[name] = OutcomeInterrupted
		}
	}
	l.awaited = nil
	l.mu.Unlock()
	return res
}
