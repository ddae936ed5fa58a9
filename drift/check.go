package drift

import (
	"context"
	"errors"
	"fmt"
)

// Check is a named condition: a name, a rung, a failure policy and a function
// from a target to results. A check never prints; the report renders.
type Check[T any] struct {
	Name string
	Rung Rung
	// FailClosed says an Unknown result of this check blocks a rollout; when
	// false the result is reported and the rollout continues.
	FailClosed bool
	// Applies says whether the check means anything for a target (etcd:
	// control planes only); nil means for every target.
	Applies func(target T) bool
	Run     func(ctx context.Context, target T) []Result

	// What the registry (package checks) and the commands read of a check,
	// so that none of them names it: Optional is empty for a check that
	// always runs, else the flag that turns it on ("--probe").
	Optional string
	// Kubernetes says the check reads the Kubernetes API: without a
	// kubeconfig its results, or their Kubernetes side, are Unknown.
	Kubernetes bool
	// Detail marks a check that looks past what a short report shows (the
	// storage declaration, raw disks): the demo's story leaves it out.
	Detail bool
	// FixedBy says which of devata's changes bring a Drifted result of the
	// check back in sync: reconcile counts it fixed once one was made.
	FixedBy Fix
}

// Fix is a set of devata's changes to machines.
type Fix uint8

const (
	// FixedByApply is applying the rendered config (apply, reconcile).
	FixedByApply Fix = 1 << iota
	// FixedByUpgrade is upgrading Talos to cluster.talosVersion.
	FixedByUpgrade
	// FixedByJoin is joining a machine from maintenance mode.
	FixedByJoin
)

// AppliesTo reports whether the check is meaningful for the target.
func (c Check[T]) AppliesTo(target T) bool { return c.Applies == nil || c.Applies(target) }

// Evaluate runs the check against the target of one machine and returns its
// results with the check's name, rung and failure policy filled in. It always
// returns at least one result: a check that returns none, panics or is started
// after ctx is done yields an Unknown, so one broken check never hides a machine
// or stops the rest of the fleet.
func (c Check[T]) Evaluate(ctx context.Context, machine string, target T) (results []Result) {
	stamp := func(rs []Result) []Result {
		for i := range rs {
			if rs[i].Machine == "" {
				rs[i].Machine = machine
			}
			if rs[i].Check == "" {
				rs[i].Check = c.Name
			}
			if rs[i].Rung == "" {
				rs[i].Rung = c.Rung
			}
			rs[i].FailClosed = rs[i].FailClosed || c.FailClosed
			rs[i] = normalize(rs[i])
		}
		return rs
	}
	unknown := func(err error) []Result {
		return stamp([]Result{Unknown(err, "")})
	}
	if c.Run == nil {
		return unknown(errors.New("check has no Run function"))
	}
	if err := ctx.Err(); err != nil {
		return unknown(fmt.Errorf("not started: %w", err))
	}
	defer func() {
		// A panicking check is a bug, but the fleet's report must still be printed.
		if p := recover(); p != nil {
			results = unknown(fmt.Errorf("check panicked: %v", p))
		}
	}()
	rs := c.Run(ctx, target)
	if len(rs) == 0 {
		return unknown(errors.New("check returned no result"))
	}
	return stamp(rs)
}

// Info is what a check is, without its function: what --checks, help text
// and the check catalogue list.
type Info struct {
	Name       string
	Rung       Rung
	FailClosed bool
	Optional   string
	Kubernetes bool
	Detail     bool
	FixedBy    Fix
}

// Info returns the check's name, rung, failure policy and properties.
func (c Check[T]) Info() Info {
	return Info{Name: c.Name, Rung: c.Rung, FailClosed: c.FailClosed, Optional: c.Optional, Kubernetes: c.Kubernetes, Detail: c.Detail, FixedBy: c.FixedBy}
}

// Infos returns the Info of each check, in order.
func Infos[T any](cs []Check[T]) []Info {
	out := make([]Info, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Info())
	}
	return out
}
