package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// Rollout applies a plan under devata's rollout policy: control planes one at
// a time, each gated before and after on etcd health, and before a rebooting
// change on etcd keeping quorum without it (gate.MayTakeDown); then workers
// in batches of MaxUnavailable. After each change it waits until the machine
// runs the desired config again (through its reboot, if any). It stops at the
// first failed gate or step and says where and how to resume.
type Rollout struct {
	Inventory      *inventory.Inventory
	Desired        map[string][]byte
	Dialer         *talosapi.Dialer
	MaxUnavailable int
	// Timeout bounds one Talos API call; Wait bounds waiting for a machine or a gate.
	Timeout, Wait time.Duration
	TryTimeout    time.Duration
	// PullTimeout bounds the call in which Talos pulls an upgrade's
	// installer (MachineService.Upgrade before Talos 1.13,
	// ImageService.Pull from it) and cancels the pull past it: the
	// upgrade has then not started (DefaultPullTimeout when zero).
	PullTimeout time.Duration
	// Poll is how often a wait looks again (default 500ms).
	Poll time.Duration
	// AllowQuorumLoss lets a rebooting change take down a control plane of
	// an etcd too small to lose one (one or two members; see gate.MayTakeDown).
	AllowQuorumLoss bool
	// Say prints one line of progress for people.
	Say func(format string, args ...any)
	// Heartbeat is how often a wait (for a machine or a gate) says through
	// Say that it still waits (heartbeat.Every when zero).
	Heartbeat time.Duration
	// Kube reads the Nodes: a moved kubelet is confirmed on its Node, a
	// Node is drained, and whether a CNI runs is read there.
	Kube kubernetes.Interface
	// Drain cordons and drains a machine's Node before a change that
	// reboots it (an upgrade, a rebooting apply) and uncordons it once the
	// machine is back, running and ready: Talos drains on none of them
	// (v1alpha1_sequencer.go in v1.14.1: only the legacy
	// MachineService.Upgrade sequence runs CordonAndDrainNode). A drain
	// that does not finish within DrainTimeout (DefaultDrainTimeout when
	// zero) fails that machine's step with the blocking pods named.
	Drain        bool
	DrainTimeout time.Duration

	// mu guards joinedOn, which joins in a batch of workers write, and
	// cniSeen (see cniRuns), and due.
	mu       sync.Mutex
	joinedOn map[string]string
	cniSeen  string
	// due and fleet are the loop's (kubemanifests_note.go, kubeprepull.go):
	// the note of due bootstrap manifests its changes share, and the
	// fleet's moves pulled before the first (nil: apply's rollout).
	due   *kubeMoves
	fleet func(context.Context) (moving, held []Action)
}

// RolloutResult is what one Rollout.Run did over a plan: which machines
// converged, failed or were left untouched, and why it stopped.
type RolloutResult struct {
	Converged []string
	// Failed are machines whose step failed; Untouched were never started.
	Failed, Untouched []string
	// Stopped says why the rollout stopped early, empty when it ran through.
	Stopped string
	// InFlight names the machines that were being changed when an interrupt
	// came; they were finished (or failed) before the rollout stopped.
	InFlight string
	// Refused marks a stop by the quorum rule (gate.MayTakeDown): etcd is healthy
	// but too small to lose the next control plane; nothing was sent to it.
	Refused bool
	// Partial are machines changed part way: some of their Kubernetes
	// components moved, the others wait (held by the plan, or the rollout
	// stopped before them). Their drift is left for a later run.
	Partial []string
	// JoinedOn is the Talos version each joined machine reported once it
	// had joined (Talos installs what its config's install image holds,
	// which need not be cluster.talosVersion).
	JoinedOn map[string]string
}

// Done reports whether every pending action converged.
func (o *RolloutResult) Done() bool {
	return len(o.Failed) == 0 && len(o.Untouched) == 0 && o.Stopped == ""
}

// unit is one apply of a rollout: a whole action, or one phase of a
// Kubernetes version change (phase ≥ 0).
type unit struct {
	action, phase int
}

