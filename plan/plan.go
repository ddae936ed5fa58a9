// Package plan owns the one shape of what devata would do: a Plan of Steps,
// each with its kind, machine, status, reason, evidence and the talosctl
// commands that do the same by hand; the filter every planner asks
// (Pending, Blocked, Where); the three writers of `devata plan` (text,
// markdown, JSON); and StepLine, the "==> " line a running step starts
// with. It decides nothing and speaks to no machine: bootstrap, reconcile
// and membership fill it in.
package plan

import (
	"devata.dev/devata/drift"
	"devata.dev/devata/provenance"
)

// Kind names what a step does: "configure", "apply", "bootstrap-etcd",
// "cordon", "kubernetes-image-pull"… Each planner names its own kinds.
type Kind string

// Status is where a planned step stands now.
type Status string

// Step statuses.
const (
	// StatusPending: the step would change something now.
	StatusPending Status = "pending"
	// StatusDone: what the step would achieve is already observed.
	StatusDone Status = "done"
	// StatusBlocked: devata refuses or cannot decide; the reason says why and what to do.
	StatusBlocked Status = "blocked"
	// StatusCheck: a read-only verification (the drift report).
	StatusCheck Status = "check"
)

// Evidence is one observation behind a step: the rung of the evidence
// ladder it comes from and what was seen.
type Evidence struct {
	Rung     drift.Rung `json:"rung"`
	Observed string     `json:"observed"`
}

// Step is one step of a plan, for the whole cluster or one machine. Its
// JSON names are the plan document's (docs/report.md): the kind is "step".
type Step struct {
	Kind    Kind   `json:"step"`
	Machine string `json:"machine,omitempty"`
	// Role is the machine's, controlplane or worker, on the steps of
	// apply, upgrade and reconcile.
	Role   string `json:"role,omitempty"`
	Status Status `json:"status"`
	// By is the command that takes the step: bootstrap, apply, upgrade, remove.
	By       string     `json:"by"`
	Summary  string     `json:"summary"`
	Reason   string     `json:"reason"`
	Evidence []Evidence `json:"evidence,omitempty"`
	// Talosctl are the commands an operator would run by hand for this step,
	// with inventory addresses (never dial overrides).
	Talosctl []string `json:"talosctl,omitempty"`
	// Reboots is set when the step takes a running machine away.
	Reboots bool `json:"reboots,omitempty"`
	// Drain says what happens to the machine's Node before a rebooting
	// change devata apply rolls out (as apply --dry-run says it).
	Drain string `json:"drain,omitempty"`
	// Changes is an apply's config diff by YAML path, redacted
	// (talosapi.ConfigDiff.Changes): what the apply would change.
	Changes []string `json:"changes,omitempty"`

	// The rest is what apply, upgrade and reconcile plan for one machine
	// (reconcile Plan.Steps) and `devata plan`'s steps leave empty.

	// Mode is the apply mode Talos resolved in the dry run (no-reboot,
	// reboot, staged, try).
	Mode string `json:"mode,omitempty"`
	// SecretsChanged are the paths of the secrets the change moves, never
	// their values.
	SecretsChanged []string `json:"secretsChanged,omitempty"`
	// Diff is the unified diff of the applied config against the desired
	// one, both redacted.
	Diff string `json:"diff,omitempty"`
	// Upgrade is a Talos upgrade's versions and installer.
	Upgrade *Upgrade `json:"upgrade,omitempty"`
	// Notes are facts about the change the text plan prints under it
	// (the config contract, readiness before it, the Kubernetes phases,
	// the upgrade's hop and RPC).
	Notes    []string `json:"notes,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Held says why the inventory holds the step back: "hold"
	// (machines[].hold) or "window" (outside its maintenance windows).
	Held string `json:"held,omitempty"`
}

// Upgrade is a Talos upgrade step: the version a machine runs, the one of
// this hop and the installer.
type Upgrade struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Image string `json:"image"`
	// Final is the version the run ends on when this is a hop of a longer way.
	Final string `json:"final,omitempty"`
	// Stage: a staged upgrade (--stage).
	Stage bool `json:"stage,omitempty"`
	// Drops are the extensions the machine runs that the installer lacks
	// (--drop-extensions).
	Drops []string `json:"drops,omitempty"`
}

// Title is the step's kind and, for one machine's step, the machine.
func (s Step) Title() string {
	if s.Machine != "" {
		return string(s.Kind) + " " + s.Machine
	}
	return string(s.Kind)
}

// Where returns the elements of xs that keep says to keep, in order: the
// one filter every planner's Pending, Blocked and Skipped is made of.
func Where[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// WithStatus returns the steps of steps that have status s.
func WithStatus(steps []Step, s Status) []Step {
	return Where(steps, func(st Step) bool { return st.Status == s })
}

// Plan is the ordered list of what bootstrap and apply would do now, with
// what the steps were decided from: the document `devata plan` writes.
type Plan struct {
	Cluster   string `json:"cluster"`
	Inventory string `json:"inventory"`
	// Provenance is the inventory's sha256 and, in Git, its commit (set by
	// the caller; zero says nothing).
	Provenance provenance.Info `json:"provenance,omitzero"`
	// Contract is the Talos config contract the configs are rendered for,
	// and why.
	Contract Contract `json:"contract"`
	// Notes are facts about the plan itself (a throwaway bundle, a derived talosconfig).
	Notes []string `json:"notes,omitempty"`
	Steps []Step   `json:"actions"`
	// Orphans are etcd members and Nodes no machine of the inventory has
	// (set by the caller once the cluster answers). Neither bootstrap nor
	// apply touches them; devata remove takes each out.
	Orphans []Orphan `json:"orphans,omitempty"`
	// Kubernetes is the Kubernetes version change devata apply would make
	// (set by the caller when configured machines' configs move a
	// component's version).
	Kubernetes *KubernetesChange `json:"kubernetes,omitempty"`
	// RecoverFrom is the snapshot --recover-from names by URL, as its
	// sidecar describes it (set by the caller).
	RecoverFrom *RecoverSource `json:"recoverFrom,omitempty"`
	// Patches is each machine's patch order (set by the caller when the
	// inventory has groups, which put patches between the role's and the
	// machine's): machines with the same order share an entry.
	Patches []MachinePatches `json:"patches,omitempty"`
	// RolloutOrders are the groups' rollout orders (RolloutOrders; set by
	// the caller).
	RolloutOrders []RolloutOrder `json:"rolloutOrders,omitempty"`
	// NodeKeys are the Nodes devata apply would write through the
	// Kubernetes API, for the inventory's viaKubernetes labels and taints;
	// NodeKeysProblem says why they could not be planned (set by the caller).
	NodeKeys        []NodeKeys `json:"nodeKeys,omitempty"`
	NodeKeysProblem string     `json:"nodeKeysProblem,omitempty"`
}

// Pending returns the steps that would change something.
func (p *Plan) Pending() []Step { return WithStatus(p.Steps, StatusPending) }

// Blocked returns the steps devata refuses or cannot decide.
func (p *Plan) Blocked() []Step { return WithStatus(p.Steps, StatusBlocked) }
