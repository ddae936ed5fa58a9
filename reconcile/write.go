package reconcile

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"devata.dev/devata/talosapi"
)

// shownNames is how many machine names a line of people's output lists
// before it counts the rest.
const shownNames = 10

// inSyncListedUpTo is the number of machines a plan lists "in sync" one by
// one; past it, the machines in sync are counted on one line.
const inSyncListedUpTo = 50

// Write prints the plan for people: per machine what it would do, and under
// each change whether the machine is already not ready (Action.NotReady),
// its redacted changes by YAML path, its redacted diff and Talos' warnings. Changes that are the same (mode,
// reboot, diff, warnings, readiness) are printed once with the machines
// that share them, and so are skips with the same reason: a fleet where a
// thousand workers drifted the same way reads as one change, not a
// thousand (issue 17). Past 50 machines, those in sync are counted.
func (p *Plan) Write(w io.Writer) {
	fmt.Fprintln(w, "plan:")
	var groups [][]Action
	inSync := 0
	for _, act := range p.Actions {
		if act.Kind == KindNone {
			inSync++
		}
		i := slices.IndexFunc(groups, func(g []Action) bool { return act.Kind != KindNone && sameAction(g[0], act) })
		if i < 0 {
			groups = append(groups, []Action{act})
			continue
		}
		groups[i] = append(groups[i], act)
	}
	countInSync := len(p.Actions) > inSyncListedUpTo
	for _, g := range groups {
		act := g[0]
		who := act.Machine.Name
		if len(g) > 1 {
			who = machineList(g) + fmt.Sprintf(" (%d machines)", len(g))
		}
		p.writeGroup(w, act, who, countInSync)
	}
	if countInSync && inSync > 0 {
		fmt.Fprintf(w, "  %d of %d machines in sync\n", inSync, len(p.Actions))
	}
	writeKubernetes(w, p.Kubernetes)
}

// writeGroup writes one action for who: a machine, or the machines that
// share it.
func (p *Plan) writeGroup(w io.Writer, act Action, who string, countInSync bool) {
	switch act.Kind {
	case KindApply:
		p.writeApply(w, act, who)
	case KindUpgrade:
		p.writeUpgrade(w, act, who)
	case KindJoin:
		fmt.Fprintf(w, "  %-20s join (REBOOTS): %s\n", who, act.Reason)
		for _, warn := range act.Warnings {
			fmt.Fprintf(w, "      warning: %s\n", warn)
		}
	case KindNone:
		if !countInSync {
			fmt.Fprintf(w, "  %-20s in sync\n", who)
		}
	case KindSkip:
		if act.HeldBy != "" {
			fmt.Fprintf(w, "  %-20s held: %s\n", who, act.Reason)
			break
		}
		fmt.Fprintf(w, "  %-20s skipped: %s\n", who, act.Reason)
	default:
		fmt.Fprintf(w, "  %-20s skipped: %s\n", who, act.Reason)
	}
}

// writeApply writes a config change: mode, reboot, summary, the contract,
// readiness, the Kubernetes phases, the changes by path, the diff, Talos'
// warnings and the drain.
func (p *Plan) writeApply(w io.Writer, act Action, who string) {
	reboot := "no reboot"
	if act.Reboots {
		reboot = "REBOOTS"
	}
	fmt.Fprintf(w, "  %-20s apply %s (%s): %s\n", who, act.Mode, reboot, act.Diff.Summary())
	if act.Contract != "" {
		fmt.Fprintf(w, "      %s\n", act.Contract)
	}
	if act.NotReady != "" {
		fmt.Fprintf(w, "      %s\n", act.NotReady)
	}
	if k := act.Kubernetes; k != nil {
		fmt.Fprintf(w, "      Kubernetes %s, one apply per component: %s\n", k.From, k.moves())
	}
	if len(act.Diff.Changes) > 0 {
		fmt.Fprintln(w, "      changes:")
		for _, c := range act.Diff.Changes {
			fmt.Fprintf(w, "        %s\n", c)
		}
	}
	for _, line := range strings.Split(strings.TrimRight(act.Diff.Text, "\n"), "\n") {
		if line != "" {
			fmt.Fprintf(w, "      %s\n", line)
		}
	}
	for _, warn := range act.Warnings {
		fmt.Fprintf(w, "      warning: %s\n", warn)
	}
	p.writeDrain(w, act)
}

