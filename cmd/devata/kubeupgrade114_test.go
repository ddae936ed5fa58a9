package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
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
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.14.1", KubernetesVersion: "v1.36.3", Bootstrap: true, RestartDelay: 200 * time.Millisecond})
	k := startKubeWith(t, testenv.Options{APIServerArgs: kubeServiceRange})
	k.playKubelets(t, sf.Sim)
	k.waitKubelets(t, "v1.36.3")
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	w := watchMoves(t, sf.Sim, "v1.37.0")
	before, _ := writes(sf.Sim)
	r := devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	assertPrePulled(t, sf.Sim, "v1.37.0", before)
	k.waitKubelets(t, "v1.37.0")
	time.Sleep(50 * time.Millisecond) // a last sample
	moves, broken := w.order()
	for _, b := range broken {
		t.Error(b)
	}
	var want []string
	for _, c := range talosapi.KubeOrder {
		for _, m := range []string{"cp-1", "cp-2", "cp-3"} {
			want = append(want, m+"/"+c)
		}
	}
	want = append(want, "worker-1/kubelet", "worker-2/kubelet")
	if len(moves) != len(want) || !slices.Equal(moves[:len(want)-2], want[:len(want)-2]) {
		t.Errorf("moves in the order\n  %v\nwant\n  %v", moves, want)
	}
	// one apply per component and control plane, one per worker
	if applies, _ := writes(sf.Sim); applies != 3*4+2 {
		t.Errorf("%d applies, want 14", applies)
	}
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