// Run rolls out the pending actions of plan. Cancelling ctx stops taking new
// machines; a machine already being changed is finished (bounded by Wait) on
// its own context, so an interrupt never leaves a change half-reported.
//
// Control planes go one apply at a time: first every change but the
// Kubernetes components after kube-apiserver, then, for each of
// kube-controller-manager, kube-scheduler and the kubelet, every control
// plane that moves it (talosctl upgrade-k8s' order); then workers in batches.
func (r *Rollout) Run(ctx context.Context, plan *Plan) *RolloutResult {
	if r.Poll <= 0 {
		r.Poll = 500 * time.Millisecond
	}
	if r.MaxUnavailable < 1 {
		r.MaxUnavailable = 1
	}
	g := &gate.Etcd{
		Inventory: r.Inventory, Dialer: r.Dialer, Timeout: r.Timeout, Wait: r.Wait, Poll: r.Poll,
		AllowQuorumLoss: r.AllowQuorumLoss, Say: r.Say, Heartbeat: r.Heartbeat, JoinedOnly: true,
	}
	for _, a := range plan.Skipped() {
		if a.Unreachable && a.Machine.IsControlPlane() {
			g.AlreadyDown = append(g.AlreadyDown, a.Machine.Name)
		}
	}
	r.joinedOn = map[string]string{}
	out := &RolloutResult{JoinedOn: r.joinedOn}
	actions := inStageOrder(r.Inventory, plan.Pending()) // rollout_order.go
	if err := plan.Refusal(); err != nil {
		// the bundle is not the cluster's: nothing of it goes anywhere
		out.Stopped = err.Error()
		for _, a := range actions {
			out.Untouched = append(out.Untouched, a.Machine.Name)
		}
		return out
	}
	run := &rolloutRun{r: r, gate: g, actions: actions, out: out, started: make([]bool, len(actions)), done: make([]bool, len(actions))}
	cps, workers := rolloutOrder(actions)
	// pull before any component moves, and note that the bootstrap
	// manifests are due: kubeprepull.go
	if k := plan.Kubernetes; k == nil || k.Refused == "" {
		if err := r.beforeMoves(ctx, actions); err != nil {
			return run.stop(err.Error())
		}
	}
	for _, u := range cps {
		if why := run.controlPlane(ctx, u); why != "" {
			return run.stop(why)
		}
	}
	for _, batch := range workerBatches(r.Inventory, actions, workers, r.MaxUnavailable) {
		if why := run.workers(ctx, batch); why != "" {
			return run.stop(why)
		}
	}
	if err := r.syncManifests(ctx, plan, out); err != nil { // kubemanifests.go
		return run.stop(err.Error())
	}
	return out
}

// rolloutOrder is the order Run takes the actions in: the control planes'
// units (joins first: until a control plane joined, a gate counts it down
// when etcd still lists its old member; then each control plane's change,
// a Kubernetes change one phase per component round in talosctl
// upgrade-k8s' order), and the workers' actions.
func rolloutOrder(actions []Action) (cps []unit, workers []int) {
	for i, a := range actions {
		if a.Kind == KindJoin && a.Machine.IsControlPlane() {
			cps = append(cps, unit{i, -1})
		}
	}
	for round, c := range talosapi.KubeOrder {
		for i, a := range actions {
			switch {
			case !a.Machine.IsControlPlane():
				if round == 0 {
					workers = append(workers, i)
				}
			case a.Kind == KindJoin:
			case a.Kubernetes == nil:
				if round == 0 {
					cps = append(cps, unit{i, -1})
				}
			default:
				for p, ph := range a.Kubernetes.Phases {
					// the first round takes kube-apiserver and a change with every component held
					if ph.Component == c || round == 0 && ph.Component == "" {
						cps = append(cps, unit{i, p})
					}
				}
			}
		}
	}
	return cps, workers
}

// rolloutRun is one Run's progress: which actions started and which are
// done, and the result it builds.
type rolloutRun struct {
	r             *Rollout
	gate          *gate.Etcd
	actions       []Action
	out           *RolloutResult
	started, done []bool
}

