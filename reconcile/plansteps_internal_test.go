package reconcile

import (
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// KubernetesBefore states the deprecated-API check as the plan made it
// (done, refused, forced, or not made without a kubeconfig), only on a
// minor upgrade, and a pull per moving machine with its images in the
// namespaces Rollout.prePull uses; a refused change pulls nothing.
func TestKubernetesBefore(t *testing.T) {
	cp := &inventory.Machine{Name: "cp-1", Address: "10.0.0.11", Role: "controlplane"}
	w := &inventory.Machine{Name: "worker-1", Address: "10.0.0.21", Role: "worker"}
	actions := []Action{
		{Machine: cp, Kind: KindApply, Kubernetes: &KubeStep{Phases: []KubePhase{
			{Component: talosapi.KubeAPIServer, Image: "registry.k8s.io/kube-apiserver:v1.34.1"},
			{Component: "", Image: ""}, // the rest of the config: nothing to pull
			{Component: talosapi.Kubelet, Image: "ghcr.io/siderolabs/kubelet:v1.34.1"},
		}}},
		{Machine: w, Kind: KindNone},
	}
	status := func(ss []plan.Step) (out []string) {
		for _, s := range ss {
			out = append(out, string(s.Kind)+"/"+s.Machine+"/"+string(s.Status))
		}
		return out
	}
	for _, c := range []struct {
		name              string
		from, refused     string
		noKube, forceAPIs bool
		want              []string
		reason            string
	}{
		{name: "minor", from: "v1.33.5", want: []string{"kubernetes-deprecated-apis//done", "kubernetes-image-pull/cp-1/pending"}, reason: "checked when this plan was made"},
		{name: "patch", from: "v1.34.0", want: []string{"kubernetes-image-pull/cp-1/pending"}},
		{name: "refused", from: "v1.33.5", refused: "clients still request APIs", want: []string{"kubernetes-deprecated-apis//blocked"}, reason: "refused: clients still request APIs"},
		{name: "no kubeconfig", from: "v1.33.5", noKube: true, want: []string{"kubernetes-deprecated-apis//check", "kubernetes-image-pull/cp-1/pending"}, reason: "not checked: devata has no kubeconfig"},
		{name: "forced", from: "v1.33.5", forceAPIs: true, want: []string{"kubernetes-deprecated-apis//done", "kubernetes-image-pull/cp-1/pending"}, reason: "not checked: --force"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Plan{Actions: actions, Kubernetes: &gate.KubeRollout{From: c.from, To: "v1.34.1", Refused: c.refused}, noKube: c.noKube, forceAPIs: c.forceAPIs}
			got := p.KubernetesBefore()
			if !slices.Equal(status(got), c.want) {
				t.Fatalf("steps %v, want %v", status(got), c.want)
			}
			if c.reason != "" && !strings.Contains(got[0].Reason, c.reason) {
				t.Errorf("check's reason %q, want it to say %q", got[0].Reason, c.reason)
			}
			pull := got[len(got)-1]
			if pull.Kind != StepKubeImagePull {
				return
			}
			want := []string{
				"talosctl --nodes 10.0.0.11 image pull --namespace cri registry.k8s.io/kube-apiserver:v1.34.1",
				"talosctl --nodes 10.0.0.11 image pull --namespace system ghcr.io/siderolabs/kubelet:v1.34.1",
			}
			if !slices.Equal(pull.Talosctl, want) || pull.By != "apply" || !strings.Contains(pull.Summary, "kube-apiserver:v1.34.1, kubelet:v1.34.1") {
				t.Errorf("pull %+v, want by apply, both images named, commands %q", pull, want)
			}
		})
	}
	if got := (&Plan{Actions: actions}).KubernetesBefore(); got != nil {
		t.Errorf("no Kubernetes change: %v, want none", status(got))
	}
}
