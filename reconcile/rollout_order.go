package reconcile

import (
	"cmp"
	"context"
	"slices"

	"devata.dev/devata/inventory"
)

// A group's rollout.order (inventory.RolloutStage) is a stage barrier in
// both rollouts: apply's Rollout takes the actions in stage order and
// puts no machine in a batch beside, or before, one of an earlier stage of
// its group; the loop queues its machines in stage order and admits a
// machine's change only once every machine of an earlier stage of its
// group and role that the pass queued has finished (converged, failed,
// held or otherwise done), as it admits workers only once the pass's
// control planes are done. Machines in no ordered group are not held back.

// stageOf is m's stage in its group's rollout.order, 0 without one.
func stageOf(inv *inventory.Inventory, m *inventory.Machine) int {
	_, stage, _ := inv.RolloutStage(m)
	return stage
}

// inStageOrder is actions sorted by their machines' stages, stable: the
// order the inventory and the plan gave stays within a stage.
func inStageOrder(inv *inventory.Inventory, actions []Action) []Action {
	out := slices.Clone(actions)
	slices.SortStableFunc(out, func(a, b Action) int { return cmp.Compare(stageOf(inv, a.Machine), stageOf(inv, b.Machine)) })
	return out
}

// stageFits reports whether worker m may join a batch when seen are the
// lowest stages, by ordered group, of the workers already placed in this
// batch or left for a later one: only when none of its group is at an
// earlier stage. It records m's stage in seen.
func stageFits(inv *inventory.Inventory, m *inventory.Machine, seen map[string]int) bool {
	group, stage, ok := inv.RolloutStage(m)
	if !ok {
		return true
	}
	lowest, any := seen[group]
	if !any || stage < lowest {
		seen[group] = stage
	}
	return !any || lowest >= stage
}

// queueOrder orders the machines a pass queues: control planes first (the
// queue hands keys out in order), then by stage, so that no machine a
// worker goroutine waits for is still behind it in the queue.
func queueOrder(inv *inventory.Inventory) func(a, b *inventory.Machine) int {
	return func(a, b *inventory.Machine) int {
		if c := compareBool(b.IsControlPlane(), a.IsControlPlane()); c != 0 {
			return c
		}
		return cmp.Compare(stageOf(inv, a), stageOf(inv, b))
	}
}

// orderBook is the pass's barrier of rollout orders: a channel per queued
// machine, closed when the pass hears back from it. Guarded by Loop.mu.
type orderBook struct {
	orderDone map[string]chan struct{}
}

// startOrder opens the barrier of a pass that queued queue (l.mu held).
func (l *Loop) startOrder(queue []string) {
	l.orderDone = make(map[string]chan struct{}, len(queue))
	for _, name := range queue {
		l.orderDone[name] = make(chan struct{})
	}
}

// orderFinished lets the machines after key go (l.mu held).
func (l *Loop) orderFinished(key string) {
	if ch, ok := l.orderDone[key]; ok {
		close(ch)
		delete(l.orderDone, key)
	}
}

// waitOrder waits until every machine this pass queued at an earlier stage
// of m's group and role is done; false when ctx ended first.
func (l *Loop) waitOrder(ctx context.Context, inv *inventory.Inventory, m *inventory.Machine) bool {
	if _, _, ok := inv.RolloutStage(m); !ok {
		return true
	}
	var waits []chan struct{}
	l.mu.Lock()
	for name, ch := range l.orderDone {
		if e := inv.Machine(name); e != nil && inv.RolloutAfter(m, e) {
			waits = append(waits, ch)
		}
	}
	l.mu.Unlock()
	for _, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