// stop ends the rollout: every action not started is untouched, every one
// started and not done partial.
func (run *rolloutRun) stop(why string) *RolloutResult {
	out := run.out
	out.Stopped = why
	for i, a := range run.actions {
		switch {
		case !run.started[i]:
			out.Untouched = append(out.Untouched, a.Machine.Name)
		case !run.done[i] && !slices.Contains(out.Failed, a.Machine.Name):
			out.Partial = append(out.Partial, a.Machine.Name)
		}
	}
	return out
}

// finish counts an action whose last apply is done.
func (run *rolloutRun) finish(i int) {
	run.done[i] = true
	if k := run.actions[i].Kubernetes; k != nil && len(k.Held) > 0 {
		run.out.Partial = append(run.out.Partial, run.actions[i].Machine.Name)
		return
	}
	run.out.Converged = append(run.out.Converged, run.actions[i].Machine.Name)
}

// controlPlane takes one control plane's unit between two passes of the
// etcd gate; it says why the rollout stops, or "".
func (run *rolloutRun) controlPlane(ctx context.Context, u unit) string {
	a := run.actions[u.action]
	if err := ctx.Err(); err != nil {
		return "interrupted before " + a.Machine.Name
	}
	var down *inventory.Machine
	if u.reboots(a) {
		down = a.Machine
	}
	pass := func() error { return run.gate.Pass(ctx, "before "+a.Machine.Name, down) }
	if a.Kind == KindJoin {
		pass = func() error { return run.gate.PassJoin(ctx, "before "+a.Machine.Name+" joins", a.Machine) }
	}
	if err := pass(); err != nil {
		var qe *gate.QuorumError
		run.out.Refused = errors.As(err, &qe) && qe.Loss
		return err.Error()
	}
	run.started[u.action] = true
	err := run.r.apply(context.WithoutCancel(ctx), a, u.phase)
	if ctx.Err() != nil {
		run.out.InFlight = a.Machine.Name // interrupted while changing it: finished, not abandoned
	}
	if err != nil {
		run.out.Failed = append(run.out.Failed, a.Machine.Name)
		return err.Error()
	}
	if u.last(a) {
		run.finish(u.action)
	}
	if err := run.gate.Pass(context.WithoutCancel(ctx), "after "+a.Machine.Name, nil); err != nil {
		return err.Error()
	}
	return ""
}

// workers changes one batch of workers at once; it says why the rollout
// stops, or "".
func (run *rolloutRun) workers(ctx context.Context, batch []int) string {
	names := func() string {
		var ns []string
		for _, i := range batch {
			ns = append(ns, run.actions[i].Machine.Name)
		}
		return strings.Join(ns, ", ")
	}
	if ctx.Err() != nil {
		return "interrupted before " + names()
	}
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	for _, i := range batch {
		run.started[i] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := run.r.applyAll(context.WithoutCancel(ctx), run.actions[i])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				run.out.Failed = append(run.out.Failed, run.actions[i].Machine.Name)
				errs = append(errs, err.Error())
			} else {
				run.finish(i)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		run.out.InFlight = names()
	}
	if len(errs) > 0 {
		slices.Sort(run.out.Failed)
		return strings.Join(errs, "; ")
	}
	return ""
}

// workerBatches splits the workers' actions into batches of at most max,
// none holding more of a group's machines than the group's
// rollout.maxUnavailable (issue 36): each batch takes, in order, every
// worker that still fits, and one that does not waits for a later batch.
func workerBatches(inv *inventory.Inventory, actions []Action, workers []int, max int) [][]int {
	var batches [][]int
	rest := workers
	for len(rest) > 0 {
		var batch, later []int
		inBatch, stages := map[string]int{}, map[string]int{}
		for _, i := range rest {
			fits := stageFits(inv, actions[i].Machine, stages) && len(batch) < max
			for _, name := range actions[i].Machine.Groups {
				if g := inv.Group(name); fits && g != nil && g.Rollout.MaxUnavailable > 0 && inBatch[name] >= g.Rollout.MaxUnavailable {
					fits = false
				}
			}
			if !fits {
				later = append(later, i)
				continue
			}
			batch = append(batch, i)
			for _, name := range actions[i].Machine.Groups {
				inBatch[name]++
			}
		}
		batches = append(batches, batch)
		rest = later
	}
	return batches
}

