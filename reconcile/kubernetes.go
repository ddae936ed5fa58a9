package reconcile

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// A Kubernetes version change is a config change like any other (a new
// cluster.kubernetesVersion renders new images), rolled out one component
// at a time in talosctl upgrade-k8s' order
// (pkg/cluster/kubernetes/talos_managed.go Upgrade) so that Kubernetes'
// version skew policy holds at every moment:
//
//  1. kube-apiserver on each control plane, one at a time under the etcd
//     gate; then kube-controller-manager on each, then kube-scheduler.
//     After each, the machine's static pod runs the new image, Ready
//     (upgradeStaticPodOnNode, checkPodStatus);
//  2. then the kubelets, control planes one at a time, then workers in
//     batches; after each, its Node reports the new kubelet version, Ready
//     (kubelet.go upgradeKubeletOnNode, checkNodeKubeletVersion).
//
// Each step is one live apply of the desired config with the components
// of later steps held at the images they run (talosapi.WithKubeImages,
// the fields talosctl upgrade-k8s patches), so an interrupted rollout
// resumes from what the machines run. gate.PlanKubernetes decides what
// may move now. devata's reconcile loop plans one machine at a time; it
// looks at the control planes it does not plan, so that there too no
// component moves before every API server runs the new version.

// KubePhase is one apply of a Kubernetes version change on one machine.
type KubePhase struct {
	// Component moves to Image in this phase; "" is a change of the rest
	// of the config with every component held.
	Component, Image string
	// Config is the desired config with the components of later phases,
	// and those held, at the images they run.
	Config  []byte
	Mode    talosapi.Mode
	Reboots bool
}

// KubeStep is a machine's part of a Kubernetes version change.
type KubeStep struct {
	// From is the lowest version the machine's components run; To is
	// cluster.kubernetesVersion.
	From, To string
	Phases   []KubePhase
	// Held says, by component, why it stays at the version it runs.
	Held map[string]string
}

// seen is what the planner saw of a machine that decisions over the whole
// fleet need (Kubernetes versions, joins).
type seen struct {
	running     *talosapi.KubeComponents
	talos       string
	maintenance bool
	// etcdRunning: a control plane whose etcd answered (etcdRuns).
	etcdRunning bool
	// active is the applied config, kept only while a component moves
	// (to tell other changes from the versions).
	active []byte
}

// see notes what a machine's observation says for decisions over the
// fleet; a machine in sync runs its desired config and is read from that
// later, only when a version changes somewhere.
func see(a *Action, o *talosapi.Observation) {
	s := &seen{talos: o.Version, maintenance: o.Maintenance, etcdRunning: etcdRuns(o)}
	a.seen = s
	if a.Kind == KindNone || o.Err != nil || o.ConfigErr != nil || o.Active == nil {
		return
	}
	if k, err := talosapi.KubeComponentsOf(o.Active); err == nil {
		s.running = &k
		if a.Kind == KindApply {
			s.active = o.Active
		}
	}
}

// observeOthers observes the control planes the plan does not cover: the
// Kubernetes rules need their components, a join that etcd runs.
func (p *Planner) observeOthers(ctx context.Context, actions []Action) []*talosapi.Observation {
	var rest []*inventory.Machine
	for _, m := range p.Inventory.ControlPlanes() {
		if !slices.ContainsFunc(actions, func(a Action) bool { return a.Machine.Name == m.Name }) {
			rest = append(rest, m)
		}
	}
	out := make([]*talosapi.Observation, len(rest))
	_ = talosapi.ForEach(ctx, rest, p.Concurrency, p.Timeout, func(ctx context.Context, m *inventory.Machine) error {
		out[slices.Index(rest, m)] = talosapi.Observe(ctx, p.Dialer, m)
		return nil
	})
	for i := range out {
		if out[i] == nil {
			out[i] = &talosapi.Observation{Machine: rest[i], Err: fmt.Errorf("not observed: %w", context.Cause(ctx))}
		}
	}
	return out
}

