package reconcile

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// One pass: read the spec, observe the owned machines, compare (queue the
// ones whose config is not InSync), and collect the outcomes the workers
// report back into a PassResult.

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
	Outcomes map[string]Outcome
	// Errors says why a queued machine's sync failed, by machine.
	Errors map[string]string
	// Held says why a queued machine was left alone on purpose (its
	// outcome is held): the inventory holds it, a change waits for a
	// maintenance window and which, or a pending config; by machine.
	Held map[string]string
	// BackingOff machines failed before and wait for their retry.
	BackingOff []string
	// Blocked says why every change is stopped (a failed gate), if it is.
	Blocked string
	// Manifests says what became of the bootstrap manifests after a
	// Kubernetes version change the loop made (synced, or pending and
	// why); ManifestsErr why their sync failed (loop_manifests.go).
	Manifests, ManifestsErr string
	// NodeKeys says what became of the viaKubernetes labels and taints
	// (set, would be set, held, pending), NodeKeysSet the machines whose
	// Node was written, NodeKeysErr why a write failed (loop_nodekeys.go).
	NodeKeys    []string
	NodeKeysSet map[string]bool
	NodeKeysErr string
}

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
		case OutcomeBlocked, OutcomeDryRun, OutcomeHeld, OutcomePartial:
			code = 1
		}
	}
	fixed := func(machine string) bool {
		o := r.Outcomes[machine]
		return o == OutcomeConverged || o == OutcomeUpgraded || o == OutcomeJoined || o == OutcomeJoinedOtherVersion
	}
	registry := checks.All()
	fixes := func(res drift.Result) bool {
		// the registry says which change fixes each check (drift.Check.FixedBy)
		e, _ := registry.Get(res.Check)
		by := func(f drift.Fix) bool { return e.FixedBy&f != 0 }
		switch r.Outcomes[res.Machine] {
		case OutcomeConverged:
			return by(drift.FixedByApply)
		case OutcomeUpgraded:
			return by(drift.FixedByUpgrade)
		case OutcomeJoined:
			// a join at the inventory's version installs it, as an upgrade would
			return by(drift.FixedByJoin) || by(drift.FixedByUpgrade)
		case OutcomeJoinedOtherVersion:
			return by(drift.FixedByJoin)
		}
		return false
	}
	for _, res := range r.Report.Results {
		switch {
		case res.Status == drift.StatusUnknown && !fixed(res.Machine):
			return 2
		case res.Status == drift.StatusDrifted && !fixes(res) && !r.fixedByNodeKeys(res):
			code = 1
		}
	}
	if r.ManifestsErr != "" || r.NodeKeysErr != "" {
		return 2
	}
	if r.Blocked != "" || len(r.BackingOff) > 0 {
		code = max(code, 1)
	}
	return code
}

// passBook is the running pass's bookkeeping: the machines it queued and
// has not heard back from, and the outcomes and errors of those it has.
type passBook struct {
	awaited  map[string]bool
	outcomes map[string]Outcome
	errs     map[string]string
	held     map[string]string
	passDone chan struct{}
	// cpsAwaited are the pass's queued control planes not yet finished;
	// cpsDone is closed when there are none: a worker's change waits for it,
	// so a pass changes its control planes before any worker.
	cpsAwaited map[string]bool
	cpsDone    chan struct{}
}

// countPass records a finished pass in the metrics: how long, when, and
// how it ended.
func (l *Loop) countPass(ctx context.Context, res *PassResult) {
	res.Duration = time.Since(res.Started)
	l.opts.Metrics.passDuration.Observe(res.Duration.Seconds())
	l.opts.Metrics.lastPass.SetToCurrentTime()
	result := passOK
	switch {
	case ctx.Err() != nil:
		result = passInterrupted
	case res.Report == nil:
		result = passInventoryInvalid
	case res.Blocked != "":
		result = passBlocked
	}
	l.opts.Metrics.passes.WithLabelValues(result).Inc()
}

// needsChange names the machines whose applied config is not known to be
// the desired one (with upgrades, whose Talos version or extensions are
// not either).
func (l *Loop) needsChange(rep *drift.Report) map[string]bool {
	needs := map[string]bool{}
	for _, r := range rep.Results {
		if r.Check == machines.CheckConfig && r.Status != drift.StatusInSync ||
			l.opts.Changes.Upgrades != nil && (r.Check == machines.CheckTalosVersion || r.Check == machines.CheckExtensions) && r.Status != drift.StatusInSync {
			needs[r.Machine] = true
		}
	}
	return needs
}

// pass is one level-triggered pass.
func (l *Loop) pass(ctx context.Context, t *term) *PassResult {
	res := &PassResult{Started: time.Now(), Outcomes: map[string]Outcome{}, Errors: map[string]string{}, Held: map[string]string{}}
	defer l.countPass(ctx, res)

	d := l.readSpec(ctx, res)
	if d == nil {
		return res
	}
	var owned []*inventory.Machine
	for i := range d.Inventory.Machines {
		if m := &d.Inventory.Machines[i]; l.opts.Shard.Owns(m) {
			owned = append(owned, m)
		}
	}
	res.Report = l.observe(ctx, d, owned)
	if l.opts.ReportOnly || ctx.Err() != nil {
		l.logPass(res)
		return res
	}
	res.Blocked = l.recheckGate(ctx, d)

	// The machines whose applied config is not known to be the desired one,
	// control planes first: the queue hands keys out in order.
	needs := l.needsChange(res.Report)
	slices.SortStableFunc(owned, queueOrder(d.Inventory)) // and by rollout.order: rollout_order.go
	l.mu.Lock()
	l.awaited, l.outcomes, l.errs, l.held, l.passDone = map[string]bool{}, res.Outcomes, res.Errors, res.Held, make(chan struct{})
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
	l.startOrder(queue)
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
	l.syncManifestsAfter(ctx, d, res) // loop_manifests.go
	// the viaKubernetes labels and taints: loop_nodekeys.go
	l.syncNodeKeys(ctx, d, owned, res)
	l.mu.Lock()
	res.Outcomes, res.Errors, res.Held = maps.Clone(l.outcomes), maps.Clone(l.errs), maps.Clone(l.held)
	if !t.once {
		l.awaited = nil // Once collects what finishes during the grace period
	}
	if res.Blocked == "" {
		res.Blocked = l.rec.Stopped()
	}
	l.mu.Unlock()
	l.logPass(res)
	return res
}

