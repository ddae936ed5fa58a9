package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"devata.dev/devata/internal/drain"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
)

// DefaultDrainTimeout bounds a drain before a rebooting change when
// Rollout.DrainTimeout (--drain-timeout) gives no other: Talos' own drain
// (pkg/kubernetes DrainTimeout, used by the legacy upgrade's
// CordonAndDrainNode) gives up after five minutes too.
const DefaultDrainTimeout = 5 * time.Minute

func (r *Rollout) drainTimeout() time.Duration { return cmp.Or(r.DrainTimeout, DefaultDrainTimeout) }

// drainBefore cordons and drains m's Node before a change that reboots
// it. It returns the uncordon to run once m is back, running and ready
// (nil when devata did not cordon the Node: none, no kubeconfig, or
// cordoned by someone else, which stays so). A drain that fails or is
// blocked past the drain timeout fails m's step before anything is sent
// to it, the Node uncordoned again.
//
// talosDrains says that Talos drains on this reboot as well (the legacy
// MachineService.Upgrade sequence, not staged): devata drains first all
// the same, so that what blocks is named before anything is sent.
func (r *Rollout) drainBefore(ctx context.Context, m *inventory.Machine, talosDrains bool) (func(context.Context) error, error) {
	if r.Kube == nil {
		plan.Say(r.say, m.Name, "not drained: devata has no kubeconfig, so its Node is neither cordoned nor drained before the reboot and its pods go down with it (pass --kubeconfig to drain, or --drain=false to say so)")
		return nil, nil
	}
	bound := r.drainTimeout()
	d := &drain.Drainer{Kube: r.Kube, Timeout: r.Timeout, Wait: bound, Poll: r.Poll, Say: r.Say, Heartbeat: r.Heartbeat}
	why := "Talos does not drain on it"
	if talosDrains {
		why = "MachineService.Upgrade would drain it too; devata drains first, so that what blocks is named before anything is sent"
	}
	plan.Say(r.say, m.Name, "cordon and drain Node %s before the reboot (%s)", m.Name, why)
	ours, err := d.Cordon(ctx, m.Name, true)
	switch {
	case errors.Is(err, drain.ErrNoNode):
		r.say("    %s: no Node %s: nothing to drain", m.Name, m.Name)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: not changed: its Node could not be cordoned before the reboot: %w; fix access to the Kubernetes API (--kubeconfig), or pass --drain=false to reboot it without a drain, then run again", m.Name, err)
	case !ours:
		r.say("    %s: Node %s was cordoned before devata came: it is drained, and left cordoned after", m.Name, m.Name)
	}
	start := time.Now()
	_, err = d.Drain(ctx, m.Name, true)
	if err != nil {
		again := ""
		if ours {
			if _, uerr := d.Uncordon(context.WithoutCancel(ctx), m.Name); uerr != nil {
				again = fmt.Sprintf("; its Node stays cordoned (%v): kubectl uncordon %s", uerr, m.Name)
			} else {
				again = "; its Node is uncordoned again"
			}
		}
		next := "see what keeps its pods from terminating (kubectl get pods -A --field-selector spec.nodeName=" + m.Name + ")"
		if _, blocked := errors.AsType[*drain.BlockedError](err); blocked {
			next = "kubectl get pdb -A shows the budgets"
		}
		return nil, fmt.Errorf("%s: not changed: the drain before its reboot did not finish within --drain-timeout %s: %w%s; %s; give a longer --drain-timeout, or pass --drain=false to reboot it without a drain, then run again", m.Name, bound, err, again, next)
	}
	r.say("    %s: Node %s drained (%s)", m.Name, m.Name, time.Since(start).Round(time.Millisecond))
	if !ours {
		return nil, nil
	}
	return func(ctx context.Context) error {
		if _, err := d.Uncordon(ctx, m.Name); err != nil {
			return fmt.Errorf("%s: back and ready, but its Node could not be uncordoned: %w; kubectl uncordon %s", m.Name, err, m.Name)
		}
		r.say("    %s: Node %s uncordoned", m.Name, m.Name)
		return nil
	}, nil
}