// kubeMachines are what each machine runs and would run, for
// gate.PlanKubernetes: the actions' (in their order, desired[i] for
// actions[i]), then the others', each with its Node's kubelet version;
// nodes is nil when the Nodes could not be listed.
func (p *Planner) kubeMachines(ctx context.Context, actions []Action, desired []talosapi.KubeComponents, others func() []*talosapi.Observation) ([]gate.KubeMachine, map[string]string) {
	var kms []gate.KubeMachine
	for i, a := range actions {
		km := gate.KubeMachine{Name: a.Machine.Name, ControlPlane: a.Machine.IsControlPlane(), Why: a.Reason}
		if s := a.seen; s != nil {
			km.Running, km.Talos, km.Maintenance = s.running, s.talos, s.maintenance
		}
		switch a.Kind {
		case KindApply:
			km.Changes, km.Desired = km.Running != nil, desired[i]
		case KindNone:
			if k, err := talosapi.KubeComponentsOf(p.config(a)); err == nil {
				km.Running = &k // it runs its desired config
			}
		}
		kms = append(kms, km)
	}
	for _, o := range others() {
		kms = append(kms, kubeMachineOf(o))
	}
	nodes := p.nodeKubelets(ctx)
	for i := range kms {
		kms[i].NodeKubelet = nodes[kms[i].Name]
	}
	return kms, nodes
}

// planKubernetes finds the actions that move Kubernetes versions and turns
// each into its phases, or holds or refuses them, from what every machine
// runs; nil when no version moves.
func (p *Planner) planKubernetes(ctx context.Context, actions []Action, others func() []*talosapi.Observation) *gate.KubeRollout {
	to := p.Inventory.Cluster.KubernetesVersion
	desired := make([]talosapi.KubeComponents, len(actions))
	moves := false
	for i, a := range actions {
		if a.Kind != KindApply || a.seen == nil || a.seen.running == nil {
			continue
		}
		k, err := talosapi.KubeComponentsOf(p.config(a))
		if err != nil {
			continue // the dry run validated it; nothing to move
		}
		desired[i] = k
		km := gate.KubeMachine{Running: a.seen.running, Changes: true, Desired: k}
		moves = moves || len(km.Moves()) > 0
	}
	if !moves {
		return nil
	}

	kms, nodes := p.kubeMachines(ctx, actions, desired, others)
	noNodes := ""
	switch {
	case p.Kube == nil:
		noNodes = "devata has no kubeconfig: pass --kubeconfig (or set KUBECONFIG)"
	case nodes == nil:
		noNodes = "the Nodes could not be listed: check the kubeconfig and devata's RBAC (list nodes)"
	}
	roll := gate.PlanKubernetes(to, kms, noNodes)
	roll.DeprecatedUnchecked = p.ForceDeprecatedAPIs
	if roll.Refused == "" && !p.ForceDeprecatedAPIs && minorMoves(roll.From, roll.To) {
		dctx, cancel := context.WithTimeout(ctx, p.Timeout)
		roll.Refused = deprecatedRefusal(dctx, p.Kube, roll.To)
		cancel()
	}
	if roll.Refused == "" {
		roll.Manifests = p.manifestsDryRun(ctx)
	}

	for i := range actions {
		a := &actions[i]
		km := kms[i]
		mv := km.Moves()
		if len(mv) == 0 {
			continue
		}
		if roll.Refused != "" {
			a.Kind, a.Reason = KindSkip, "Kubernetes version change refused: "+roll.Refused
			continue
		}
		if p.Mode == talosapi.ModeStaged || p.Mode == talosapi.ModeTry {
			a.Kind, a.Reason = KindSkip, fmt.Sprintf("a Kubernetes version change is applied live, one component at a time, and waited for; --mode %s cannot do that: use --mode auto", p.Mode)
			continue
		}
		step, err := p.kubeStep(a, km, roll, mv)
		switch {
		case err != nil:
			a.Kind, a.Reason = KindSkip, "Kubernetes version change: "+err.Error()
		case step == nil:
			a.Kind, a.Held, a.Diff = KindSkip, true, talosapi.ConfigDiff{}
			a.Reason = "left alone: " + heldReason(km, roll, mv)
		default:
			a.Kubernetes = step
			for _, c := range mv {
				if why := roll.Held[c]; why != "" {
					a.Warnings = append(a.Warnings, fmt.Sprintf("its %s stays at %s: %s", c, talosapi.ImageTag(km.Running.Image(c)), why))
				}
			}
		}
		a.seen.active = nil
	}
	return roll
}

// minorMoves reports whether a version change crosses a minor release,
// the only kind that removes APIs.
func minorMoves(from, to string) bool {
	f, err1 := semver.ParseTolerant(from)
	t, err2 := semver.ParseTolerant(to)
	return err1 == nil && err2 == nil && (t.Major != f.Major || t.Minor > f.Minor)
}

