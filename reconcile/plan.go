// Package reconcile owns moving actual toward desired: the planner that
// decides the smallest set of actions from a fresh observation, the rollout
// policy (which asks package gate before and after each control plane), and
// the level-triggered loop with its queue, audit log, metrics and leader
// election. It does not speak the Talos API itself (machines does), decide
// etcd health (gate) or render reports (drift).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/talos"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// Kind is what the planner decided for one machine.
type Kind string

// Action kinds.
const (
	// KindApply sends the desired config.
	KindApply Kind = "apply"
	// KindUpgrade boots the machine into the inventory's Talos version.
	KindUpgrade Kind = "upgrade"
	// KindJoin configures a machine in maintenance mode (a machine added to
	// the inventory, or one whose disk was lost) so that it joins the
	// running cluster: etcd on a control plane, its Node on every machine.
	KindJoin Kind = "join"
	// KindNone: the machine already runs the desired config.
	KindNone Kind = "none"
	// KindSkip: nothing can be done from here (unreachable, maintenance mode, unreadable).
	KindSkip Kind = "skip"
)

// Action is one machine's planned step with the evidence behind it, and
// what its rollout needs (the desired config, the Kubernetes phases).
// Plan.Steps gives it as a plan.Step, the one shape every writer of a plan
// takes (action.go): nothing writes an Action itself.
type Action struct {
	Machine *inventory.Machine
	Kind    Kind
	// Mode is the mode Talos resolved in the dry run (auto becomes no-reboot or reboot).
	Mode    talosapi.Mode
	Reboots bool
	Reason  string
	// Diff is redacted; secrets appear only as changed paths.
	Diff talosapi.ConfigDiff
	// Config is the desired config the plan compared and a rollout
	// applies: for the Talos the machine runs (nil: the inventory's);
	// Contract says so when that is an older release than the inventory's.
	Config   []byte
	Contract string
	// Upgrade is set on a KindUpgrade action.
	Upgrade *UpgradeStep
	// Kubernetes is set on a KindApply action that moves Kubernetes
	// versions: it is applied in phases, one component at a time.
	Kubernetes *KubeStep
	Evidence   string
	Warnings   []string
	// Held marks a skip made on purpose: the machine is left alone until
	// what it waits for is over (a pending try's rollback, a staged config's
	// reboot), not retried as a failure.
	Held bool
	// NotReady says, on a change, that the machine was observed not running
	// or not ready before it ("already not ready before the change: stage
	// running, unmet: …"), also in Evidence: the rollout's wait after the
	// change needs it running and ready, so people see it before that wait.
	// Empty when it was running and ready, or ready but for its Node (which
	// that wait does not need).
	NotReady string
	// Foreign marks a skip because the machine answering is not the one
	// devata would write to (talosapi.Survey.Foreign); ForeignBundle when
	// it runs another secrets bundle's config, which refuses the whole plan
	// (Plan.Refusal).
	Foreign, ForeignBundle bool
	// Unreachable marks a skip because the machine did not answer when
	// the plan was made: a control plane so skipped holds the etcd gates
	// of the rollout (gate.Etcd.AlreadyDown), which then fail at once.
	Unreachable bool
	// UpgradeNext marks a config apply to a machine that also needs an
	// upgrade, planned once the config is applied (Plan.UpgradesNext).
	UpgradeNext bool
	// HeldBy says why a Held skip is held when the inventory holds it:
	// HeldByHold (machines[].hold) or HeldByWindow (outside its
	// maintenance windows; Window says which opens next).
	HeldBy string
	Window inventory.WindowState

	seen *seen
}

// Plan is the ordered list of actions: control planes first (one at a time
// when rolled out), then workers.
type Plan struct {
	Actions []Action
	// Kubernetes is the Kubernetes version change the actions make, when
	// one does: what moves now, what waits, or why it is refused.
	Kubernetes *gate.KubeRollout

	// drain: the rollout drains before a rebooting change (Planner.Drain);
	// noKube: it has no kubeconfig to do it with; forceAPIs: the
	// deprecated APIs were not checked (Planner.ForceDeprecatedAPIs).
	drain, noKube, forceAPIs bool
	// inv is the inventory the plan was made from (its first control
	// plane is where the by-hand upgrade-k8s goes).
	inv *inventory.Inventory
}

