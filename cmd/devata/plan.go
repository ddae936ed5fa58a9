package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"devata.dev/devata/bootstrap/sequence"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/membership"
)

func (a *app) newPlanCommand() *cobra.Command {
	var flags struct {
		sequenceFlags
		output string
	}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "The ordered actions bootstrap and apply would take now, with reasons and evidence",
		Long: `plan observes every machine, as bootstrap would, and prints the ordered actions
that devata bootstrap (and, for configured machines whose config differs once
the cluster exists, devata apply) would take now: each with its status
(pending, done, blocked), its reason, the evidence behind it (the rung of the
evidence ladder and what was observed) and the talosctl commands that do the
same by hand. Nothing is written anywhere; configs are only dry-run.

  -o text       for people
  -o markdown   a reconstruction runbook to follow by hand
  -o json       for tools

Once the cluster answers, plan also lists orphans: etcd members and Nodes
that no machine of the inventory has (a machine deleted from it). Nothing
touches them; devata remove NAME takes each out.

Exit 0 nothing to do, 1 actions pending, 2 error or a blocked action.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch flags.output {
			case sequence.FormatText, sequence.FormatMarkdown, sequence.FormatJSON:
			default:
				return usageError(fmt.Errorf("unknown output %q: use text, markdown or json", flags.output))
			}
			opts, err := a.sequenceOptions(flags.sequenceFlags)
			if err != nil {
				return err
			}
			opts.Out = a.streams.Err // warnings only
			seq := sequence.New(opts)
			plan, err := seq.Plan(cmd.Context())
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			plan.Provenance = a.inventoryProvenance(cmd.Context(), a.settings.Inventory)
			plan.Orphans = a.planOrphans(cmd.Context(), seq.Inventory(), seq.Dialer())
			if err := sequence.WritePlan(a.streams.Out, flags.output, plan, a.settings.Simulated); err != nil {
				return exitWith(exitTrouble, err)
			}
			if blocked := plan.Blocked(); len(blocked) > 0 {
				return exitWith(exitTrouble, fmt.Errorf("%d %s blocked: see the reasons above", len(blocked), plural(len(blocked), "step is", "steps are")))
			}
			if len(plan.Pending()) > 0 {
				return exitWith(exitFailed, nil)
			}
			return nil
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVarP(&flags.output, "output", "o", sequence.FormatText, "plan format: text, markdown (a runbook) or json")
	return cmd
}

// planOrphans lists the cluster's etcd members and Nodes the inventory no
// longer has, through the inventory and dialer the plan already built. It
// is best effort: before the cluster exists (no control plane reporting
// etcd) there are none to list, and plan says nothing about them.
func (a *app) planOrphans(ctx context.Context, inv *inventory.Inventory, d *machines.Dialer) []sequence.Orphan {
	if inv == nil || d == nil {
		return nil
	}
	kube, _, err := a.sessionKubeClients(inv)
	if err != nil {
		kube = nil
	}
	found, err := membership.Orphans(ctx, inv, d, kube, a.settings.Timeout)
	if err != nil {
		a.log.Debug("orphans not fully observed", "error", err)
	}
	out := make([]sequence.Orphan, 0, len(found))
	for _, o := range found {
		out = append(out, sequence.Orphan{Name: o.Name, What: o.What(), Remove: "devata remove " + o.Name})
	}
	return out
}
