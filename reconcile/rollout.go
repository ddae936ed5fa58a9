package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
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
	Dialer         *machines.Dialer
	MaxUnavailable int
	// Timeout bounds one Talos API call; Wait bounds waiting for a machine or a gate.
	Timeout, Wait time.Duration
	TryTimeout    time.Duration
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
}

// Outcome is what a rollout did.
type Outcome struct {
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
}

// Done reports whether every pending action converged.
func (o *Outcome) Done() bool { return len(o.Failed) == 0 && len(o.Untouched) == 0 && o.Stopped == "" }

// Run rolls out the pending actions of plan. Cancelling ctx stops taking new
// machines; a machine already being changed is finished (bounded by Wait) on
// its own context, so an interrupt never leaves a change half-reported.
func (r *Rollout) Run(ctx context.Context, plan *Plan) *Outcome {
	if r.Poll <= 0 {
		r.Poll = 500 * time.Millisecond
	}
	if r.MaxUnavailable < 1 {
		r.MaxUnavailable = 1
	}
	g := &gate.Etcd{
		Inventory: r.Inventory, Dialer: r.Dialer, Timeout: r.Timeout, Wait: r.Wait, Poll: r.Poll,
		AllowQuorumLoss: r.AllowQuorumLoss, Say: r.Say, Heartbeat: r.Heartbeat,
	}
	out := &Outcome{}
	var cps, workers []Action
	for _, a := range plan.Pending() {
		if a.Machine.IsControlPlane() {
			cps = append(cps, a)
		} else {
			workers = append(workers, a)
		}
	}
	untouched := func(rest []Action) {
		for _, a := range rest {
			out.Untouched = append(out.Untouched, a.Machine.Name)
		}
	}
	for i, a := range cps {
		if err := ctx.Err(); err != nil {
			out.Stopped = "interrupted before " + a.Machine.Name
			untouched(cps[i:])
			untouched(workers)
			return out
		}
		var down *inventory.Machine
		if a.Reboots {
			down = a.Machine
		}
		if err := g.Pass(ctx, "before "+a.Machine.Name, down); err != nil {
			var qe *gate.QuorumError
			out.Refused = errors.As(err, &qe) && qe.Loss
			out.Stopped = err.Error()
			untouched(cps[i:])
			untouched(workers)
			return out
		}
		err := r.step(context.WithoutCancel(ctx), a)
		if ctx.Err() != nil {
			out.InFlight = a.Machine.Name // interrupted while changing it: finished, not abandoned
		}
		if err != nil {
			out.Failed = append(out.Failed, a.Machine.Name)
			out.Stopped = err.Error()
			untouched(cps[i+1:])
			untouched(workers)
			return out
		}
		if err := g.Pass(context.WithoutCancel(ctx), "after "+a.Machine.Name, nil); err != nil {
			out.Converged = append(out.Converged, a.Machine.Name)
			out.Stopped = err.Error()
			untouched(cps[i+1:])
			untouched(workers)
			return out
		}
		out.Converged = append(out.Converged, a.Machine.Name)
	}
	for start := 0; start < len(workers); start += r.MaxUnavailable {
		batch := workers[start:min(start+r.MaxUnavailable, len(workers))]
		if ctx.Err() != nil {
			out.Stopped = "interrupted before " + names(batch)
			untouched(workers[start:])
			return out
		}
		var (
			mu     sync.Mutex
			failed []string
			errs   []string
			wg     sync.WaitGroup
		)
		for _, a := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := r.step(context.WithoutCancel(ctx), a)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, a.Machine.Name)
					errs = append(errs, err.Error())
				} else {
					out.Converged = append(out.Converged, a.Machine.Name)
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			out.InFlight = names(batch)
		}
		if len(failed) > 0 {
			slices.Sort(failed)
			out.Failed = append(out.Failed, failed...)
			out.Stopped = strings.Join(errs, "; ")
			untouched(workers[start+len(batch):])
			return out
		}
	}
	return out
}

// step carries out one action: an upgrade or a config change.
func (r *Rollout) step(ctx context.Context, a Action) error {
	if a.Kind == KindUpgrade {
		return r.upgrade(ctx, a)
	}
	return r.change(ctx, a)
}

