package reconcile

import (
	"fmt"
	"slices"
	"strings"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// Steps are the plan's actions as plan steps, in its order: what the text
// plan (Write), apply's JSON plan (plan.WriteRollout) and every other
// writer of a plan write. by is the command that takes them (apply,
// upgrade, reconcile). An Action keeps what the rollout needs besides
// (the config bytes, the Kubernetes phases); a step holds only what is
// shown, redacted as the diff is.
func (p *Plan) Steps(by string) []plan.Step {
	out := make([]plan.Step, len(p.Actions))
	for i, a := range p.Actions {
		out[i] = p.step(a, by)
	}
	return out
}

// step is one action as a plan step.
func (p *Plan) step(a Action, by string) plan.Step {
	s := plan.Step{Kind: plan.Kind(a.Kind), Machine: a.Machine.Name, Role: a.Machine.Role, By: by,
		Reason: a.Reason, Reboots: a.Reboots, Warnings: a.Warnings, Held: a.HeldBy}
	if a.Evidence != "" {
		s.Evidence = []plan.Evidence{{Rung: drift.RungReconciliation, Observed: a.Evidence}}
	}
	if a.Kind == KindApply || a.Kind == KindJoin || a.HeldBy != "" {
		s.Mode = string(a.Mode)
		s.Changes, s.SecretsChanged, s.Diff = a.Diff.Changes, a.Diff.ChangedSecrets, a.Diff.Text
	}
	if u := a.Upgrade; u != nil {
		s.Upgrade = &plan.Upgrade{From: u.From, To: u.To, Image: u.Image, Final: u.Final, Stage: u.Stage, Drops: u.Drops}
	}
	switch a.Kind {
	case KindApply:
		s.Status = plan.StatusPending
		applyStep(&s, a)
		s.Drain = p.drainNote(a)
	case KindUpgrade:
		s.Status = plan.StatusPending
		upgradeStep(&s, a)
		s.Drain = p.drainNote(a)
	case KindJoin:
		s.Status = plan.StatusPending
		s.Summary = "join (REBOOTS): " + a.Reason
		s.Talosctl = []string{fmt.Sprintf("talosctl apply-config --insecure --nodes %s --file %s --mode auto", a.Machine.Address, configFile(a))}
	case KindNone:
		s.Status, s.Summary = plan.StatusDone, "in sync"
	case KindSkip:
		s.Status, s.Summary = plan.StatusBlocked, "skipped: "+a.Reason
		if a.HeldBy != "" {
			s.Summary = "held: " + a.Reason
		}
	default:
		s.Status, s.Summary = plan.StatusBlocked, "skipped: "+a.Reason
	}
	if s.Drain != "" && p.drain && !p.noKube {
		s.Talosctl = slices.Concat(
			[]string{fmt.Sprintf("kubectl drain %s --ignore-daemonsets --delete-emptydir-data", a.Machine.Name)},
			s.Talosctl,
			[]string{fmt.Sprintf("kubectl uncordon %s   # once it is back and Ready", a.Machine.Name)})
	}
	return s
}

// configFile is where devata gen config --dir rendered/ writes a's
// machine's config; for a machine whose config follows an older release
// the step's notes say so (Action.Contract).
func configFile(a Action) string { return "rendered/" + a.Machine.Name + ".yaml" }

// applyStep fills in a config apply: mode, reboot and the diff's summary,
// the contract, readiness, the Kubernetes phases, and the command.
func applyStep(s *plan.Step, a Action) {
	reboot := "no reboot"
	if a.Reboots {
		reboot = "REBOOTS"
	}
	s.Summary = fmt.Sprintf("apply %s (%s): %s", a.Mode, reboot, a.Diff.Summary())
	for _, n := range []string{a.Contract, a.NotReady} {
		if n != "" {
			s.Notes = append(s.Notes, n)
		}
	}
	if k := a.Kubernetes; k != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("Kubernetes %s, one apply per component: %s", k.From, k.moves()))
	}
	s.Talosctl = []string{
		fmt.Sprintf("talosctl apply-config --nodes %s --file %s --mode %s --dry-run", a.Machine.Address, configFile(a), a.Mode),
		fmt.Sprintf("talosctl apply-config --nodes %s --file %s --mode %s", a.Machine.Address, configFile(a), a.Mode),
	}
}

