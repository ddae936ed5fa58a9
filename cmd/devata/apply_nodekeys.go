package main

import (
	"context"
	"errors"
	"fmt"

	"devata.dev/devata/inventory"
	"devata.dev/devata/reconcile"
)

// applyNodeKeys writes the machines' viaKubernetes labels and taints on
// their Nodes through the Kubernetes API once the rollout is over, for the
// machines it changed and those it did not (reconcile.NodeWriter); nothing
// goes to Talos. A dry run prints what it would set. rolled is the
// rollout's outcome: returned as it is, unless the rollout was fine and
// these were not (1: left pending; 2: a write failed).
func (a *app) applyNodeKeys(ctx context.Context, flags applyFlags, s *session, only []*inventory.Machine, ignoreHold map[string]bool, rolled error) error {
	if ctx.Err() != nil || flags.verb() == "upgrade" {
		return rolled
	}
	machines := only
	if len(machines) == 0 {
		for i := range s.inv.Machines {
			machines = append(machines, &s.inv.Machines[i])
		}
	}
	res, err := reconcile.NodeWriter{Kube: s.kube, DryRun: flags.dryRun, IgnoreHold: ignoreHold}.Run(ctx, machines)
	out := a.streams.Out
	left, failed := false, false
	for _, r := range res {
		for _, line := range r.Lines(flags.dryRun) {
			fmt.Fprintln(out, line)
		}
		left = left || r.Pending || (flags.dryRun && r.Change.Changed() && r.Held == nil)
		failed = failed || r.Err != nil
	}
	noKube := errors.Is(err, reconcile.ErrNoKubeconfig)
	if noKube {
		fmt.Fprintln(out, "viaKubernetes labels and taints were not applied: "+err.Error())
	}
	switch {
	case rolled != nil:
		return rolled
	case noKube:
		return exitWith(exitFailed, nil)
	case failed:
		return exitWith(exitTrouble, errors.New("some Nodes' viaKubernetes labels and taints could not be set (see above): resolve it, then run devata apply again"))
	case err != nil:
		return exitWith(exitTrouble, fmt.Errorf("setting Node labels and taints through the Kubernetes API: %w; resolve it, then run devata apply again", err))
	case left:
		return exitWith(exitFailed, nil)
	}
	return nil
}