// heldReason says why none of a machine's moves goes now.
func heldReason(km gate.KubeMachine, roll *gate.KubeRollout, mv []string) string {
	var whys []string
	for _, c := range mv {
		w := fmt.Sprintf("its %s would move to %s; %s", c, roll.To, roll.Held[c])
		if !slices.Contains(whys, w) {
			whys = append(whys, w)
		}
	}
	return strings.Join(whys, "; ")
}

// kubeStep builds a machine's phases: one for each component that moves
// now, in order, each holding the components of the later phases (and the
// held ones) at the images they run; nil when nothing of it goes now.
func (p *Planner) kubeStep(a *Action, km gate.KubeMachine, roll *gate.KubeRollout, mv []string) (*KubeStep, error) {
	desired := p.config(*a)
	step := &KubeStep{From: gate.LowestVersion(km.Running.Versions()), To: roll.To, Held: map[string]string{}}
	var now []string
	for _, c := range mv {
		if roll.Moving(a.Machine.Name, c) {
			now = append(now, c)
		} else {
			step.Held[c] = roll.Held[c]
		}
	}
	// held: the images of the components that do not move (yet), by phase
	held := func(after int) map[string]string {
		out := map[string]string{}
		for _, c := range mv {
			if !slices.Contains(now, c) || slices.Index(now, c) > after {
				out[c] = km.Running.Image(c)
			}
		}
		return out
	}
	laterMode, laterReboots := talosapi.ModeNoReboot, false
	if p.Mode == talosapi.ModeReboot {
		laterMode, laterReboots = talosapi.ModeReboot, true
	}
	for i, c := range now {
		cfg, err := talosapi.WithKubeImages(desired, held(i))
		if err != nil {
			return nil, err
		}
		ph := KubePhase{Component: c, Image: km.Desired.Image(c), Config: cfg, Mode: laterMode, Reboots: laterReboots}
		if i == 0 { // the rest of the change goes with the first phase
			ph.Mode, ph.Reboots = a.Mode, a.Reboots
		}
		step.Phases = append(step.Phases, ph)
	}
	if len(step.Phases) > 0 {
		return step, nil
	}
	// Every move waits: what else changes goes alone.
	base, err := talosapi.WithKubeImages(desired, held(-1))
	if err != nil {
		return nil, err
	}
	if d, err := talosapi.DiffConfigs(a.seen.active, base); err != nil || d.Equal {
		return nil, err
	}
	step.Phases = []KubePhase{{Config: base, Mode: a.Mode, Reboots: a.Reboots}}
	return step, nil
}

// kubeMachineOf is a control plane the plan does not cover, as the
// Kubernetes rules see it.
func kubeMachineOf(o *talosapi.Observation) gate.KubeMachine {
	km := gate.KubeMachine{Name: o.Machine.Name, ControlPlane: true, Talos: o.Version, Maintenance: o.Maintenance, Why: "not in this plan"}
	switch {
	case o.Err != nil:
		km.Why = o.Err.Error()
	case o.ConfigErr != nil:
		km.Why = o.ConfigErr.Error()
	default:
		if k, err := talosapi.KubeComponentsOf(o.Active); err == nil {
			km.Running = &k
		}
	}
	return km
}

// nodeKubelets are the kubelet versions the Nodes report, by name; nil
// when they cannot be listed.
func (p *Planner) nodeKubelets(ctx context.Context) map[string]string {
	if p.Kube == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	nodes := talosapi.ObserveNodes(lctx, p.Kube)
	if nodes.Err != nil {
		return nil
	}
	out := make(map[string]string, len(nodes.ByName))
	for name, n := range nodes.ByName {
		out[name] = n.KubeletVersion
	}
	return out
}

// kubePhase applies one phase of a machine's Kubernetes version change and
// waits until the component runs its new version.
func (r *Rollout) kubePhase(ctx context.Context, a Action, ph KubePhase) error {
	m := a.Machine
	what := "the rest of its change, every Kubernetes component held (" + a.Diff.Summary() + ")"
	if ph.Component != "" {
		what = ph.Component + " → " + talosapi.ImageTag(ph.Image)
	}
	if err := r.applyWait(ctx, m, ph.Config, ph.Mode, ph.Reboots, "Kubernetes "+what, a.NotReady); err != nil {
		return err
	}
	var err error
	switch ph.Component {
	case "":
		return nil
	case talosapi.Kubelet:
		if err = r.waitKubelet(ctx, m, talosapi.ImageTag(ph.Image)); err == nil {
			r.say("    %s: its Node reports kubelet %s", m.Name, talosapi.ImageTag(ph.Image))
		}
	default:
		if err = r.waitStaticPod(ctx, m, ph.Component, ph.Image); err == nil {
			r.say("    %s: %s runs %s, Ready", m.Name, ph.Component, talosapi.ImageTag(ph.Image))
		}
	}
	return err
}

