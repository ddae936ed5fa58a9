package reconcile

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// Each action becomes one plan step: its kind and status, what the text
// plan prints under it (notes, drain), the commands that do it by hand
// with the inventory's address, and what a held skip would change; the
// desired config the rollout sends is never part of a step.
func TestPlanSteps(t *testing.T) {
	cp := &inventory.Machine{Name: "cp-1", Address: "10.0.0.11", Role: "controlplane"}
	w1 := &inventory.Machine{Name: "worker-1", Address: "10.0.0.21", Role: "worker"}
	w2 := &inventory.Machine{Name: "worker-2", Address: "10.0.0.22", Role: "worker"}
	w3 := &inventory.Machine{Name: "worker-3", Address: "10.0.0.23", Role: "worker"}
	diff := talosapi.ConfigDiff{Text: "--- applied\n+++ desired\n-a\n+b\n", Changes: []string{"a → b"}, ChangedSecrets: []string{"v1alpha1.cluster.token"}}
	const secret = "0123456789abcdef-secret"
	p := &Plan{drain: true, Actions: []Action{
		{Machine: cp, Kind: KindApply, Mode: talosapi.ModeReboot, Reboots: true, Reason: "applied config differs", Diff: diff,
			Config: []byte("token: " + secret), Contract: "its config is written for Talos 1.13", NotReady: "already not ready", Evidence: "MachineConfig v1alpha1 observed"},
		{Machine: w1, Kind: KindUpgrade, Reboots: true, Reason: "runs Talos v1.13.9, the inventory says v1.14.1",
			Upgrade: &UpgradeStep{From: "v1.13.9", To: "v1.14.1", Image: "factory.talos.dev/metal-installer/x:v1.14.1", Final: "v1.15.0"}},
		{Machine: w2, Kind: KindJoin, Mode: talosapi.ModeAuto, Reboots: true, Reason: "in maintenance mode"},
		{Machine: w3, Kind: KindSkip, HeldBy: HeldByHold, Reason: "held by the inventory", Mode: talosapi.ModeNoReboot, Diff: diff},
	}}
	steps := p.Steps("apply")
	kinds := make([]string, len(steps))
	for i, s := range steps {
		kinds[i] = string(s.Kind) + "/" + string(s.Status) + "/" + s.Role
	}
	if want := []string{"apply/pending/controlplane", "upgrade/pending/worker", "join/pending/worker", "skip/blocked/worker"}; !slices.Equal(kinds, want) {
		t.Errorf("steps %v, want %v", kinds, want)
	}

	apply := steps[0]
	if apply.Summary != "apply reboot (REBOOTS): "+diff.Summary() || !slices.Equal(apply.Notes, []string{"its config is written for Talos 1.13", "already not ready"}) ||
		!strings.HasPrefix(apply.Drain, "drain first:") || apply.Diff != diff.Text || !slices.Equal(apply.SecretsChanged, diff.ChangedSecrets) || len(apply.Evidence) != 1 {
		t.Errorf("apply step: %+v", apply)
	}
	if want := []string{
		"kubectl drain cp-1 --ignore-daemonsets --delete-emptydir-data",
		"talosctl apply-config --nodes 10.0.0.11 --file rendered/cp-1.yaml --mode reboot --dry-run",
		"talosctl apply-config --nodes 10.0.0.11 --file rendered/cp-1.yaml --mode reboot",
		"kubectl uncordon cp-1   # once it is back and Ready",
	}; !slices.Equal(apply.Talosctl, want) {
		t.Errorf("apply by hand:\n%q\nwant\n%q", apply.Talosctl, want)
	}

	up := steps[1]
	if up.Upgrade == nil || up.Upgrade.Final != "v1.15.0" || up.Summary != "upgrade Talos v1.13.9 → v1.14.1 (REBOOTS): factory.talos.dev/metal-installer/x:v1.14.1" ||
		len(up.Notes) != 2 || !strings.Contains(up.Notes[0], "this hop to v1.14.1, then on to v1.15.0") || !strings.HasPrefix(up.Notes[1], "through LifecycleService.Upgrade") ||
		!slices.Contains(up.Talosctl, "talosctl upgrade --nodes 10.0.0.21 --image factory.talos.dev/metal-installer/x:v1.14.1") {
		t.Errorf("upgrade step: %+v", up)
	}

	join := steps[2]
	if join.Drain != "" || !slices.Equal(join.Talosctl, []string{"talosctl apply-config --insecure --nodes 10.0.0.22 --file rendered/worker-2.yaml --mode auto"}) {
		t.Errorf("join step: %+v (a machine in maintenance mode has no Node to drain)", join)
	}

	held := steps[3]
	if held.Held != HeldByHold || held.Summary != "held: held by the inventory" || held.Mode != "no-reboot" || held.Diff != diff.Text || len(held.Talosctl) != 0 {
		t.Errorf("held step: %+v", held)
	}

	// without a kubeconfig nothing is drained, and the commands say no drain
	p.noKube = true
	if s := p.Steps("apply")[0]; !strings.HasPrefix(s.Drain, "not drained:") || strings.HasPrefix(s.Talosctl[0], "kubectl") {
		t.Errorf("no kubeconfig: drain %q, commands %q", s.Drain, s.Talosctl)
	}

	b, err := json.Marshal(p.Steps("apply"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) {
		t.Error("a step carries the desired config")
	}

}

// The plan's Kubernetes change in plan's shape: the moves in talosctl
// upgrade-k8s' order, the held component with why, the steps before, and
// upgrade-k8s by hand against the inventory's first control plane; a
// refused change has no moves.
func TestPlanKubernetesChange(t *testing.T) {
	cp := &inventory.Machine{Name: "cp-1", Address: "10.0.0.11", Role: "controlplane"}
	inv := &inventory.Inventory{Machines: []inventory.Machine{*cp}}
	p := &Plan{Actions: []Action{{Machine: cp, Kind: KindApply, Kubernetes: &KubeStep{Phases: []KubePhase{
		{Component: talosapi.KubeAPIServer, Image: "registry.k8s.io/kube-apiserver:v1.34.1"}}}}},
		Kubernetes: &gate.KubeRollout{From: "v1.34.0", To: "v1.34.1",
			Moves: map[string][]string{talosapi.KubeAPIServer: {"cp-1"}}, Held: map[string]string{talosapi.Kubelet: "no Nodes"}}}
	if (&Plan{}).KubernetesChange(inv) != nil {
		t.Error("a plan that moves no version has a Kubernetes change")
	}
	k := p.KubernetesChange(inv)
	want := []plan.KubernetesStep{{Component: talosapi.KubeAPIServer, Machines: []string{"cp-1"}}, {Component: talosapi.Kubelet, Held: "no Nodes"}}
	if k.From != "v1.34.0" || k.To != "v1.34.1" || !reflect.DeepEqual(k.Steps, want) || k.Next != "kube-apiserver on cp-1" ||
		!slices.Equal(k.Talosctl, []string{"talosctl --nodes 10.0.0.11 upgrade-k8s --to 1.34.1"}) || len(k.Before) != 1 || k.Before[0].Kind != StepKubeImagePull {
		t.Errorf("Kubernetes change %+v", k)
	}
	p.Kubernetes.Refused = "a component runs v1.32"
	if k := p.KubernetesChange(inv); k.Refused == "" || len(k.Steps) != 0 || k.Next != "none: refused" {
		t.Errorf("refused change %+v", k)
	}
}