// upgradeStep fills in a Talos upgrade or reinstall: versions and image,
// the hop, the RPC, readiness, and the command.
func upgradeStep(s *plan.Step, a Action) {
	u := a.Upgrade
	if u.From == u.To {
		s.Summary = fmt.Sprintf("reinstall Talos %s (REBOOTS): %s", u.To, u.Image)
		s.Notes = append(s.Notes, a.Reason)
	} else {
		s.Summary = fmt.Sprintf("upgrade Talos %s → %s (REBOOTS): %s", u.From, u.To, u.Image)
	}
	if u.Final != "" {
		s.Notes = append(s.Notes, fmt.Sprintf("one minor release at a time: this hop to %s, then on to %s (cluster.installImage)", u.To, u.Final))
	}
	if via := talosapi.UpgradeVia(u.From); via == talosapi.UpgradeViaLifecycle && !u.Stage {
		s.Notes = append(s.Notes, fmt.Sprintf("through %s: the installer is pulled and run while it runs, then it reboots", via))
	}
	if a.NotReady != "" {
		s.Notes = append(s.Notes, a.NotReady)
	}
	cmd := fmt.Sprintf("talosctl upgrade --nodes %s --image %s", a.Machine.Address, u.Image)
	if u.Stage {
		cmd += " --stage"
	}
	s.Talosctl = []string{cmd}
}

// drainNote says, for a change that reboots its machine, what happens to
// its Node first: Talos drains on no such reboot (an upgrade through
// LifecycleService, a staged upgrade, a rebooting apply), so devata does
// when asked (Planner.Drain). The legacy MachineService.Upgrade would
// drain it itself; devata drains before the call, so Talos finds it
// drained. "" for a change that reboots nothing.
func (p *Plan) drainNote(a Action) string {
	reboots := a.Reboots || a.Kubernetes != nil && slices.ContainsFunc(a.Kubernetes.Phases, func(ph KubePhase) bool { return ph.Reboots })
	switch {
	case !reboots:
		return ""
	case !p.drain:
		return "no drain (--drain=false): its pods go down with it"
	case p.noKube:
		return "not drained: devata has no kubeconfig, so its Node is neither cordoned nor drained before the reboot (pass --kubeconfig, or --drain=false to say so)"
	}
	return "drain first: cordon its Node and evict its pods through the Eviction API (PodDisruptionBudgets hold; DaemonSet and mirror pods stay; as kubectl drain NODE --ignore-daemonsets --delete-emptydir-data), uncordon it once it is back and ready"
}

// KubernetesChange is the plan's Kubernetes version change as a plan
// writes it: the steps before any component moves (KubernetesBefore),
// each component's move in talosctl upgrade-k8s' order or why it is
// held, what comes next, and the command that does it by hand against
// inv's first control plane; nil when the plan changes no Kubernetes
// version.
func (p *Plan) KubernetesChange(inv *inventory.Inventory) *plan.KubernetesChange {
	k := p.Kubernetes
	if k == nil {
		return nil
	}
	out := &plan.KubernetesChange{From: k.From, To: k.To, Refused: k.Refused, Before: p.KubernetesBefore(), Manifests: k.Manifests, Next: k.Next()}
	if k.Refused != "" {
		return out
	}
	for _, c := range talosapi.KubeOrder {
		switch {
		case k.Held[c] != "":
			out.Steps = append(out.Steps, plan.KubernetesStep{Component: c, Held: k.Held[c]})
		case len(k.Moves[c]) > 0:
			out.Steps = append(out.Steps, plan.KubernetesStep{Component: c, Machines: k.Moves[c]})
		}
	}
	if inv == nil {
		return out
	}
	if cps := inv.ControlPlanes(); len(cps) > 0 {
		out.Talosctl = []string{fmt.Sprintf("talosctl --nodes %s upgrade-k8s --to %s", cps[0].Address, strings.TrimPrefix(k.To, "v"))}
	}
	return out
}
