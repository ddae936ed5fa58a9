package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/drift"
	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// Desired is the spec one pass works from: a validated inventory and every
// machine's rendered, validated config, held in Configs or, for a large
// inventory, rendered again by Render when needed (every config was
// validated when the Desired was made).
type Desired struct {
	Inventory *inventory.Inventory
	Configs   map[string][]byte
	Render    func(m *inventory.Machine) ([]byte, error)
}

// Config is one machine's desired config.
func (d *Desired) Config(m *inventory.Machine) ([]byte, error) {
	if c, ok := d.Configs[m.Name]; ok {
		return c, nil
	}
	if d.Render == nil {
		return nil, fmt.Errorf("no desired config for %s", m.Name)
	}
	return d.Render(m)
}

// only is the map of one machine's config, for a plan or rollout of it.
func (d *Desired) only(m *inventory.Machine) (map[string][]byte, error) {
	c, err := d.Config(m)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{m.Name: c}, nil
}

// LeanAbove is the number of machines past which FileSource keeps no
// rendered configs: it validates every one, then renders a machine's again
// where it is observed or changed.
var LeanAbove = 5000

// Source reads the spec afresh; the loop calls it at the start of every pass.
type Source func(ctx context.Context) (*Desired, error)

// FileSource loads the inventory at path and renders it with the secrets
// bundle it names, every time it is called, so an edit of either is picked up
// by the next pass.
func FileSource(path string) Source {
	return func(context.Context) (*Desired, error) {
		inv, err := inventory.Load(path)
		if err != nil {
			return nil, err
		}
		bundle, err := bootstrap.LoadSecrets(inventory.ResolvePath(filepath.Dir(inv.Path), inv.Cluster.Secrets))
		if err != nil {
			return nil, err
		}
		if len(inv.Machines) > LeanAbove {
			r, _, err := bootstrap.ValidateOnly(inv, bundle, nil)
			if err != nil {
				return nil, fmt.Errorf("render %s: %w", path, err)
			}
			return &Desired{Inventory: inv, Render: func(m *inventory.Machine) ([]byte, error) {
				rd, err := r.Render(m)
				if err != nil {
					return nil, err
				}
				return rd.Config, nil
			}}, nil
		}
		rendered, err := bootstrap.RenderValidated(inv, bundle)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", path, err)
		}
		d := &Desired{Inventory: inv, Configs: map[string][]byte{}}
		for _, r := range rendered {
			d.Configs[r.Machine] = r.Config
		}
		return d, nil
	}
}

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
	Dialer *machines.Dialer
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
	Mode               machines.Mode
	MaxUnavailable     int
	// AllowQuorumLoss lets a rebooting change take down a control plane of
	// an etcd of one or two members (Rollout.AllowQuorumLoss).
	AllowQuorumLoss bool
	// Workers handle queued machines at once; Concurrency bounds observation.
	Workers, Concurrency int
	// Timeout bounds one Talos API call, Wait a machine's return or a gate.
	Timeout, Wait, TryTimeout, Poll time.Duration
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

	mu       sync.Mutex
	desired  *Desired
	invErr   error
	blocked  string // why changes are stopped; empty when not
	awaited  map[string]bool
	outcomes map[string]string
	errs     map[string]string
	passDone chan struct{}
	// cpsAwaited are the pass's queued control planes not yet finished;
	// cpsDone is closed when there are none: a worker's change waits for it,
	// so a pass changes its control planes before any worker.
	cpsAwaited map[string]bool
	cpsDone    chan struct{}
}

// term is one run of the loop (Run or Once; a leader runs once per term of
// leadership): its queue and limits. Workers of an earlier term that are
// still finishing a change keep theirs.
type term struct {
	queue    workqueue.TypedRateLimitingInterface[string]
	writes   *rate.Limiter
	sem      chan struct{}
	once     bool
	mu       sync.Mutex
	inflight map[string]AuditRecord
	// changes is the context of changes in flight: a stop does not cancel
	// a change that has started, only the end of the grace period does.
	changes      context.Context
	endOfChanges context.CancelFunc
}

// PassResult is what one pass saw and did.
type PassResult struct {
	Started  time.Time
	Duration time.Duration
	// InventoryErr is set when the spec read this pass was invalid; the last
	// valid one (if any) was used.
	InventoryErr error
	// Report is the observation of the owned machines; nil when nothing could be observed.
	Report *drift.Report
	// Queued machines were handed to the workers; Outcomes says how each ended.
	Queued   []string
	Outcomes map[string]string
	// Errors says why a queued machine's sync failed, by machine.
	Errors map[string]string
	// BackingOff machines failed before and wait for their retry.
	BackingOff []string
	// Blocked says why every change is stopped (a failed gate), if it is.
	Blocked string
}

