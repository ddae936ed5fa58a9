package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/talosapi"
)

// The loop itself: its settings, the state it keeps across passes, and Run
// and Once. A pass is in pass.go, the work queue and its workers in queue.go,
// one machine's sync in reconciler.go, and where the spec comes from in
// source.go.

// Loop is the level-triggered reconcile loop. Every pass reads the whole spec
// (keeping the last valid one when an edit is invalid), observes every machine
// it owns, and queues the machines whose applied config is not known to be the
// desired one. Queue workers plan each machine afresh with the Planner and
// change it under apply's rollout policy: never two control-plane changes at
// once and never a worker change beside one, etcd gates before and after each
// control-plane change, at most MaxUnavailable workers at once, a global write
// rate, and a stop on a failed gate that holds, and is reported on every pass,
// until the gate passes again. A machine whose sync fails is retried with a
// per-machine exponential backoff; the others carry on.
type Loop struct {
	Source Source
	Dialer *talosapi.Dialer
	// Kube feeds the Kubernetes side of the kubelet check; nil makes it Unknown.
	Kube kubernetes.Interface
	// Extensions returns the checks that ride on the machine checks'
	// connection (storage, Cilium) for one pass over inv; they are reported
	// and exported like the others, and fail open. Nil: none.
	Extensions func(inv *inventory.Inventory) []machines.Extension
	// Checks restricts the observation (empty: all); config is always observed.
	Checks []string
	// Simulated marks reports of devata's simulated fleet.
	Simulated bool

	Interval time.Duration
	// ReportOnly observes and reports, never plans or acts; DryRun plans
	// (the dry runs reach the machines) and records what it would do.
	ReportOnly, DryRun bool
	Mode               talosapi.Mode
	MaxUnavailable     int
	// Upgrades, when set, also upgrades Talos on machines whose config is
	// in sync and whose version is not the inventory's (reconcile
	// --upgrade; off by default: an upgrade reboots every machine).
	Upgrades *Upgrades
	// Joins configures machines found in maintenance mode once etcd runs
	// (reconcile --join; off by default: the maintenance connection
	// authenticates no one, see Planner.Joins).
	Joins bool
	// AllowQuorumLoss lets a rebooting change take down a control plane of
	// an etcd of one or two members (Rollout.AllowQuorumLoss).
	AllowQuorumLoss bool
	// Workers handle queued machines at once; Concurrency bounds observation.
	Workers, Concurrency int
	// Timeout bounds one Talos API call, Wait a machine's return or a gate.
	Timeout, Wait, TryTimeout, Poll time.Duration
	// PullTimeout bounds an upgrade's installer pull (Rollout.PullTimeout).
	PullTimeout time.Duration
	// Drain drains a Node before a change that reboots its machine, within
	// DrainTimeout (Rollout.Drain, Rollout.DrainTimeout).
	Drain        bool
	DrainTimeout time.Duration
	// Now is the clock the maintenance windows are read with (nil:
	// time.Now); a change that reboots or upgrades waits for one.
	Now func() time.Time
	// Grace bounds how long a stop waits for in-flight changes.
	Grace time.Duration
	Shard Shard
	// WriteRate is the most configuration writes per second across the fleet
	// (0: unlimited); WriteBurst the writes allowed at once.
	WriteRate  float64
	WriteBurst int
	// BackoffBase and BackoffMax bound a failing machine's retry delay.
	BackoffBase, BackoffMax time.Duration
	// Leading reports whether this instance may act (nil: always); it is
	// asked right before every write.
	Leading func() bool

	Metrics *Metrics
	Audit   *AuditLog
	Log     *slog.Logger

	setup    sync.Once
	changeMu sync.RWMutex // control-plane changes exclusive, worker changes shared

	// mu guards both groups below. They are embedded so that their fields
	// read as the Loop's own (l.desired, l.awaited) where they are used.
	mu sync.Mutex
	inForce
	passBook
}

// inForce is what one pass leaves to the next: the spec in force and a
// failed gate's stop.
type inForce struct {
	desired *Desired
	invErr  error
	provErr string // the provenance error last logged
	blocked string // why changes are stopped; empty when not
}

func (l *Loop) defaults() {
	if l.Interval <= 0 {
		l.Interval = 5 * time.Minute
	}
	if l.Mode == "" {
		l.Mode = talosapi.ModeAuto
	}
	l.MaxUnavailable = max(l.MaxUnavailable, 1)
	l.Workers = max(l.Workers, l.MaxUnavailable+1, 2)
	l.Concurrency = max(l.Concurrency, 1)
	l.Timeout = cmp.Or(l.Timeout, 30*time.Second)
	l.Wait = cmp.Or(l.Wait, 10*time.Minute)
	l.Grace = cmp.Or(l.Grace, 30*time.Second)
	l.BackoffBase = cmp.Or(l.BackoffBase, time.Second)
	l.BackoffMax = cmp.Or(l.BackoffMax, 10*time.Minute)
	if l.Shard.Count < 1 {
		l.Shard = Shard{Count: 1}
	}
	if l.Log == nil {
		l.Log = slog.New(slog.DiscardHandler)
	}
	if l.Metrics == nil {
		l.Metrics = NewMetrics()
	}
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
		next := res.Started.Add(l.Interval)
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

func (l *Loop) block(why string) {
	l.mu.Lock()
	l.blocked = why
	l.mu.Unlock()
	l.Metrics.gateBlocked.Set(1)
	l.Metrics.errors.WithLabelValues(stageGate).Inc()
	l.Log.Error("rollout stopped by a failed gate: no machine is changed until it passes", "stopped", why)
}

func (l *Loop) audit(rec AuditRecord) {
	if err := l.Audit.Record(rec); err != nil {
		l.Log.Error("audit log write failed", "error", err, "machine", rec.Machine, "result", rec.Result)
	}
}