// change applies one machine's desired config and waits until it runs it.
func (r *Rollout) change(ctx context.Context, a Action) error {
	m := a.Machine
	start := time.Now()
	r.say("==> %s: apply (%s): %s", m.Name, a.Mode, a.Diff.Summary())
	if a.NotReady != "" {
		r.say("    %s: %s; the wait after the change needs it running and ready", m.Name, a.NotReady)
	}
	actx, cancel := context.WithTimeout(ctx, r.Timeout)
	c, err := r.Dialer.Client(actx, m)
	lost := false
	if err == nil {
		defer c.Close()
		_, err = machines.Apply(actx, c, r.Desired[m.Name], a.Mode, r.TryTimeout)
		// The connection dropped mid-apply: Talos may have persisted the
		// config and rebooted before it replied. Judge by what the machine
		// runs once it is back, not by the broken call.
		lost = err != nil && machines.IsUnreachable(err) && ctx.Err() == nil && a.Mode != machines.ModeStaged
	}
	cancel()
	switch {
	case lost:
		r.say("    %s: connection lost during the apply (%v); waiting to see whether it rebooted into its config", m.Name, err)
		if werr := r.waitConverged(ctx, m, "to come back on its desired config"); werr != nil {
			return fmt.Errorf("%s: the connection was lost during the apply (%v), and it did not come back running its desired config: %w", m.Name, err, werr)
		}
		r.say("    %s: back, runs the desired config (%s)", m.Name, time.Since(start).Round(time.Millisecond))
		return nil
	case err != nil:
		return fmt.Errorf("%s: apply: %w", m.Name, err)
	}
	if a.Mode == machines.ModeStaged {
		r.say("    %s: staged; it takes effect on the next reboot", m.Name)
		return nil
	}
	waitsFor := "to run its desired config, running and ready"
	if a.Reboots {
		r.say("    %s: applied; rebooting, waiting for it to return", m.Name)
		waitsFor = "to come back on its desired config"
	}
	if err := r.waitConverged(ctx, m, waitsFor); err != nil {
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
// waits for (the machine's name, then waitsFor) and what it last saw.
func (r *Rollout) waitConverged(ctx context.Context, m *inventory.Machine, waitsFor string) error {
	// Each look runs to its own timeout, not the wait's, so that the error
	// reported when the wait ends is a whole observation, not a cut-off one.
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	want := r.Desired[m.Name]
	last := "no answer yet"
	beat := heartbeat.Start(r.Say, r.Heartbeat, r.Wait, m.Name+" "+waitsFor)
	defer beat.Stop()
	for {
		octx, ocancel := context.WithTimeout(ctx, r.Timeout)
		o := machines.Observe(octx, r.Dialer, m)
		ocancel()
		switch {
		case o.Err != nil:
			last = o.Err.Error()
		case o.ConfigErr != nil:
			last = o.ConfigErr.Error()
		default:
			d, err := machines.DiffConfigs(o.Active, want)
			switch {
			case err != nil:
				last = err.Error()
			case !d.Equal:
				last = "applied config still differs: " + d.Summary()
			case o.Stage == "running" && o.NotReadyOnlyForNode():
				beat.Stop()
				r.say("    %s: running; not ready only because its Node is not (%s): Talos and etcd are what this waits for, the kubelet check reports the Node", m.Name, strings.Join(o.Unmet, "; "))
				return nil
			case o.Stage != "running" || !o.Ready:
				last = fmt.Sprintf("stage %s, ready %t", o.Stage, o.Ready)
				if len(o.Unmet) > 0 {
					last += "; unmet: " + strings.Join(o.Unmet, "; ")
				}
			default:
				return nil
			}
		}
		beat.Saw(last)
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s did not converge within %s: %s", m.Name, r.Wait, last)
		case <-time.After(r.Poll):
		}
	}
}

func (r *Rollout) say(format string, args ...any) {
	if r.Say != nil {
		r.Say(format, args...)
	}
}

func names(as []Action) string {
	var n []string
	for _, a := range as {
		n = append(n, a.Machine.Name)
	}
	return strings.Join(n, ", ")
}
