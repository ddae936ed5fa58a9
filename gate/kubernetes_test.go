package gate_test

import (
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/gate"
	"devata.dev/devata/talosapi"
)

func TestKubernetesPath(t *testing.T) {
	for _, tt := range []struct {
		from, to, refused string
	}{
		{"v1.33.4", "v1.34.1", ""},
		{"v1.34.0", "v1.34.1", ""},
		{"v1.34.1", "v1.34.0", ""}, // within a minor, as talosctl upgrade-k8s allows
		{"v1.34.1", "v1.34.1", ""},
		{"v1.34.1", "v1.33.5", "a downgrade from v1.34.1 to v1.33.5"},
		{"v1.32.3", "v1.34.1", "a jump from v1.32.3 to v1.34.1: Kubernetes moves one minor release at a time (its version skew policy); set cluster.kubernetesVersion to the latest v1.33 patch"},
		{"v1.34.1", "v2.0.0", "a jump"},
		{"latest", "v1.34.1", `runs Kubernetes "latest"`},
		{"v1.34.1", "one-34", `cluster.kubernetesVersion "one-34" is not a version`},
	} {
		err := gate.KubernetesPath(tt.from, tt.to)
		switch {
		case tt.refused == "" && err != nil:
			t.Errorf("%s → %s refused: %v", tt.from, tt.to, err)
		case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
			t.Errorf("%s → %s: %v, want %q", tt.from, tt.to, err, tt.refused)
		}
	}
}

func TestKubernetesOnTalos(t *testing.T) {
	if err := gate.KubernetesOnTalos("v1.34.1", "v1.11.0"); err != nil {
		t.Errorf("Kubernetes 1.34 on Talos 1.11 refused: %v", err)
	}
	err := gate.KubernetesOnTalos("v1.34.1", "v1.9.5")
	if err == nil || !strings.Contains(err.Error(), "Talos v1.9.5 does not run Kubernetes v1.34.1") || !strings.Contains(err.Error(), "devata upgrade") {
		t.Errorf("Kubernetes 1.34 on Talos 1.9: %v; want refused, naming devata upgrade", err)
	}
}

// kube builds the images a machine runs at one version.
func kube(cp bool, v string) *talosapi.KubeComponents {
	k := &talosapi.KubeComponents{ControlPlane: cp, Kubelet: "ghcr.io/siderolabs/kubelet:" + v}
	if cp {
		k.APIServer = "registry.k8s.io/kube-apiserver:" + v
		k.ControllerManager = "registry.k8s.io/kube-controller-manager:" + v
		k.Scheduler = "registry.k8s.io/kube-scheduler:" + v
	}
	return k
}

// changing is a machine whose config moves from one version to another.
func changing(name string, cp bool, from, to string) gate.KubeMachine {
	return gate.KubeMachine{Name: name, ControlPlane: cp, Running: kube(cp, from), Talos: "v1.11.0", Changes: true, Desired: *kube(cp, to)}
}