// readSpec reads the spec; an invalid one is reported and the last valid one
// stays in force.
func (l *Loop) readSpec(ctx context.Context, res *PassResult) *Desired {
	d, err := l.opts.Source(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		res.InventoryErr = err
		l.invErr = err
		l.opts.Metrics.inventoryValid.Set(0)
		l.opts.Metrics.errors.WithLabelValues(stageInventory).Inc()
		if l.desired == nil {
			l.opts.Log.Error("inventory is invalid and no valid one was read before: nothing is observed or changed until it is fixed", "error", err)
			return nil
		}
		l.opts.Log.Error("inventory is invalid: the last valid one stays in force until it is fixed", "error", err, "in-force", l.desired.Inventory.Path)
		return l.desired
	}
	if l.invErr != nil {
		l.opts.Log.Info("inventory is valid again", "inventory", d.Inventory.Path)
	}
	for _, w := range d.Inventory.Warnings {
		l.opts.Log.Debug("inventory warning", "warning", w)
	}
	if msg := errText(d.ProvenanceErr); msg != l.provErr {
		l.provErr = msg // said once, not every pass
		if msg != "" {
			l.opts.Log.Warn("reports name no inventory commit", "error", msg)
		}
	}
	l.desired, l.invErr = d, nil
	l.opts.Metrics.inventoryValid.Set(1)
	l.opts.Metrics.inventory.set(d.Inventory.Cluster.Name, d.Provenance)
	return d
}

// observe runs the drift checks over the owned machines and publishes them.
func (l *Loop) observe(ctx context.Context, d *Desired, owned []*inventory.Machine) *drift.Report {
	h := drift.Header{Cluster: d.Inventory.Cluster.Name, Inventory: d.Inventory.Path, Provenance: d.Provenance, Simulated: l.opts.Simulated}
	names := make([]string, 0, len(owned))
	for _, m := range owned {
		names = append(names, m.Name)
	}
	selected := l.opts.Checks
	if len(selected) > 0 && !slices.Contains(selected, machines.CheckConfig) {
		selected = append(slices.Clone(selected), machines.CheckConfig)
	}
	if len(selected) > 0 && l.opts.Changes.Upgrades != nil {
		for _, c := range []string{machines.CheckTalosVersion, machines.CheckExtensions} {
			if !slices.Contains(selected, c) {
				selected = append(slices.Clone(selected), c)
			}
		}
	}
	fc := &checks.FleetCheck{
		Inventory: d.Inventory, Desired: d.Configs.Held(), DesiredFor: d.Configs.For, Dialer: l.opts.Changes.Dialer, Kube: l.opts.Changes.Kube,
		Machines: names, Checks: selected, Families: l.opts.Families, Concurrency: l.opts.Changes.Concurrency, Timeout: l.opts.Changes.Timeout,
	}
	var rep *drift.Report
	if len(owned) == 0 {
		// no machine is this replica's: an empty report, not the whole fleet's
		rep = drift.NewReport(fc.Header(h, nil))
		rep.Finish()
	} else {
		var err error
		if rep, err = fc.Report(ctx, h); err != nil {
			rep = drift.NewReport(fc.Header(h, owned))
			rep.AddError(err)
			rep.Finish()
		}
	}
	for _, r := range rep.Results {
		if r.Status == drift.StatusUnknown {
			l.opts.Metrics.errors.WithLabelValues(stageObserve).Inc()
		}
	}
	l.opts.Metrics.drift.set(d.Inventory.Cluster.Name, rep.Results)
	return rep
}

// recheckGate keeps a failed gate in force, reporting it, until etcd is
// healthy again.
func (l *Loop) recheckGate(ctx context.Context, d *Desired) string {
	blocked := l.rec.Stopped()
	if blocked == "" {
		return ""
	}
	if err := gate.EtcdHealthy(ctx, d.Inventory, l.opts.Changes.Dialer, l.opts.Changes.Timeout); err != nil {
		l.opts.Metrics.errors.WithLabelValues(stageGate).Inc()
		l.opts.Log.Warn("rollout stopped by a failed gate: no machine is changed until it passes", "stopped", blocked, "now", err.Error())
		return blocked
	}
	l.rec.stop.set("")
	l.opts.Metrics.gateBlocked.Set(0)
	l.opts.Log.Info("gate passes again: changes resume", "was", blocked)
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
	l.opts.Log.Info("pass done", attrs...)
}

func (l *Loop) finish(key string, res Result, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.awaited[key] {
		return
	}
	delete(l.awaited, key)
	l.orderFinished(key)
	if l.cpsAwaited[key] {
		delete(l.cpsAwaited, key)
		if len(l.cpsAwaited) == 0 {
			close(l.cpsDone)
		}
	}
	l.outcomes[key] = res.Outcome
	if err != nil {
		l.errs[key] = err.Error()
	}
	if res.Held != "" {
		l.held[key] = res.Held
	}
	if len(l.awaited) == 0 {
		close(l.passDone)
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

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
