package gate_test

import (
	"strings"
	"testing"

	"devata.dev/devata/gate"
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
