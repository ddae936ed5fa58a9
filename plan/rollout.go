package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"

	"devata.dev/devata/provenance"
)

// The plan of apply and upgrade as one JSON document (apply --dry-run -o
// json): docs/report.md, "Plans of apply and upgrade". v1alpha2 writes
// each machine's step in the shape of `devata plan`'s steps; v1alpha1 had
// an action of its own ("action" for "step", evidence a string).
const (
	RolloutAPIVersion = "devata.dev/v1alpha2"
	RolloutKind       = "ApplyPlan"
)

// Rollout is the plan devata apply and upgrade roll out: one step per
// machine, in the order the rollout takes them (reconcile Plan.Steps).
type Rollout struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Command    string          `json:"command"`
	Inventory  string          `json:"inventory"`
	Provenance provenance.Info `json:"provenance,omitzero"`
	Cluster    string          `json:"cluster"`
	Simulated  bool            `json:"simulated"`
	Steps      []Step          `json:"actions"`
	// Kubernetes is the Kubernetes version change the steps make, in the
	// shape of devata plan's (reconcile Plan.KubernetesChange).
	Kubernetes *KubernetesChange `json:"kubernetes,omitempty"`
	// Refused is why nothing of the plan may be written (reconcile
	// Plan.Refusal).
	Refused string `json:"refused,omitempty"`
	// NodeKeys are the Nodes apply would write through the Kubernetes API
	// after its rollout, for the inventory's viaKubernetes labels and
	// taints; NodeKeysProblem says why they could not be planned.
	NodeKeys        []NodeKeys     `json:"nodeKeys,omitempty"`
	NodeKeysProblem string         `json:"nodeKeysProblem,omitempty"`
	Summary         RolloutSummary `json:"summary"`
}

// RolloutSummary counts a Rollout's steps and says the dry run's exit code.
type RolloutSummary struct {
	// Pending are the steps that change something, Skipped the machines
	// that could not be planned, Held those the inventory holds back.
	Pending  int `json:"pending"`
	Skipped  int `json:"skipped"`
	Held     int `json:"held"`
	Machines int `json:"machines"`
	ExitCode int `json:"exitCode"`
}

// WriteRollout writes r as one JSON document, its apiVersion and kind set
// here; r.Steps is written as [] when empty.
func WriteRollout(w io.Writer, r Rollout) error {
	r.APIVersion, r.Kind = RolloutAPIVersion, RolloutKind
	if r.Steps == nil {
		r.Steps = []Step{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// shownNames is how many machine names a row of the folded plan lists
// before it counts the rest.
const shownNames = 10

// doneListedUpTo is the number of steps past which WriteFolded counts the
// done steps (machines in sync) instead of listing them.
const doneListedUpTo = 50

// WriteFolded writes the plan of apply, upgrade and reconcile for people:
// "plan:", then a row per step, its machine and summary, and under a
// pending step its notes, its changes by path, its diff, its warnings and
// its drain. Steps that say the same but for the machine (its role,
// evidence and commands aside) are written once with the machines that
// share them, so that a thousand workers drifted the same way read as one
// change (issue 17); done steps are never folded, and past 50 steps they
// are counted ("N of M machines in sync").
func WriteFolded(w io.Writer, steps []Step) error {
	var b strings.Builder
	b.WriteString("plan:\n")
	var groups [][]Step
	done := 0
	for _, s := range steps {
		if s.Status == StatusDone {
			done++
		}
		i := -1
		for j, g := range groups {
			if s.Status != StatusDone && sameButMachine(g[0], s) {
				i = j
				break
			}
		}
		if i < 0 {
			groups = append(groups, []Step{s})
			continue
		}
		groups[i] = append(groups[i], s)
	}
	countDone := len(steps) > doneListedUpTo
	for _, g := range groups {
		s := g[0]
		if s.Status == StatusDone && countDone {
			continue
		}
		who := s.Machine
		if len(g) > 1 {
			names := make([]string, len(g))
			for i, gs := range g {
				names[i] = gs.Machine
			}
			who = ShortList(names) + fmt.Sprintf(" (%d machines)", len(g))
		}
		writeFoldedStep(&b, who, s)
	}
	if countDone && done > 0 {
		fmt.Fprintf(&b, "  %d of %d machines in sync\n", done, len(steps))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFoldedStep is one row of the folded plan and, under a pending
// step, what it would do.
func writeFoldedStep(b *strings.Builder, who string, s Step) {
	fmt.Fprintf(b, "  %-20s %s\n", who, s.Summary)
	if s.Status != StatusPending {
		return
	}
	for _, n := range s.Notes {
		fmt.Fprintf(b, "      %s\n", n)
	}
	if len(s.Changes) > 0 {
		b.WriteString("      changes:\n")
		for _, c := range s.Changes {
			fmt.Fprintf(b, "        %s\n", c)
		}
	}
	for _, line := range strings.Split(strings.TrimRight(s.Diff, "\n"), "\n") {
		if line != "" {
			fmt.Fprintf(b, "      %s\n", line)
		}
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(b, "      warning: %s\n", warn)
	}
	if s.Drain != "" {
		fmt.Fprintf(b, "      %s\n", s.Drain)
	}
}

// sameButMachine reports whether two steps say the same thing but for the
// machine they are taken on: its name, role, evidence and the commands
// (which name its address) aside.
func sameButMachine(a, b Step) bool {
	a.Machine, a.Role, a.Evidence, a.Talosctl = "", "", nil, nil
	b.Machine, b.Role, b.Evidence, b.Talosctl = "", "", nil, nil
	return reflect.DeepEqual(a, b)
}

// ShortList joins names, counting those past the first ten.
func ShortList(names []string) string {
	if len(names) <= shownNames {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:shownNames], ", ") + fmt.Sprintf(" and %d more", len(names)-shownNames)
}