// Outcomes of one machine's sync in a pass.
const (
	OutcomeInSync      = "in-sync"
	OutcomeConverged   = ResultConverged
	OutcomeFailed      = ResultFailed
	OutcomeBlocked     = ResultBlocked
	OutcomeDryRun      = ResultDryRun
	OutcomeInterrupted = ResultInterrupted
	OutcomeGone        = "gone" // no longer in the inventory or the shard
	// OutcomeHeld: left alone on purpose (a pending try or a staged config); drift is left.
	OutcomeHeld = "held"
)

// ExitCode is --once's exit code: 0 everything in sync or converged, 1 drift
// or a change left pending, 2 an invalid inventory, a failure or an Unknown.
func (r *PassResult) ExitCode() int {
	if r.InventoryErr != nil || r.Report == nil {
		return 2
	}
	code := 0
	for _, o := range r.Outcomes {
		switch o {
		case OutcomeFailed, OutcomeInterrupted:
			return 2
		case OutcomeBlocked, OutcomeDryRun, OutcomeHeld:
			code = 1
		}
	}
	fixed := func(machine string) bool { return r.Outcomes[machine] == OutcomeConverged }
	for _, res := range r.Report.Results {
		switch {
		case res.Status == drift.StatusUnknown && !fixed(res.Machine):
			return 2
		case res.Status == drift.StatusDrifted && !(fixed(res.Machine) && res.Check == machines.CheckConfig):
			code = 1
		}
	}
	if r.Blocked != "" || len(r.BackingOff) > 0 {
		code = max(code, 1)
	}
	return code
}

func (l *Loop) defaults() {
	if l.Interval <= 0 {
		l.Interval = 5 * time.Minute
	}
	if l.Mode == "" {
		l.Mode = machines.ModeAuto
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

func (l *Loop) newTerm(once bool) *term {
	l.setup.Do(l.defaults)
	limit := rate.Inf
	if l.WriteRate > 0 {
		limit = rate.Limit(l.WriteRate)
	}
	changes, end := context.WithCancel(context.Background())
	return &term{
		queue:        newQueue(l.BackoffBase, l.BackoffMax, l.Metrics),
		writes:       rate.NewLimiter(limit, max(l.WriteBurst, 1)),
		sem:          make(chan struct{}, l.MaxUnavailable),
		once:         once,
		inflight:     map[string]AuditRecord{},
		changes:      changes,
		endOfChanges: end,
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
		} else if res.Outcomes[name] == "" {
			res.Outcomes[name] = OutcomeInterrupted
		}
	}
	l.awaited = nil
	l.mu.Unlock()
	return res
}

func (l *Loop) startWorkers(ctx context.Context, t *term) (stop func()) {
	var wg sync.WaitGroup
	for range l.Workers {
		wg.Go(func() { l.worker(ctx, t) })
	}
	return func() {
		t.queue.ShutDown()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			t.endOfChanges()
			l.Log.Info("reconcile stopped: no change in flight")
		case <-time.After(l.Grace):
			t.endOfChanges()
			t.mu.Lock()
			defer t.mu.Unlock()
			for name, rec := range t.inflight {
				rec.Time, rec.Result = time.Time{}, ResultAbandoned
				rec.Error = fmt.Sprintf("still in flight after the %s grace period; the next pass observes %s afresh", l.Grace, name)
				l.audit(rec)
				l.Metrics.actions.WithLabelValues(rec.Action, ResultAbandoned).Inc()
				l.Log.Error("change abandoned at shutdown", "machine", name, "grace", l.Grace)
				delete(t.inflight, name) // its final record is this one
			}
		}
	}
}

