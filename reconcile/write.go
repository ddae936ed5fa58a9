package reconcile

import (
	"fmt"
	"io"
	"strings"

	"devata.dev/devata/plan"
)

// Write prints the plan for people through the plan's one text writer
// (plan.WriteFolded): per machine what it would do, and under each change
// whether the machine is already not ready (Action.NotReady), its redacted
// changes by YAML path, its redacted diff and Talos' warnings. Changes that
// are the same (mode, reboot, diff, warnings, readiness) are printed once
// with the machines that share them, and so are skips with the same reason:
// a fleet where a thousand workers drifted the same way reads as one
// change, not a thousand (issue 17). Past 50 machines, those in sync are
// counted. Then the Kubernetes version change, when there is one, as
// devata plan writes it (plan.WriteKubernetes).
func (p *Plan) Write(w io.Writer) {
	_ = plan.WriteFolded(w, p.Steps(byApply))
	_ = plan.WriteKubernetes(w, p.KubernetesChange(p.inv))
}

// shortList joins names, counting those past the first few (plan.ShortList).
func shortList(names []string) string { return plan.ShortList(names) }

// Write prints what the rollout did for people: the machines converged, the
// one finished after an interrupt, and those failed or never started; the
// converged and not-started lists are cut to their first few names and a
// count (every failed one is named).
func (o *RolloutResult) Write(w io.Writer) {
	converged := "none"
	if len(o.Converged) > 0 {
		converged = shortList(o.Converged)
	}
	fmt.Fprintf(w, "converged: %s\n", converged)
	if o.InFlight != "" {
		fmt.Fprintf(w, "interrupted while changing %s: finished it before stopping; no other machine was touched\n", o.InFlight)
	}
	if len(o.Failed) > 0 {
		fmt.Fprintf(w, "failed: %s\n", strings.Join(o.Failed, ", "))
	}
	if len(o.Partial) > 0 {
		fmt.Fprintf(w, "changed part way (some Kubernetes components moved, the others wait): %s\n", shortList(o.Partial))
	}
	if len(o.Untouched) > 0 {
		fmt.Fprintf(w, "not started: %s\n", shortList(o.Untouched))
	}
}
