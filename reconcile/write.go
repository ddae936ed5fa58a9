package reconcile

import (
	"fmt"
	"io"
	"strings"
)

// Write prints the plan for people: one line per machine, and under each
// change whether the machine is already not ready (Action.NotReady), its
// redacted diff and Talos' warnings.
func (p *Plan) Write(w io.Writer) {
	fmt.Fprintln(w, "plan:")
	for _, act := range p.Actions {
		switch act.Kind {
		case KindApply:
			reboot := "no reboot"
			if act.Reboots {
				reboot = "REBOOTS"
			}
			fmt.Fprintf(w, "  %-20s apply %s (%s): %s\n", act.Machine.Name, act.Mode, reboot, act.Diff.Summary())
			if act.NotReady != "" {
				fmt.Fprintf(w, "      %s\n", act.NotReady)
			}
			for _, line := range strings.Split(strings.TrimRight(act.Diff.Text, "\n"), "\n") {
				if line != "" {
					fmt.Fprintf(w, "      %s\n", line)
				}
			}
			for _, warn := range act.Warnings {
				fmt.Fprintf(w, "      warning: %s\n", warn)
			}
		case KindNone:
			fmt.Fprintf(w, "  %-20s in sync\n", act.Machine.Name)
		default:
			fmt.Fprintf(w, "  %-20s skipped: %s\n", act.Machine.Name, act.Reason)
		}
	}
}

// Write prints what the rollout did for people: the machines converged, the
// one finished after an interrupt, and those failed or never started.
func (o *Outcome) Write(w io.Writer) {
	converged := "none"
	if len(o.Converged) > 0 {
		converged = strings.Join(o.Converged, ", ")
	}
	fmt.Fprintf(w, "converged: %s\n", converged)
	if o.InFlight != "" {
		fmt.Fprintf(w, "interrupted while changing %s: finished it before stopping; no other machine was touched\n", o.InFlight)
	}
	if len(o.Failed) > 0 {
		fmt.Fprintf(w, "failed: %s\n", strings.Join(o.Failed, ", "))
	}
	if len(o.Untouched) > 0 {
		fmt.Fprintf(w, "not started: %s\n", strings.Join(o.Untouched, ", "))
	}
}
