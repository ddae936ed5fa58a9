package main

import (
	"strings"
	"testing"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/talosapi"
)

// A Kubernetes minor upgrade on Talos 1.14's config contract: the fleet
// (examples/homelab-v1.14, Talos v1.14.1) runs Kubernetes v1.36.3 and the
// inventory says v1.37.0. Its configs carry the images in the Kubernetes
// documents (KubeAPIServerConfig, KubeControllerManagerConfig,
// KubeSchedulerConfig, KubeletConfig on the control planes) and in
// machine.kubelet on the workers, which keep their kubelet in v1alpha1 for
// the Longhorn mounts (render/contract.go). Each step's apply holds the
// later components where the config holds them (talosapi.WithKubeImages,
// as talosctl upgrade-k8s' stdpatches): the sim validates each applied
// config as Talos does and would refuse a v1alpha1 image beside its
// document (machinery config/container validate.go validate, the
// documents' V1Alpha1ConflictValidate: "kubelet config is already set in
// v1alpha1 config"). apply moves every component in talosctl upgrade-k8s'
// order, within the version skew policy, the Nodes report v1.37.0 through
// the real API server, drift is clean and a second run has nothing to do.
func TestKubernetesUpgradeOnTalos114(t *testing.T) {
	sf, k, kubeconfig := startOnKubernetesWith(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.14.1", KubernetesVersion: "v1.36.3"})

	w := watchMoves(t, sf.Sim, "v1.37.0")
	before, _ := writes(sf.Sim)
	r := devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	assertPrePulled(t, sf.Sim, "v1.37.0", before)
	k.waitKubelets(t, "v1.37.0")
	assertUpgradeOrder(t, w, sf.Sim)
	for _, m := range sf.Sim.Machines() {
		for c, img := range m.Observe().Images {
			if talosapi.ImageTag(img) != "v1.37.0" {
				t.Errorf("%s: %s runs %s, want v1.37.0", m.Name(), c, img)
			}
		}
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks); r.code != 0 {
		t.Errorf("drift after the upgrade: exit %d\n%s", r.code, r.stdout)
	}
	r = devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig)
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to apply") {
		t.Errorf("second run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}