// writeUpgrade writes a Talos upgrade or reinstall: versions and image,
// the hop, the RPC, readiness, warnings and the drain.
func (p *Plan) writeUpgrade(w io.Writer, act Action, who string) {
	u := act.Upgrade
	if u.From == u.To {
		fmt.Fprintf(w, "  %-20s reinstall Talos %s (REBOOTS): %s\n", who, u.To, u.Image)
		fmt.Fprintf(w, "      %s\n", act.Reason)
	} else {
		fmt.Fprintf(w, "  %-20s upgrade Talos %s → %s (REBOOTS): %s\n", who, u.From, u.To, u.Image)
	}
	if u.Final != "" {
		fmt.Fprintf(w, "      one minor release at a time: this hop to %s, then on to %s (cluster.installImage)\n", u.To, u.Final)
	}
	if via := talosapi.UpgradeVia(u.From); via == talosapi.UpgradeViaLifecycle && !u.Stage {
		fmt.Fprintf(w, "      through %s: the installer is pulled and run while it runs, then it reboots\n", via)
	}
	if act.NotReady != "" {
		fmt.Fprintf(w, "      %s\n", act.NotReady)
	}
	for _, warn := range act.Warnings {
		fmt.Fprintf(w, "      warning: %s\n", warn)
	}
	p.writeDrain(w, act)
}

// writeDrain says under a change that reboots its machine what happens
// to its Node first: Talos drains on no such reboot (an upgrade through
// LifecycleService, a staged upgrade, a rebooting apply), so devata does
// when asked (Planner.Drain). The legacy MachineService.Upgrade would
// drain it itself; devata drains before the call, so Talos finds it
// drained.
func (p *Plan) writeDrain(w io.Writer, act Action) {
	reboots := act.Reboots || act.Kubernetes != nil && slices.ContainsFunc(act.Kubernetes.Phases, func(ph KubePhase) bool { return ph.Reboots })
	switch {
	case !reboots:
	case !p.drain:
		fmt.Fprintln(w, "      no drain (--drain=false): its pods go down with it")
	case p.noKube:
		fmt.Fprintln(w, "      not drained: devata has no kubeconfig, so its Node is neither cordoned nor drained before the reboot (pass --kubeconfig, or --drain=false to say so)")
	default:
		fmt.Fprintln(w, "      drain first: cordon its Node and evict its pods through the Eviction API (PodDisruptionBudgets hold; DaemonSet and mirror pods stay; as kubectl drain NODE --ignore-daemonsets --delete-emptydir-data), uncordon it once it is back and ready")
	}
}

// sameAction reports whether two actions say the same thing but for the
// machine: the same change, or the same reason to skip.
func sameAction(a, b Action) bool {
	return a.Kind == b.Kind && a.Mode == b.Mode && a.Reboots == b.Reboots && a.Reason == b.Reason && a.Contract == b.Contract &&
		a.Diff.Text == b.Diff.Text && a.NotReady == b.NotReady && slices.Equal(a.Warnings, b.Warnings) &&
		(a.Upgrade == nil) == (b.Upgrade == nil) && (a.Upgrade == nil || a.Upgrade.From == b.Upgrade.From && a.Upgrade.To == b.Upgrade.To && a.Upgrade.Image == b.Upgrade.Image && a.Upgrade.Final == b.Upgrade.Final && a.Upgrade.Stage == b.Upgrade.Stage && a.Upgrade.Schematic == b.Upgrade.Schematic && slices.Equal(a.Upgrade.Drops, b.Upgrade.Drops)) &&
		(a.Kubernetes == nil) == (b.Kubernetes == nil) && (a.Kubernetes == nil || a.Kubernetes.From == b.Kubernetes.From && a.Kubernetes.moves() == b.Kubernetes.moves())
}

func machineList(as []Action) string {
	names := make([]string, 0, len(as))
	for _, a := range as {
		names = append(names, a.Machine.Name)
	}
	return shortList(names)
}

// shortList joins names, counting those past the first few.
func shortList(names []string) string {
	if len(names) <= shownNames {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:shownNames], ", ") + fmt.Sprintf(" and %d more", len(names)-shownNames)
}

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
