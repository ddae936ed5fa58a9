package main

import (
	"context"
	"errors"
	"fmt"

	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/reconcile"
)

// nodeKeys is what apply does (or, in a dry run, would do) on the Nodes
// for the inventory's viaKubernetes labels and taints: each machine's
// outcome, a line saying why none could be planned ("" when they were),
// and the exit it calls for (nil: none left).
type nodeKeys struct {
	nodes   []plan.NodeKeys
	problem string
	exit    error
}

// runNodeKeys writes the machines' viaKubernetes labels and taints on
// their Nodes through the Kubernetes API (reconcile.NodeWriter), for the
// machines the rollout changed and those it did not; nothing goes to
// Talos. dryRun writes nothing. upgrade sets none (zero).
func (a *app) runNodeKeys(ctx context.Context, flags applyFlags, s *session, only []*inventory.Machine, ignoreHold map[string]bool, dryRun bool) nodeKeys {
	if ctx.Err() != nil || flags.verb() == "upgrade" {
		return nodeKeys{}
	}
	machines := only
	if len(machines) == 0 {
		for i := range s.inv.Machines {
			machines = append(machines, &s.inv.Machines[i])
		}
	}
	res, err := reconcile.NodeWriter{Kube: s.kube, DryRun: dryRun, IgnoreHold: ignoreHold}.Run(ctx, machines)
	nk := nodeKeys{nodes: reconcile.NodeKeysPlan(res)}
	left, failed := false, false
	for _, r := range res {
		left = left || r.Pending || (dryRun && r.Change.Changed() && r.Held == nil)
		failed = failed || r.Err != nil
	}
	switch {
	case errors.Is(err, reconcile.ErrNoKubeconfig):
		nk.problem = "viaKubernetes labels and taints were not applied: " + err.Error()
		if dryRun {
			nk.problem = "viaKubernetes labels and taints would not be applied: " + err.Error()
		}
		nk.exit = exitWith(exitFailed, nil)
	case failed:
		nk.exit = exitWith(exitTrouble, errors.New("some Nodes' viaKubernetes labels and taints could not be set (see above): resolve it, then run devata apply again"))
	case err != nil:
		nk.problem = "viaKubernetes labels and taints: " + err.Error()
		nk.exit = exitWith(exitTrouble, fmt.Errorf("setting Node labels and taints through the Kubernetes API: %w; resolve it, then run devata apply again", err))
	case left:
		nk.exit = exitWith(exitFailed, nil)
	}
	return nk
}

// applyNodeKeys sets the viaKubernetes labels and taints once the rollout
// is over and prints what it set (would set, in a dry run) through the
// plan's writer. rolled is the rollout's outcome: returned as it is,
// unless the rollout was fine and these were not (1: left pending; 2: a
// write failed).
func (a *app) applyNodeKeys(ctx context.Context, flags applyFlags, s *session, only []*inventory.Machine, ignoreHold map[string]bool, rolled error) error {
	nk := a.runNodeKeys(ctx, flags, s, only, ignoreHold, flags.dryRun)
	if err := plan.WriteNodeKeys(a.streams.Out, nk.nodes, nk.problem, flags.dryRun); err != nil {
		return exitWith(exitTrouble, err)
	}
	if rolled != nil {
		return rolled
	}
	return nk.exit
}
