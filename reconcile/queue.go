package reconcile

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"

	"devata.dev/devata/inventory"
)

// The work queue and its workers, as a controller-runtime controller keeps
// them: workers take keys from a client-go rate-limiting queue, hand each to
// the machine reconciler, and re-add a failed one with its backoff.

// queueName labels the work queue's metrics.
const queueName = "devata"

// newQueue is the loop's work queue: keyed by machine name, so a machine is
// never handled by two workers at once (client-go keeps a key out of Get while
// it is processing and folds re-adds into one), with a per-machine exponential
// backoff between base and max for keys re-added after a failure.
func newQueue(base, max time.Duration, m *Metrics) workqueue.TypedRateLimitingInterface[string] {
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, max)
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: queueName}
	if m != nil {
		rl = &observedLimiter{inner: rl, m: m}
		cfg.MetricsProvider = m.queue
	}
	return workqueue.NewTypedRateLimitingQueueWithConfig(rl, cfg)
}

// observedLimiter publishes each machine's backoff as it is decided, so that
// a machine that keeps failing is visible in metrics and not only in logs.
type observedLimiter struct {
	inner workqueue.TypedRateLimiter[string]
	m     *Metrics
}

func (o *observedLimiter) When(key string) time.Duration {
	d := o.inner.When(key)
	o.m.backoff.WithLabelValues(key).Set(d.Seconds())
	o.m.failures.WithLabelValues(key).Set(float64(o.inner.NumRequeues(key)))
	return d
}

func (o *observedLimiter) Forget(key string) {
	o.inner.Forget(key)
	o.m.backoff.WithLabelValues(key).Set(0)
	o.m.failures.WithLabelValues(key).Set(0)
}

func (o *observedLimiter) NumRequeues(key string) int { return o.inner.NumRequeues(key) }

// term is one run of the loop (Run or Once; a leader runs once per term of
// leadership): its queue and limits. Workers of an earlier term that are
// still finishing a change keep theirs.
type term struct {
	queue  workqueue.TypedRateLimitingInterface[string]
	writes *rate.Limiter
	sem    chan struct{}
	// groups holds a semaphore per group with rollout.maxUnavailable
	// (groupSems), made with the limit the group had when first needed
	groups   map[string]chan struct{}
	once     bool
	mu       sync.Mutex
	inflight map[string]AuditRecord
	// changes is the context of changes in flight: a stop does not cancel
	// a change that has started, only the end of the grace period does.
	changes      context.Context
	endOfChanges context.CancelFunc
}

func (l *Loop) newTerm(once bool) *term {
	o := l.opts
	limit := rate.Inf
	if o.WriteRate > 0 {
		limit = rate.Limit(o.WriteRate)
	}
	changes, end := context.WithCancel(context.Background())
	return &term{
		queue:        newQueue(o.BackoffBase, o.BackoffMax, o.Metrics),
		writes:       rate.NewLimiter(limit, max(o.WriteBurst, 1)),
		sem:          make(chan struct{}, o.Changes.MaxUnavailable),
		once:         once,
		inflight:     map[string]AuditRecord{},
		changes:      changes,
		endOfChanges: end,
	}
}

// groupSems are the semaphores of m's groups that limit how many of their
// workers change at once (issue 36), in the inventory's order.
func (t *term) groupSems(inv *inventory.Inventory, m *inventory.Machine) []chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []chan struct{}
	for _, name := range m.Groups {
		g := inv.Group(name)
		if g == nil || g.Rollout.MaxUnavailable < 1 {
			continue
		}
		sem, ok := t.groups[name]
		if !ok {
			if t.groups == nil {
				t.groups = map[string]chan struct{}{}
			}
			sem = make(chan struct{}, g.Rollout.MaxUnavailable)
			t.groups[name] = sem
		}
		out = append(out, sem)
	}
	return out
}

// turns is the admission the loop gives its reconciler in a term: the
// loop's change lock (control planes one at a time, none beside a worker),
// the pass's control planes before its workers, the groups' and the
// workers' limits, the write rate, and the changes in flight a stop waits
// for.
type turns struct {
	l *Loop
	t *term
}

func (w turns) admit(ctx context.Context, inv *inventory.Inventory, m *inventory.Machine) (release func(), ok bool) {
	l, t := w.l, w.t
	// a group's rollout.order first: the machines before it in the pass
	if !l.waitOrder(ctx, inv, m) {
		return nil, false
	}
	if m.IsControlPlane() {
		l.changeMu.Lock()
		return l.changeMu.Unlock, true
	}
	// control planes first: a worker waits until the pass has finished
	// with every control plane it queued
	l.mu.Lock()
	cps := l.cpsDone
	l.mu.Unlock()
	if cps != nil {
		select {
		case <-cps:
		case <-ctx.Done():
			return nil, false
		}
	}
	l.changeMu.RLock()
	held := []func(){l.changeMu.RUnlock}
	release = func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i]()
		}
	}
	// the machine's groups' limits first (in the inventory's order, the
	// same for every worker, so no two wait on each other), then the global one
	for _, sem := range append(t.groupSems(inv, m), t.sem) {
		select {
		case sem <- struct{}{}:
			held = append(held, func() { <-sem })
		case <-ctx.Done():
			release()
			return nil, false
		}
	}
	return release, true
}

func (w turns) pace(ctx context.Context) error { return w.t.writes.Wait(ctx) }

func (w turns) begin(machine string, rec AuditRecord) context.Context {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	w.t.inflight[machine] = rec
	return w.t.changes
}

func (w turns) end(machine string) bool {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	_, recorded := w.t.inflight[machine]
	delete(w.t.inflight, machine)
	return recorded
}

func (l *Loop) startWorkers(ctx context.Context, t *term) (stop func()) {
	var wg sync.WaitGroup
	for range l.opts.Workers {
		wg.Go(func() { l.worker(ctx, t) })
	}
	return func() {
		t.queue.ShutDown()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			t.endOfChanges()
			l.opts.Log.Info("reconcile stopped: no change in flight")
		case <-time.After(l.opts.Grace):
			t.endOfChanges()
			t.mu.Lock()
			defer t.mu.Unlock()
			for name, rec := range t.inflight {
				rec.Time, rec.Result = time.Time{}, ResultAbandoned
				rec.Error = fmt.Sprintf("still in flight after the %s grace period; the next pass observes %s afresh", l.opts.Grace, name)
				l.rec.audit(rec)
				l.opts.Metrics.actions.WithLabelValues(rec.Action, ResultAbandoned).Inc()
				l.opts.Log.Error("change abandoned at shutdown", "machine", name, "grace", l.opts.Grace)
				delete(t.inflight, name) // its final record is this one
			}
		}
	}
}

// worker hands queued machines to the reconciler, with this term's turns,
// until the queue shuts down.
func (l *Loop) worker(ctx context.Context, t *term) {
	adm := turns{l: l, t: t}
	for {
		key, quit := t.queue.Get()
		if quit {
			return
		}
		res := Result{Outcome: OutcomeInterrupted}
		var err error
		if ctx.Err() == nil { // stopping: take no new work
			res, err = l.rec.sync(ctx, key, adm)
		}
		switch {
		case err != nil && ctx.Err() == nil && !t.once:
			t.queue.AddRateLimited(key)
			l.opts.Log.Warn("sync failed; retrying with backoff", "machine", key, "failures", t.queue.NumRequeues(key), "error", err.Error())
		case err != nil:
			l.opts.Log.Warn("sync failed", "machine", key, "error", err.Error())
		default:
			t.queue.Forget(key)
		}
		t.queue.Done(key)
		l.finish(key, res, err)
	}
}
