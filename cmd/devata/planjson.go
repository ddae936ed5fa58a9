package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/provenance"
	"devata.dev/devata/reconcile"
)

// The plan of apply and upgrade as JSON (-o json with --dry-run): the
// document docs/report.md describes ("Plans of apply and upgrade"),
// written by package plan's one writer (plan.WriteRollout) from the plan's
// steps (reconcile Plan.Steps), each in the shape of devata plan's, and
// held to the docs by TestApplyPlanJSONMatchesItsDocs. Secrets stay out as
// in the text plan: diff and changes are of redacted configs, a changed
// secret is named by its path only.

// writePlanJSON writes p and the Node label and taint writes after it (nk)
// as an ApplyPlan document, with the dry run's exit code in its summary.
func writePlanJSON(w io.Writer, verb string, inv *inventory.Inventory, prov provenance.Info, simulated bool, p *reconcile.Plan, nk nodeKeys) error {
	doc := plan.Rollout{
		Command: verb, Inventory: inv.Path, Provenance: prov, Cluster: inv.Cluster.Name, Simulated: simulated,
		Steps: p.Steps(verb), Kubernetes: p.KubernetesChange(inv), NodeKeys: nk.nodes, NodeKeysProblem: nk.problem,
	}
	pending, skipped := p.Pending(), p.Skipped()
	doc.Summary = plan.RolloutSummary{Pending: len(pending), Skipped: len(skipped), Held: len(p.Held()), Machines: len(p.Actions), ExitCode: exitOK}
	if err := p.Refusal(); err != nil {
		doc.Refused = err.Error()
	}
	var ee *exitError
	err := planExit(pending, skipped)
	if err == nil {
		err = nk.exit
	}
	switch {
	case doc.Refused != "":
		doc.Summary.ExitCode = exitTrouble
	case errors.As(err, &ee):
		doc.Summary.ExitCode = ee.code
	case err != nil:
		doc.Summary.ExitCode = exitTrouble
	}
	return plan.WriteRollout(w, doc)
}

// addPlanOutputFlag adds -o/--output to apply and upgrade: text (the
// default) or json, which prints the plan as JSON and goes with --dry-run.
func addPlanOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "text", "plan format: text, or json (with --dry-run: the plan as one JSON document, docs/report.md)")
}