func TestPlanKubernetes(t *testing.T) {
	all := []string{talosapi.KubeAPIServer, talosapi.KubeControllerManager, talosapi.KubeScheduler, talosapi.Kubelet}
	fleet := func() []gate.KubeMachine {
		return []gate.KubeMachine{
			changing("w-1", false, "v1.33.5", "v1.34.1"),
			changing("cp-1", true, "v1.33.5", "v1.34.1"),
			changing("cp-2", true, "v1.33.5", "v1.34.1"),
		}
	}

	t.Run("in order, control planes first", func(t *testing.T) {
		k := gate.PlanKubernetes("v1.34.1", fleet(), "")
		if k == nil || k.Refused != "" || len(k.Held) != 0 {
			t.Fatalf("%+v; want a rollout, nothing held", k)
		}
		if k.From != "v1.33.5" || k.To != "v1.34.1" {
			t.Errorf("from %s to %s", k.From, k.To)
		}
		for _, c := range all[:3] {
			if got := k.Moves[c]; !slices.Equal(got, []string{"cp-1", "cp-2"}) {
				t.Errorf("%s moves on %v, want cp-1, cp-2", c, got)
			}
		}
		if got := k.Moves[talosapi.Kubelet]; !slices.Equal(got, []string{"cp-1", "cp-2", "w-1"}) {
			t.Errorf("kubelet moves on %v, want the control planes, then w-1", got)
		}
		if k.Next() != "kube-apiserver on cp-1" {
			t.Errorf("next %q", k.Next())
		}
	})

	t.Run("nothing moves", func(t *testing.T) {
		ms := fleet()
		for i := range ms {
			ms[i].Desired = *ms[i].Running
		}
		if k := gate.PlanKubernetes("v1.33.5", ms, ""); k != nil {
			t.Errorf("%+v; want nil", k)
		}
	})

	t.Run("a control plane left behind holds all but the API servers", func(t *testing.T) {
		ms := fleet()
		ms[2].Changes, ms[2].Why = false, "not reachable"
		k := gate.PlanKubernetes("v1.34.1", ms, "")
		if !slices.Equal(k.Moves[talosapi.KubeAPIServer], []string{"cp-1"}) {
			t.Errorf("API servers move on %v, want cp-1", k.Moves[talosapi.KubeAPIServer])
		}
		for _, c := range all[1:] {
			if len(k.Moves[c]) > 0 || !strings.Contains(k.Held[c], "these do not yet: cp-2 (kube-apiserver v1.33.5: not reachable)") {
				t.Errorf("%s: moves %v, held %q; want held naming cp-2", c, k.Moves[c], k.Held[c])
			}
		}
	})

	t.Run("an unreadable control plane is behind, one in maintenance mode is not", func(t *testing.T) {
		ms := fleet()
		ms[2].Running, ms[2].Changes, ms[2].Why = nil, false, "dial: connection refused"
		k := gate.PlanKubernetes("v1.34.1", ms, "")
		if !strings.Contains(k.Held[talosapi.Kubelet], "cp-2 (dial: connection refused)") {
			t.Errorf("held %q", k.Held[talosapi.Kubelet])
		}
		ms[2].Maintenance = true
		k = gate.PlanKubernetes("v1.34.1", ms, "")
		if len(k.Held) != 0 || len(k.Moves[talosapi.Kubelet]) != 2 {
			t.Errorf("held %v, kubelets %v; want nothing held", k.Held, k.Moves[talosapi.Kubelet])
		}
	})

	t.Run("a control plane already on the new version is not behind", func(t *testing.T) {
		ms := fleet()
		ms[2] = gate.KubeMachine{Name: "cp-2", ControlPlane: true, Running: kube(true, "v1.34.1"), Why: "applied config is the desired one"}
		k := gate.PlanKubernetes("v1.34.1", ms, "")
		if len(k.Held) != 0 || !slices.Equal(k.Moves[talosapi.KubeScheduler], []string{"cp-1"}) {
			t.Errorf("held %v, schedulers %v", k.Held, k.Moves[talosapi.KubeScheduler])
		}
	})

	t.Run("without Nodes the kubelets wait", func(t *testing.T) {
		k := gate.PlanKubernetes("v1.34.1", fleet(), "devata has no kubeconfig")
		if len(k.Moves[talosapi.Kubelet]) != 0 || !strings.Contains(k.Held[talosapi.Kubelet], "devata has no kubeconfig") {
			t.Errorf("kubelets %v, held %q", k.Moves[talosapi.Kubelet], k.Held[talosapi.Kubelet])
		}
		if len(k.Moves[talosapi.KubeScheduler]) != 2 {
			t.Errorf("schedulers %v; want both", k.Moves[talosapi.KubeScheduler])
		}
	})

	t.Run("a worker's kubelet two minors behind refuses the jump", func(t *testing.T) {
		ms := fleet()
		ms[0] = gate.KubeMachine{Name: "w-1", NodeKubelet: "v1.32.9", Why: "not reachable"}
		k := gate.PlanKubernetes("v1.34.1", ms, "")
		if k.From != "v1.32.9" || !strings.Contains(k.Refused, "a jump from v1.32.9 to v1.34.1") || k.Next() != "none: refused" {
			t.Errorf("%+v; want refused from v1.32.9", k)
		}
	})

	t.Run("a component on a newer minor refuses the downgrade", func(t *testing.T) {
		ms := fleet()
		ms[0].Running = kube(false, "v1.35.0")
		if k := gate.PlanKubernetes("v1.34.1", ms, ""); !strings.Contains(k.Refused, "a downgrade from v1.35.0") {
			t.Errorf("refused %q", k.Refused)
		}
	})

	t.Run("a Talos that does not run the version refuses", func(t *testing.T) {
		ms := fleet()
		ms[1].Talos = "v1.9.5"
		if k := gate.PlanKubernetes("v1.34.1", ms, ""); !strings.HasPrefix(k.Refused, "cp-1: Talos v1.9.5 does not run Kubernetes v1.34.1") {
			t.Errorf("refused %q", k.Refused)
		}
	})
}