// reboots reports whether the unit's apply reboots the machine.
func (u unit) reboots(a Action) bool {
	if u.phase < 0 {
		return a.Reboots
	}
	return a.Kubernetes.Phases[u.phase].Reboots
}

// last reports whether the unit is the action's last apply.
func (u unit) last(a Action) bool { return u.phase < 0 || u.phase == len(a.Kubernetes.Phases)-1 }

// applyAll carries out every apply of an action, in order.
func (r *Rollout) applyAll(ctx context.Context, a Action) error {
	if a.Kubernetes == nil {
		return r.apply(ctx, a, -1)
	}
	for p := range a.Kubernetes.Phases {
		if err := r.apply(ctx, a, p); err != nil {
			return err
		}
	}
	return nil
}

// apply carries out one apply of an action: a Kubernetes phase (phase ≥ 0),
// an upgrade, a join or a config change; one that reboots a configured
// machine between a drain of its Node and its uncordon (Drain).
func (r *Rollout) apply(ctx context.Context, a Action, phase int) error {
	if !r.Drain || a.Kind == KindJoin || !(unit{phase: phase}).reboots(a) {
		return r.applyOnce(ctx, a, phase)
	}
	talosDrains := a.Kind == KindUpgrade && !a.Upgrade.Stage && talosapi.UpgradeVia(a.Upgrade.From) == talosapi.UpgradeViaLegacy
	uncordon, err := r.drainBefore(ctx, a.Machine, talosDrains)
	if err != nil {
		return err
	}
	if err := r.applyOnce(ctx, a, phase); err != nil {
		if uncordon != nil {
			r.say("    %s: its Node stays cordoned (devata cordoned it): kubectl uncordon %s once it is healthy, or run devata again", a.Machine.Name, a.Machine.Name)
		}
		return err
	}
	if uncordon != nil {
		return uncordon(ctx)
	}
	return nil
}

// applyOnce is apply without the drain.
func (r *Rollout) applyOnce(ctx context.Context, a Action, phase int) error {
	switch {
	case phase >= 0:
		return r.kubePhase(ctx, a, a.Kubernetes.Phases[phase])
	case a.Kind == KindUpgrade:
		return r.upgrade(ctx, a)
	case a.Kind == KindJoin:
		return r.join(ctx, a)
	}
	return r.change(ctx, a)
}

// change applies one machine's desired config and waits until it runs it.
func (r *Rollout) change(ctx context.Context, a Action) error {
	cfg := a.Config
	if cfg == nil {
		cfg = r.Desired[a.Machine.Name]
	}
	return r.applyWait(ctx, a.Machine, cfg, a.Mode, a.Reboots, a.Diff.Summary(), a.NotReady)
}

