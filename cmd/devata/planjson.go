package main

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"devata.dev/devata/provenance"
	"devata.dev/devata/reconcile"
)

// The plan of apply and upgrade as JSON (-o json with --dry-run): the
// document docs/report.md describes ("Plans of apply and upgrade"),
// held to it by TestApplyPlanJSONMatchesItsDocs. Secrets stay out as in
// the text plan: diff and changes are of redacted configs, a changed
// secret is named by its path only.

const (
	applyPlanAPIVersion = "devata.dev/v1alpha1"
	applyPlanKind       = "ApplyPlan"
)

type applyPlanJSON struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Command    string           `json:"command"`
	Inventory  string           `json:"inventory"`
	Provenance provenance.Info  `json:"provenance,omitzero"`
	Cluster    string           `json:"cluster"`
	Simulated  bool             `json:"simulated"`
	Actions    []planActionJSON `json:"actions"`
	// Refused is why nothing of the plan may be written (Plan.Refusal).
	Refused string          `json:"refused,omitempty"`
	Summary planSummaryJSON `json:"summary"`
}

type planActionJSON struct {
	Machine        string           `json:"machine"`
	Role           string           `json:"role"`
	Action         string           `json:"action"`
	Mode           string           `json:"mode,omitempty"`
	Reboots        bool             `json:"reboots"`
	Reason         string           `json:"reason,omitempty"`
	Changes        []string         `json:"changes,omitempty"`
	SecretsChanged []string         `json:"secretsChanged,omitempty"`
	Diff           string           `json:"diff,omitempty"`
	Upgrade        *planUpgradeJSON `json:"upgrade,omitempty"`
	Evidence       string           `json:"evidence,omitempty"`
	Warnings       []string         `json:"warnings,omitempty"`
	// Held says why the inventory holds the action back: hold
	// (machines[].hold) or window (outside its maintenance windows).
	Held string `json:"held,omitempty"`
}

type planUpgradeJSON struct {
	From  string   `json:"from"`
	To    string   `json:"to"`
	Image string   `json:"image"`
	Final string   `json:"final,omitempty"`
	Stage bool     `json:"stage,omitempty"`
	Drops []string `json:"drops,omitempty"`
}

type planSummaryJSON struct {
	Pending  int `json:"pending"`
	Skipped  int `json:"skipped"`
	Held     int `json:"held"`
	Machines int `json:"machines"`
	ExitCode int `json:"exitCode"`
}

// writePlanJSON writes plan as an ApplyPlan document.
func writePlanJSON(w io.Writer, verb, invPath, cluster string, prov provenance.Info, simulated bool, plan *reconcile.Plan) error {
	doc := applyPlanJSON{
		APIVersion: applyPlanAPIVersion, Kind: applyPlanKind, Command: verb, Inventory: invPath,
		Provenance: prov, Cluster: cluster, Simulated: simulated, Actions: []planActionJSON{},
	}
	for _, act := range plan.Actions {
		j := planActionJSON{
			Machine: act.Machine.Name, Role: act.Machine.Role, Action: string(act.Kind),
			Reboots: act.Reboots, Reason: act.Reason, Evidence: act.Evidence, Warnings: act.Warnings, Held: act.HeldBy,
		}
		if act.Kind == reconcile.KindApply || act.Kind == reconcile.KindJoin || act.HeldBy != "" {
			j.Mode = string(act.Mode)
			j.Changes, j.SecretsChanged, j.Diff = act.Diff.Changes, act.Diff.ChangedSecrets, act.Diff.Text
		}
		if u := act.Upgrade; u != nil {
			j.Upgrade = &planUpgradeJSON{From: u.From, To: u.To, Image: u.Image, Final: u.Final, Stage: u.Stage, Drops: u.Drops}
		}
		doc.Actions = append(doc.Actions, j)
	}
	pending, skipped := plan.Pending(), plan.Skipped()
	doc.Summary = planSummaryJSON{Pending: len(pending), Skipped: len(skipped), Held: len(plan.Held()), Machines: len(plan.Actions), ExitCode: exitOK}
	if err := plan.Refusal(); err != nil {
		doc.Refused = err.Error()
	}
	var ee *exitError
	switch err := planExit(pending, skipped); {
	case doc.Refused != "":
		doc.Summary.ExitCode = exitTrouble
	case errors.As(err, &ee):
		doc.Summary.ExitCode = ee.code
	case err != nil:
		doc.Summary.ExitCode = exitTrouble
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// addPlanOutputFlag adds -o/--output to apply and upgrade: text (the
// default) or json, which prints the plan as JSON and goes with --dry-run.
func addPlanOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "text", "plan format: text, or json (with --dry-run: the plan as one JSON document, docs/report.md)")
}