// Hops says whether the plan upgrades a machine on a hop of a longer way:
// once it is done, a plan made again has the next hop.
func (p *Plan) Hops() bool {
	return slices.ContainsFunc(p.Actions, func(a Action) bool { return a.Kind == KindUpgrade && a.Upgrade.Final != "" })
}

// Pending returns the actions that change something: config applies, joins and upgrades.
func (p *Plan) Pending() []Action {
	return plan.Where(p.Actions, func(a Action) bool { return a.Kind == KindApply || a.Kind == KindUpgrade || a.Kind == KindJoin })
}

// UpgradesNext says whether an applied config leaves its machine an
// upgrade to plan: a plan made again once the rollout is done has it.
func (p *Plan) UpgradesNext() bool {
	return slices.ContainsFunc(p.Actions, func(a Action) bool { return a.Kind == KindApply && a.UpgradeNext })
}

// ErrForeignBundle is wrapped by Plan.Refusal.
var ErrForeignBundle = errors.New("the machines run another secrets bundle's configs")

// Refusal is why nothing of the plan may be written to any machine: a
// machine runs a config made from another secrets bundle than the one
// devata loaded, so the bundle is not this cluster's (or the cluster is
// not the inventory's), and applying would replace CAs; nil otherwise.
func (p *Plan) Refusal() error {
	var names []string
	first := ""
	for _, a := range p.Actions {
		if a.ForeignBundle {
			names = append(names, a.Machine.Name)
			if first == "" {
				first = a.Reason
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%w: nothing was written to any machine: %s: %s", ErrForeignBundle, strings.Join(names, ", "), strings.TrimPrefix(first, "refused: "))
}

// Skipped returns the machines that could not be planned, and those left
// alone for what they wait for (Action.Held); not those the inventory
// holds (Plan.Held), which were planned and are left on purpose.
func (p *Plan) Skipped() []Action {
	return slices.DeleteFunc(p.ofKind(KindSkip), func(a Action) bool { return a.HeldBy != "" })
}

func (p *Plan) ofKind(k Kind) []Action {
	return plan.Where(p.Actions, func(a Action) bool { return a.Kind == k })
}

// Reboots reports whether any pending action reboots its machine.
func (p *Plan) Reboots() bool {
	return slices.ContainsFunc(p.Pending(), func(a Action) bool { return a.Reboots })
}

// Planner decides, from what the machines report now, which ones need their
// desired config and in which mode. It dry-runs only machines whose applied
// config differs, so a fleet in sync sees no ApplyConfiguration call at all.
type Planner struct {
	Inventory *inventory.Inventory
	// Desired holds each machine's config for cluster.talosVersion;
	// DesiredFor, when set, gives it for the Talos each machine runs (an
	// older release's contract during an upgrade: bootstrap Desired.For).
	Desired     map[string][]byte
	DesiredFor  talosapi.DesiredFunc
	Dialer      *talosapi.Dialer
	Mode        talosapi.Mode
	Concurrency int
	Timeout     time.Duration
	// Upgrades, when set, also plans Talos OS upgrades (nil: none).
	Upgrades *Upgrades
	// Kube reads the Nodes: the kubelet versions for the Kubernetes version
	// rules, and a moved kubelet's confirmation. nil holds kubelet moves.
	Kube kubernetes.Interface
	// ForceDeprecatedAPIs lets a Kubernetes minor upgrade go ahead while
	// clients still request APIs the new version removes (read from the
	// API server's apiserver_requested_deprecated_apis: kubedeprecated.go);
	// without it such an upgrade is refused before anything moves.
	ForceDeprecatedAPIs bool
	// Joins plans the configuration of machines in maintenance mode once
	// etcd runs (KindJoin); without it they are skipped. It sends the
	// machine config, secrets included, over the maintenance connection,
	// which authenticates no one (talosctl apply-config --insecure).
	Joins bool
	// Drain says, in the plan, that the rollout drains each Node before a
	// change that reboots its machine (Rollout.Drain); without Kube, that
	// it cannot.
	Drain bool
	// IgnoreHold names held machines (machines[].hold) this plan may
	// change anyway (apply --machines NAME --ignore-hold); every other
	// held machine is observed and reported, never changed.
	IgnoreHold map[string]bool
	// Windows limits disruptive changes (a change that reboots its
	// machine, an upgrade) to the inventory's maintenance windows, as
	// reconcile does; apply and upgrade at the console are not limited.
	Windows bool
	// Now is the clock the windows are read with (nil: time.Now).
	Now func() time.Time
}

// Plan observes the given machines (all when nil) and returns the plan.
func (p *Planner) Plan(ctx context.Context, only []*inventory.Machine) (*Plan, error) {
	ms := only
	if ms == nil {
		for i := range p.Inventory.Machines {
			ms = append(ms, &p.Inventory.Machines[i])
		}
	}
	actions := make([]Action, len(ms))
	index := make(map[*inventory.Machine]int, len(ms))
	for i, m := range ms {
		index[m] = i
	}
	var mu sync.Mutex
	_ = talosapi.ForEach(ctx, ms, p.Concurrency, p.Timeout, func(ctx context.Context, m *inventory.Machine) error {
		a := p.planOne(ctx, m)
		mu.Lock()
		actions[index[m]] = a
		mu.Unlock()
		return nil
	})
	for i := range actions {
		if actions[i].Machine == nil { // never started: cancelled
			actions[i] = Action{Machine: ms[i], Kind: KindSkip, Reason: "not observed: " + context.Cause(ctx).Error()}
		}
	}
	slices.SortStableFunc(actions, func(a, b Action) int {
		if a.Machine.IsControlPlane() != b.Machine.IsControlPlane() {
			if a.Machine.IsControlPlane() {
				return -1
			}
			return 1
		}
		return 0
	})
	out := &Plan{Actions: actions, drain: p.Drain, noKube: p.Kube == nil, forceAPIs: p.ForceDeprecatedAPIs, inv: p.Inventory}
	if ctx.Err() == nil {
		others := sync.OnceValue(func() []*talosapi.Observation { return p.observeOthers(ctx, actions) })
		p.planJoins(actions, others)
		out.Kubernetes = p.planKubernetes(ctx, actions, others)
	}
	for i := range actions {
		actions[i].seen = nil
	}
	return out, ctx.Err()
}

func (p *Planner) planOne(ctx context.Context, m *inventory.Machine) Action {
	desired := p.DesiredFor
	if desired == nil {
		desired = talosapi.HeldConfigs(p.Desired)
	}
	var reads []talosapi.Read
	if p.Upgrades != nil {
		reads = append(reads, talosapi.ReadBootImage) // an upgrade keeps or changes its extensions
	}
	// a held machine is not even dry-run: it is observed, never written to
	held := m.ActiveHold() != nil && !p.IgnoreHold[m.Name]
	s := talosapi.SurveyMachine(ctx, p.Dialer, p.Inventory, m, desired, p.Mode, (p.Upgrades == nil || !p.Upgrades.Only) && !held, reads...)
	a := p.restrain(m, p.decide(m, s))
	a.Config = s.Config
	if s.Obs != nil && !s.Obs.Maintenance { // a join sends the inventory's config (join.go)
		a.Contract = contractNote(s.Obs.Version, p.Inventory.Cluster.TalosVersion)
	}
	see(&a, s.Obs)
	return a
}

// config is the desired config of a's machine: the one its plan compared
// (for the Talos it runs), else the inventory's.
func (p *Planner) config(a Action) []byte {
	if a.Config != nil {
		return a.Config
	}
	return p.Desired[a.Machine.Name]
}

// contractNote says, for a machine running an older Talos release than the
// inventory's, that its desired config is written for the release it runs
// (bootstrap Desired.For); "" otherwise.
func contractNote(running, target string) string {
	rm, ok := talos.Minor(running)
	tm, tok := talos.Minor(target)
	if !ok || !tok || rm >= tm || rm < talos.OldestMinor {
		return ""
	}
	return fmt.Sprintf("its config is written for Talos 1.%d, the release it runs, until it runs %s", rm, target)
}

// decide is a machine's action from its survey.
func (p *Planner) decide(m *inventory.Machine, s *talosapi.Survey) Action {
	only := p.Upgrades != nil && p.Upgrades.Only
	o := s.Obs
	switch {
	case o.Maintenance && p.Joins && !only:
		return Action{Machine: m, Kind: KindJoin, Mode: talosapi.ModeAuto, Reboots: true,
			Reason:   "in maintenance mode: not configured; its config goes over the maintenance connection (insecure, mode auto), it installs, reboots and joins the cluster",
			Evidence: "Talos API answers only insecurely (maintenance mode); mTLS is refused"}
	case o.Maintenance:
		return Action{Machine: m, Kind: KindSkip, Reason: "in maintenance mode: not configured yet; devata apply joins it to a running cluster (reconcile does with --join), devata bootstrap builds a new one"}
	case o.Err != nil:
		return Action{Machine: m, Kind: KindSkip, Reason: o.Err.Error(), Unreachable: true}
	case o.ConfigErr != nil:
		return Action{Machine: m, Kind: KindSkip, Reason: o.ConfigErr.Error()}
	case s.CompareErr != nil:
		return Action{Machine: m, Kind: KindSkip, Reason: "compare configs: " + s.CompareErr.Error()}
	case s.Foreign.Any():
		return Action{Machine: m, Kind: KindSkip, Foreign: true, ForeignBundle: len(s.Foreign.Bundle) > 0, Reason: s.Foreign.Reason(m.Name, p.Dialer.Endpoint(m)),
			Evidence: fmt.Sprintf("MachineConfig v1alpha1 observed (Talos %s)", o.Version)}
	}
	d := s.Diff
	evidence := fmt.Sprintf("MachineConfig v1alpha1 observed (Talos %s, stage %s)", o.Version, o.Stage)
	switch {
	case only && s.Pending:
		return Action{Machine: m, Kind: KindSkip, Held: true, Evidence: evidence, Reason: "left alone: it has a pending config (a `--mode try` waiting for its rollback, or a config staged for the next reboot), which the upgrade's reboot would settle: wait for it, or reboot it, then upgrade"}
	case only:
		a := p.planUpgrade(m, o, evidence)
		if !d.Equal && a.Kind == KindUpgrade {
			a.Warnings = append(a.Warnings, "its applied config differs from the desired one ("+d.Summary()+"); the upgrade keeps the applied config: devata apply changes it")
		}
		return a
	case d.Equal && p.Upgrades != nil:
		return p.planUpgrade(m, o, evidence)
	case d.Equal:
		return Action{Machine: m, Kind: KindNone, Reason: "applied config is the desired one", Evidence: evidence}
	case s.Pending:
		// Not even a dry run (talosapi.Survey.Pending), which would make
		// someone's experiment permanent.
		return Action{Machine: m, Kind: KindSkip, Held: true, Diff: d, Evidence: evidence + "; MachineConfig persistent differs from v1alpha1",
			Reason: "left alone: its active config is not the one it would boot (a `--mode try` waiting for its rollback, or a config staged for the next reboot); " +
				"any apply, even a dry run, would cancel a pending try's rollback. Wait for the rollback, or make it permanent " +
				"(talosctl -n " + m.Address + " apply-config --mode no-reboot) or reboot the staged one, then devata converges it"}
	case s.DialErr != nil:
		return Action{Machine: m, Kind: KindSkip, Reason: s.DialErr.Error()}
	case s.DryErr != nil:
		return Action{Machine: m, Kind: KindSkip, Reason: "dry run refused: " + s.DryErr.Error(), Diff: d, Evidence: evidence}
	}
	out := s.Dry
	notReady := notReadyBefore(o)
	if notReady != "" {
		evidence += "; " + notReady
	}
	a := Action{
		Machine: m, Kind: KindApply, Mode: out.Mode, Reboots: out.Reboots(),
		Reason: "applied config differs: " + d.Summary(), Diff: d, Evidence: evidence, Warnings: out.Warnings,
		NotReady: notReady,
	}
	if p.Upgrades != nil && o.Version != p.Inventory.Cluster.TalosVersion {
		a.Warnings = append(a.Warnings, "it runs Talos "+o.Version+", the inventory says "+p.Inventory.Cluster.TalosVersion+": its config goes first, its upgrade is planned once the config is applied")
		a.UpgradeNext = true
	}
	return a
}

// notReadyBefore says what keeps a machine about to be changed from being
// running and ready now, as Rollout.waitConverged will judge it after the
// change; "" when nothing does or its MachineStatus could not be read.
func notReadyBefore(o *talosapi.Observation) string {
	switch {
	case o.StatusErr != nil || o.Stage == "":
		return ""
	case o.Stage == "running" && (o.Ready || o.NotReadyOnlyForNode()):
		return ""
	}
	msg := "already not ready before the change: stage " + o.Stage
	if len(o.Unmet) > 0 {
		msg += ", unmet: " + strings.Join(o.Unmet, "; ")
	}
	return msg
}