// applyWait applies cfg to m in mode and waits until it runs it (through
// its reboot, if it reboots), running and ready. summary says what changes,
// notReady what kept it from being ready before.
func (r *Rollout) applyWait(ctx context.Context, m *inventory.Machine, cfg []byte, mode talosapi.Mode, reboots bool, summary, notReady string) error {
	start := time.Now()
	plan.Say(r.say, m.Name, "apply (%s): %s", mode, summary)
	if notReady != "" {
		r.say("    %s: %s; the wait after the change needs it running and ready", m.Name, notReady)
	}
	actx, cancel := context.WithTimeout(ctx, r.Timeout)
	c, err := r.Dialer.Client(actx, m)
	lost := false
	if err == nil {
		defer c.Close()
		_, err = talosapi.Apply(actx, c, cfg, mode, r.TryTimeout)
		// The connection dropped mid-apply: Talos may have persisted the
		// config and rebooted before it replied. Judge by what the machine
		// runs once it is back, not by the broken call.
		lost = err != nil && talosapi.IsUnreachable(err) && ctx.Err() == nil && mode != talosapi.ModeStaged
	}
	cancel()
	switch {
	case lost:
		r.say("    %s: connection lost during the apply (%v); waiting to see whether it rebooted into its config", m.Name, err)
		if _, werr := r.waitConverged(ctx, m, cfg, true, "to come back on its desired config"); werr != nil {
			return fmt.Errorf("%s: the connection was lost during the apply (%v), and it did not come back running its desired config: %w", m.Name, err, werr)
		}
		r.say("    %s: back, runs the desired config (%s)", m.Name, time.Since(start).Round(time.Millisecond))
		return nil
	case err != nil:
		return fmt.Errorf("%s: apply: %w", m.Name, err)
	}
	if mode == talosapi.ModeStaged {
		r.say("    %s: staged; it takes effect on the next reboot", m.Name)
		return nil
	}
	waitsFor := "to run its desired config, running and ready"
	if reboots {
		r.say("    %s: applied; rebooting, waiting for it to return", m.Name)
		waitsFor = "to come back on its desired config"
	}
	if _, err := r.waitConverged(ctx, m, cfg, reboots, waitsFor); err != nil {
		return err
	}
	r.say("    %s: runs the desired config, stage running (%s)", m.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// waitConverged polls until the machine answers, runs the desired config and
// is running and ready, or ready but for its Kubernetes Node (MachineStatus'
// nodeReady condition): with cluster.network.cni none no Node is Ready before
// the CNI runs, and the kubelet check reports the Node. A machine that
// rebooted into its config comes back through stage booting; a control
// plane stays there until its etcd runs again. Every Heartbeat it says what it
// waits for (the machine's name, then waitsFor) and what it last saw. It
// returns the observation that ended the wait.
//
// rebooted says the change rebooted the machine (or may have): when the
// API server does not answer, a Node NotReady is waited for only then; a
// change that did not reboot it left its kubelet and Node as they were.
func (r *Rollout) waitConverged(ctx context.Context, m *inventory.Machine, want []byte, rebooted bool, waitsFor string) (*talosapi.Observation, error) {
	// Each look runs to its own timeout, not the wait's, so that the error
	// reported when the wait ends is a whole observation, not a cut-off one.
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	var last string // what the last look found, once one did
	beat := heartbeat.Start(r.Say, r.Heartbeat, r.Wait, m.Name+" "+waitsFor)
	defer beat.Stop()
	for {
		octx, ocancel := context.WithTimeout(ctx, r.Timeout)
		o := talosapi.Observe(octx, r.Dialer, m)
		ocancel()
		switch {
		case o.Err != nil:
			last = o.Err.Error()
		case o.ConfigErr != nil:
			last = o.ConfigErr.Error()
		default:
			d, err := talosapi.DiffConfigs(o.Active, want)
			switch {
			case err != nil:
				last = err.Error()
			case !d.Equal:
				last = "applied config still differs: " + d.Summary()
			case o.Stage == "running" && o.NotReadyOnlyForNode():
				runs, why, unknown := r.cniRuns(ctx)
				if unknown && !rebooted {
					runs, why = false, why+"; but this change did not reboot it, so its kubelet and Node are as they were before it"
				}
				if runs {
					last = fmt.Sprintf("running, but its Node is not Ready (%s) while a CNI runs in the cluster (%s): waiting for the Node", strings.Join(o.Unmet, "; "), why)
					break
				}
				beat.Stop()
				r.say("    %s: running; not ready only because its Node is not (%s): %s; Talos and etcd are what this waits for, the kubelet check reports the Node", m.Name, strings.Join(o.Unmet, "; "), why)
				return o, nil
			case o.Stage != "running" || !o.Ready:
				last = fmt.Sprintf("stage %s, ready %t", o.Stage, o.Ready)
				if len(o.Unmet) > 0 {
					last += "; unmet: " + strings.Join(o.Unmet, "; ")
				}
			default:
				return o, nil
			}
		}
		beat.Saw(last)
		select {
		case <-wctx.Done():
			return nil, fmt.Errorf("%s did not converge within %s: %s", m.Name, r.Wait, last)
		case <-time.After(r.Poll):
		}
	}
}

func (r *Rollout) say(format string, args ...any) {
	if r.Say != nil {
		r.Say(format, args...)
	}
}