// pass is one level-triggered pass.
func (l *Loop) pass(ctx context.Context, t *term) *PassResult {
	res := &PassResult{Started: time.Now(), Outcomes: map[string]string{}, Errors: map[string]string{}}
	defer func() {
		res.Duration = time.Since(res.Started)
		l.Metrics.passDuration.Observe(res.Duration.Seconds())
		l.Metrics.lastPass.SetToCurrentTime()
		result := "ok"
		switch {
		case ctx.Err() != nil:
			result = "interrupted"
		case res.Report == nil:
			result = "inventory-invalid"
		case res.Blocked != "":
			result = "blocked"
		}
		l.Metrics.passes.WithLabelValues(result).Inc()
	}()

	d := l.readSpec(ctx, res)
	if d == nil {
		return res
	}
	var owned []*inventory.Machine
	for i := range d.Inventory.Machines {
		if m := &d.Inventory.Machines[i]; l.Shard.Owns(m) {
			owned = append(owned, m)
		}
	}
	res.Report = l.observe(ctx, d, owned)
	if l.ReportOnly || ctx.Err() != nil {
		l.logPass(res)
		return res
	}
	res.Blocked = l.recheckGate(ctx, d)

	// The machines whose applied config is not known to be the desired one,
	// control planes first: the queue hands keys out in order.
	needs := map[string]bool{}
	for _, r := range res.Report.Results {
		if r.Check == machines.CheckConfig && r.Status != drift.StatusInSync {
			needs[r.Machine] = true
		}
	}
	slices.SortStableFunc(owned, func(a, b *inventory.Machine) int {
		return compareBool(b.IsControlPlane(), a.IsControlPlane())
	})
	l.mu.Lock()
	l.awaited, l.outcomes, l.errs, l.passDone = map[string]bool{}, res.Outcomes, res.Errors, make(chan struct{})
	l.cpsAwaited, l.cpsDone = map[string]bool{}, make(chan struct{})
	var queue []string
	for _, m := range owned {
		switch {
		case !needs[m.Name]:
		case t.queue.NumRequeues(m.Name) > 0 && !t.once:
			// Its retry is already scheduled with its backoff; a pass must not
			// shortcut that, or a failing machine would be hit every interval.
			res.BackingOff = append(res.BackingOff, m.Name)
		default:
			l.awaited[m.Name] = true
			if m.IsControlPlane() {
				l.cpsAwaited[m.Name] = true
			}
			queue = append(queue, m.Name)
		}
	}
	if len(l.cpsAwaited) == 0 {
		close(l.cpsDone)
	}
	done := l.passDone
	if len(queue) == 0 {
		close(done)
	}
	l.mu.Unlock()
	res.Queued = queue
	for _, name := range queue {
		t.queue.Add(name)
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	l.mu.Lock()
	res.Outcomes, res.Errors = maps.Clone(l.outcomes), maps.Clone(l.errs)
	if !t.once {
		l.awaited = nil // Once collects what finishes during the grace period
	}
	if res.Blocked == "" {
		res.Blocked = l.blocked
	}
	l.mu.Unlock()
	l.logPass(res)
	return res
}

// readSpec reads the spec; an invalid one is reported and the last valid one
// stays in force.
func (l *Loop) readSpec(ctx context.Context, res *PassResult) *Desired {
	d, err := l.Source(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		res.InventoryErr = err
		l.invErr = err
		l.Metrics.inventoryValid.Set(0)
		l.Metrics.errors.WithLabelValues("inventory").Inc()
		if l.desired == nil {
			l.Log.Error("inventory is invalid and no valid one was read before: nothing is observed or changed until it is fixed", "error", err)
			return nil
		}
		l.Log.Error("inventory is invalid: the last valid one stays in force until it is fixed", "error", err, "in-force", l.desired.Inventory.Path)
		return l.desired
	}
	if l.invErr != nil {
		l.Log.Info("inventory is valid again", "inventory", d.Inventory.Path)
	}
	for _, w := range d.Inventory.Warnings {
		l.Log.Debug("inventory warning", "warning", w)
	}
	l.desired, l.invErr = d, nil
	l.Metrics.inventoryValid.Set(1)
	return d
}

// observe runs the drift checks over the owned machines and publishes them.
func (l *Loop) observe(ctx context.Context, d *Desired, owned []*inventory.Machine) *drift.Report {
	h := drift.Header{Cluster: d.Inventory.Cluster.Name, Inventory: d.Inventory.Path, Simulated: l.Simulated}
	var names []string
	for _, m := range owned {
		names = append(names, m.Name)
		h.Machines = append(h.Machines, drift.Machine{Name: m.Name, Role: m.Role, Address: l.Dialer.Endpoint(m)})
	}
	rep := drift.NewReport(h)
	if len(owned) > 0 {
		checks := l.Checks
		if len(checks) > 0 && !slices.Contains(checks, machines.CheckConfig) {
			checks = append(slices.Clone(checks), machines.CheckConfig)
		}
		fc := &machines.FleetCheck{
			Inventory: d.Inventory, Desired: d.Configs, DesiredFor: d.Render, Dialer: l.Dialer, Kube: l.Kube,
			Machines: names, Checks: checks, Concurrency: l.Concurrency, Timeout: l.Timeout,
		}
		if l.Extensions != nil {
			fc.Extensions = l.Extensions(d.Inventory)
		}
		if err := fc.Run(ctx, rep); err != nil {
			rep.AddError(err)
		}
	}
	rep.Finish()
	for _, r := range rep.Results {
		if r.Status == drift.StatusUnknown {
			l.Metrics.errors.WithLabelValues("observe").Inc()
		}
	}
	l.Metrics.drift.set(d.Inventory.Cluster.Name, rep.Results)
	return rep
}

// recheckGate keeps a failed gate in force, reporting it, until etcd is
// healthy again.
func (l *Loop) recheckGate(ctx context.Context, d *Desired) string {
	l.mu.Lock()
	blocked := l.blocked
	l.mu.Unlock()
	if blocked == "" {
		return ""
	}
	if err := gate.EtcdHealthy(ctx, d.Inventory, l.Dialer, l.Timeout); err != nil {
		l.Metrics.errors.WithLabelValues("gate").Inc()
		l.Log.Warn("rollout stopped by a failed gate: no machine is changed until it passes", "stopped", blocked, "now", err.Error())
		return blocked
	}
	l.mu.Lock()
	l.blocked = ""
	l.mu.Unlock()
	l.Metrics.gateBlocked.Set(0)
	l.Log.Info("gate passes again: changes resume", "was", blocked)
	return ""
}

func (l *Loop) logPass(res *PassResult) {
	s := res.Report.Summary
	attrs := []any{
		"duration", time.Since(res.Started).Round(time.Millisecond),
		"machines", s.Machines.Total(), "in-sync", s.Machines.InSync, "drifted", s.Machines.Drifted, "unknown", s.Machines.Unknown,
	}
	if len(res.Queued) > 0 {
		attrs = append(attrs, "queued", strings.Join(res.Queued, ","))
	}
	if len(res.BackingOff) > 0 {
		attrs = append(attrs, "backing-off", strings.Join(res.BackingOff, ","))
	}
	if res.Blocked != "" {
		attrs = append(attrs, "blocked", res.Blocked)
	}
	if res.InventoryErr != nil {
		attrs = append(attrs, "inventory-error", res.InventoryErr.Error())
	}
	l.Log.Info("pass done", attrs...)
}

func (l *Loop) worker(ctx context.Context, t *term) {
	for {
		key, quit := t.queue.Get()
		if quit {
			return
		}
		outcome := OutcomeInterrupted
		var err error
		if ctx.Err() == nil { // stopping: take no new work
			outcome, err = l.sync(ctx, t, key)
		}
		switch {
		case err != nil && ctx.Err() == nil && !t.once:
			t.queue.AddRateLimited(key)
			l.Log.Warn("sync failed; retrying with backoff", "machine", key, "failures", t.queue.NumRequeues(key), "error", err.Error())
		case err != nil:
			l.Log.Warn("sync failed", "machine", key, "error", err.Error())
		default:
			t.queue.Forget(key)
		}
		t.queue.Done(key)
		l.finish(key, outcome, err)
	}
}

func (l *Loop) finish(key, outcome string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.awaited[key] {
		return
	}
	delete(l.awaited, key)
	if l.cpsAwaited[key] {
		delete(l.cpsAwaited, key)
		if len(l.cpsAwaited) == 0 {
			close(l.cpsDone)
		}
	}
	l.outcomes[key] = outcome
	if err != nil {
		l.errs[key] = err.Error()
	}
	if len(l.awaited) == 0 {
		close(l.passDone)
	}
}

// sync plans one machine afresh and, when its config differs, changes it.
func (l *Loop) sync(ctx context.Context, t *term, key string) (string, error) {
	l.mu.Lock()
	d := l.desired
	l.mu.Unlock()
	m := d.Inventory.Machine(key)
	if m == nil || !l.Shard.Owns(m) {
		return OutcomeGone, nil
	}
	desired, err := d.only(m)
	if err != nil {
		return OutcomeFailed, err
	}
	a, outcome, err := l.planOne(ctx, d, desired, m)
	if outcome != "" {
		return outcome, err
	}
	rec := AuditRecord{Machine: key, Action: string(KindApply), Mode: string(a.Mode), Reboots: a.Reboots, Reason: a.Reason, Diff: a.Diff.Summary()}
	if l.DryRun {
		rec.Result = ResultDryRun
		l.audit(rec)
		l.Metrics.actions.WithLabelValues(rec.Action, ResultDryRun).Inc()
		l.Log.Info("would apply (dry run)", "machine", key, "mode", a.Mode, "reboots", a.Reboots, "diff", rec.Diff)
		return OutcomeDryRun, nil
	}
	return l.change(ctx, t, d, desired, a, rec)
}

// planOne plans the machine alone; a non-empty outcome means there is
// nothing to apply (in sync, held, failed to plan, interrupted).
func (l *Loop) planOne(ctx context.Context, d *Desired, desired map[string][]byte, m *inventory.Machine) (Action, string, error) {
	p := &Planner{Inventory: d.Inventory, Desired: desired, Dialer: l.Dialer, Mode: l.Mode, Concurrency: 1, Timeout: l.Timeout}
	plan, err := p.Plan(ctx, []*inventory.Machine{m})
	if err != nil {
		return Action{}, OutcomeInterrupted, nil
	}
	a := plan.Actions[0]
	switch a.Kind {
	case KindNone:
		return a, OutcomeInSync, nil
	case KindSkip:
		if a.Held {
			l.Log.Warn("not changed", "machine", m.Name, "reason", a.Reason)
			return a, OutcomeHeld, nil
		}
		l.Metrics.errors.WithLabelValues("plan").Inc()
		return a, OutcomeFailed, fmt.Errorf("%s: %s", m.Name, a.Reason)
	}
	return a, "", nil
}

// change applies one planned action under the rollout policy.
func (l *Loop) change(ctx context.Context, t *term, d *Desired, desired map[string][]byte, a Action, rec AuditRecord) (string, error) {
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
		select {
		case t.sem <- struct{}{}:
			defer func() { <-t.sem }()
		case <-ctx.Done():
			return OutcomeInterrupted, nil
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
		fresh, outcome, err := l.planOne(ctx, d, desired, a.Machine)
		if outcome != "" {
			return outcome, err
		}
		a = fresh
		rec.Mode, rec.Reboots, rec.Reason, rec.Diff = string(a.Mode), a.Reboots, a.Reason, a.Diff.Summary()
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
		l.Metrics.errors.WithLabelValues("audit").Inc()
		l.Log.Error("not changed: the audit log cannot be written", "machine", key, "error", err)
		return OutcomeFailed, fmt.Errorf("%s not changed: %w; fix or free the audit log path, or run without --audit-log", key, err)
	}
	ro := &Rollout{
		Inventory: d.Inventory, Desired: desired, Dialer: l.Dialer, MaxUnavailable: 1,
		Timeout: l.Timeout, Wait: l.Wait, TryTimeout: l.TryTimeout, Poll: l.Poll,
		AllowQuorumLoss: l.AllowQuorumLoss,
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
	var outcome string
	var err error
	switch {
	case len(out.Failed) > 0:
		rec.Result, rec.Error = ResultFailed, out.Stopped
		outcome, err = OutcomeFailed, errors.New(out.Stopped)
		l.Metrics.errors.WithLabelValues("apply").Inc()
	case len(out.Converged) > 0:
		rec.Result = ResultConverged
		outcome = OutcomeConverged
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
		l.Metrics.errors.WithLabelValues("audit").Inc()
		l.block(fmt.Sprintf("the audit record of %s's %s could not be written: %v; fix or free the audit log path", key, rec.Result, aerr))
		if err == nil {
			err = fmt.Errorf("%s %s, but its audit record could not be written: %w", key, rec.Result, aerr)
		}
	}
	l.Metrics.actions.WithLabelValues(rec.Action, rec.Result).Inc()
	l.Log.Info("action done", "machine", key, "result", rec.Result, "interrupted", rec.Interrupted, "error", rec.Error)
	return outcome, err
}

func (l *Loop) block(why string) {
	l.mu.Lock()
	l.blocked = why
	l.mu.Unlock()
	l.Metrics.gateBlocked.Set(1)
	l.Metrics.errors.WithLabelValues("gate").Inc()
	l.Log.Error("rollout stopped by a failed gate: no machine is changed until it passes", "stopped", why)
}

func (l *Loop) audit(rec AuditRecord) {
	if err := l.Audit.Record(rec); err != nil {
		l.Log.Error("audit log write failed", "error", err, "machine", rec.Machine, "result", rec.Result)
	}
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
