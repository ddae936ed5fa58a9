package reconcile

import (
	"fmt"
	"strings"

	"devata.dev/devata/drift"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// The kinds of the steps a Kubernetes version change takes before any
// component moves (Plan.KubernetesBefore).
const (
	// StepKubeDeprecatedAPIs is a minor upgrade's check that no client
	// still requests an API the new version removes (kubedeprecated.go).
	StepKubeDeprecatedAPIs plan.Kind = "kubernetes-deprecated-apis"
	// StepKubeImagePull is one machine's pull of its new Kubernetes
	// images (kubeprepull.go).
	StepKubeImagePull plan.Kind = "kubernetes-image-pull"
)

// byApply is the command whose rollout takes the steps.
const byApply = "apply"

// KubernetesBefore are the steps the rollout of p takes before any
// Kubernetes component moves, as plan steps: on a minor upgrade the check
// that no client still requests an API the new version removes (made when
// the plan was made, Planner.planKubernetes), then, on every machine that
// moves a component, the pull of its new images (Rollout.prePull). A
// refused change has only the check, blocked with the refusal; nil when p
// changes no Kubernetes version. The statuses are the check's as the plan
// made it (done, blocked, or check when it could not be made) and pending
// for each pull.
func (p *Plan) KubernetesBefore() []plan.Step {
	k := p.Kubernetes
	if k == nil {
		return nil
	}
	var out []plan.Step
	if minorMoves(k.From, k.To) {
		out = append(out, p.deprecatedAPIsStep())
	}
	if k.Refused != "" {
		return out
	}
	for _, a := range p.Actions {
		if s, ok := imagePullStep(a); ok {
			out = append(out, s)
		}
	}
	return out
}

// deprecatedAPIsStep is the minor upgrade's check as the plan made it.
func (p *Plan) deprecatedAPIsStep() plan.Step {
	k := p.Kubernetes
	s := plan.Step{Kind: StepKubeDeprecatedAPIs, By: byApply,
		Summary:  "check that no client still requests an API Kubernetes " + k.To + " removes (the API server's apiserver_requested_deprecated_apis, on its /metrics)",
		Talosctl: []string{"kubectl get --raw /metrics | grep apiserver_requested_deprecated_apis   # talosctl has no equivalent: upgrade-k8s checks only stored objects of a hand-kept list"}}
	switch {
	case k.Refused != "":
		s.Status, s.Reason = plan.StatusBlocked, "the Kubernetes version change is refused: "+k.Refused
	case p.forceAPIs:
		s.Status, s.Reason = plan.StatusDone, "not checked: --force upgrades without it"
	case p.noKube:
		// deprecatedRefusal cannot read the API server without a
		// kubeconfig, and the rollout goes ahead unchecked
		s.Status, s.Reason = plan.StatusCheck, "not checked: devata has no kubeconfig to read the API server with, and devata apply without one goes ahead unchecked (pass --kubeconfig, or set KUBECONFIG)"
	default:
		s.Status, s.Reason = plan.StatusDone, "checked when this plan was made: no API "+k.To+" removes is requested (devata apply checks again when it plans)"
		s.Evidence = []plan.Evidence{{Rung: drift.RungResources, Observed: "apiserver_requested_deprecated_apis: no requested API with a removed_release at or below " + k.To}}
	}
	return s
}

// imagePullStep is a's pull of the new images of its Kubernetes phases,
// as Rollout.prePull makes it: the control-plane images into the CRI
// namespace, the kubelet's into the system namespace.
func imagePullStep(a Action) (plan.Step, bool) {
	if a.Kubernetes == nil {
		return plan.Step{}, false
	}
	var images, cmds []string
	for _, ph := range a.Kubernetes.Phases {
		if ph.Component == "" || ph.Image == "" {
			continue
		}
		ns := "cri"
		if ph.Component == talosapi.Kubelet {
			ns = "system"
		}
		images = append(images, ph.Image)
		cmds = append(cmds, fmt.Sprintf("talosctl --nodes %s image pull --namespace %s %s", a.Machine.Address, ns, ph.Image))
	}
	if len(images) == 0 {
		return plan.Step{}, false
	}
	return plan.Step{Kind: StepKubeImagePull, Machine: a.Machine.Name, Status: plan.StatusPending, By: byApply,
		Summary: "pull " + strings.Join(tags(images), ", ") + " (MachineService.ImagePull) before any component moves",
		Reason: "as talosctl upgrade-k8s pulls first (prePullImages): a static pod or kubelet restarted on an image that is already there is down for seconds, not for a download; " +
			"a pull that fails stops the rollout before any component moved",
		Talosctl: cmds}, true
}