// waitStaticPod polls until the machine's static pod of component runs
// image, Ready (talosctl upgrade-k8s' checkPodStatus). Right after a live
// apply Talos still reports the old pod Ready: its controllers pick the
// change up a moment later, so the image is what tells.
func (r *Rollout) waitStaticPod(ctx context.Context, m *inventory.Machine, component, image string) error {
	return r.poll(ctx, m.Name+" "+component+" to run "+talosapi.ImageTag(image)+", Ready", func() string {
		octx, cancel := context.WithTimeout(ctx, r.Timeout)
		defer cancel()
		c, err := r.Dialer.Client(octx, m)
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		pods, err := talosapi.StaticPods(octx, c)
		if err != nil {
			return err.Error()
		}
		i := slices.IndexFunc(pods, func(p talosapi.StaticPod) bool { return p.Component == component })
		switch {
		case i < 0:
			return component + " not reported"
		case pods[i].Image != image:
			return component + " runs " + pods[i].Image
		case !pods[i].Ready:
			return component + " not Ready (" + pods[i].Reason + ")"
		}
		return ""
	}, func(last string) error {
		return fmt.Errorf("%s: %s did not run %s, Ready, within %s: %s; see %s", m.Name, component, image, r.Wait, last, r.Dialer.Talosctl(m)+" get staticpodstatus")
	})
}

// waitKubelet polls until the machine's Node reports the kubelet version,
// Ready (or NotReady only for want of a CNI while none runs in the
// cluster, as waitConverged accepts).
func (r *Rollout) waitKubelet(ctx context.Context, m *inventory.Machine, version string) error {
	if r.Kube == nil {
		return fmt.Errorf("%s: its kubelet %s is confirmed on its Node, and devata has no kubeconfig: pass --kubeconfig (or set KUBECONFIG), then run again", m.Name, version)
	}
	return r.poll(ctx, "Node "+m.Name+" to report kubelet "+version+", Ready", func() string {
		octx, cancel := context.WithTimeout(ctx, r.Timeout)
		defer cancel()
		n, err := r.Kube.CoreV1().Nodes().Get(octx, m.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		f := talosapi.NodeFactsOf(n)
		switch {
		case f.KubeletVersion != version:
			return "kubelet " + f.KubeletVersion
		case !f.Ready && !talosapi.NetworkNotReady(f.ReadyReason):
			return "kubelet " + version + ", not Ready (" + f.ReadyReason + ")"
		case !f.Ready:
			// NotReady for want of a CNI: expected only while none runs
			if runs, why, _ := r.cniRuns(ctx); runs { // the kubelet restarted: an unknown waits
				return "kubelet " + version + ", not Ready (" + f.ReadyReason + ") while a CNI runs in the cluster (" + why + ")"
			}
		}
		return ""
	}, func(last string) error {
		return fmt.Errorf("Node %s did not report kubelet %s, Ready, within %s: %s; see kubectl describe node %s and %s", m.Name, version, r.Wait, last, m.Name, r.Dialer.Talosctl(m)+" service kubelet")
	})
}

// poll looks every Poll until look says nothing is left ("") or Wait ends,
// saying every Heartbeat what it waits for and what it last saw.
func (r *Rollout) poll(ctx context.Context, waitsFor string, look func() string, timedOut func(last string) error) error {
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	beat := heartbeat.Start(r.Say, r.Heartbeat, r.Wait, waitsFor)
	defer beat.Stop()
	for {
		last := look()
		if last == "" {
			return nil
		}
		beat.Saw(last)
		select {
		case <-wctx.Done():
			return timedOut(last)
		case <-time.After(r.Poll):
		}
	}
}

// kubeMoves lists a step's components for people: "kube-apiserver,
// kubelet → v1.34.1".
func (k *KubeStep) moves() string {
	var cs []string
	for _, ph := range k.Phases {
		if ph.Component != "" {
			cs = append(cs, ph.Component)
		}
	}
	held := slices.Sorted(maps.Keys(k.Held))
	s := strings.Join(cs, ", ") + " → " + k.To
	if len(cs) == 0 {
		s = "no component now"
	}
	if len(held) > 0 {
		s += " (held: " + strings.Join(held, ", ") + ")"
	}
	return s
}
