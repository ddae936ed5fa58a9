package plan

import "fmt"

// StepLine is the line a step starts with when it runs: "==> MACHINE:
// WHAT" for one machine's step, "==> WHAT" for one of the whole cluster or
// of a story (the demo). Every command that changes machines (bootstrap,
// apply, upgrade, join, reconcile, remove) and the demo print their steps
// with it, so that a log reads the same whichever command wrote it.
func StepLine(machine, what string) string {
	if machine == "" {
		return "==> " + what
	}
	return "==> " + machine + ": " + what
}

// Say prints StepLine(machine, what) through say, a printer taking a
// format (Rollout.Say, Remover.Say, the bootstrap sequence's); what is
// formatted from format and args first.
func Say(say func(format string, args ...any), machine, format string, args ...any) {
	say("%s", StepLine(machine, fmt.Sprintf(format, args...)))
}
