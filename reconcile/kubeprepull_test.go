package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
)

// Without a kubeconfig a Kubernetes version change moves the control
// planes' static pods and holds the kubelets (their moves are confirmed
// on their Nodes): the rollout pre-pulls kube-apiserver,
// kube-controller-manager and kube-scheduler at the target into the CRI
// namespace on every control plane through MachineService.ImagePull
// (talosctl upgrade-k8s' prePullImages) before the first config is
// applied, and pulls no kubelet, since none moves. The bootstrap
// manifests wait for the kubelets, and the rollout says so.
func TestRolloutPrePullsKubernetesImages(t *testing.T) {
	h := &harness{f: simtest.Start(t, simtest.Options{Bootstrap: true, KubernetesVersion: "v1.33.5"})}
	ctx := context.Background()
	plan, err := h.planner().Plan(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Kubernetes == nil || plan.Kubernetes.Refused != "" {
		t.Fatalf("no Kubernetes change planned: %+v", plan.Kubernetes)
	}
	out := h.rollout(nil).Run(ctx, plan)
	log := strings.Join(h.lines, "\n")
	// the static pods moved on every control plane; their kubelets wait for
	// a kubeconfig (a kubelet's move is confirmed on its Node), the workers'
	// too, so each control plane is changed part way and nothing failed;
	// no manifests are synced while a component waits
	if len(out.Failed) > 0 || len(out.Untouched) > 0 || out.Stopped != "" || len(out.Converged) > 0 ||
		!slices.Equal(out.Partial, []string{"cp-1", "cp-2", "cp-3"}) {
		t.Errorf("outcome %+v; want cp-1, cp-2, cp-3 part way and nothing else\n%s", out, strings.Join(h.lines, "\n"))
	}
	if strings.Contains(log, "server-side apply") || !strings.Contains(log, "==> bootstrap manifests of Kubernetes v1.34.1: due, synced once every machine runs it: cp-1 runs v1.33.5, v1.34.1;") {
		t.Errorf("manifests synced while the kubelets wait, or their wait not said:\n%s", log)
	}
	if !strings.Contains(log, "pre-pulling the new Kubernetes images on 3 machines") {
		t.Errorf("no pre-pull said:\n%s", log)
	}
	for _, m := range h.f.Sim.Machines() {
		pulls := m.ImagePulls()
		if !strings.HasPrefix(m.Name(), "cp-") {
			if len(pulls) != 0 {
				t.Errorf("%s pulled %+v; its kubelet is held, nothing to pull", m.Name(), pulls)
			}
			continue
		}
		got := map[string]string{}
		for _, p := range pulls {
			got[p.Image] = p.Namespace
			if p.AppliesBefore != 0 {
				t.Errorf("%s pulled %s after %d applies; want before the first", m.Name(), p.Image, p.AppliesBefore)
			}
		}
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			if img := "registry.k8s.io/" + c + ":v1.34.1"; got[img] != "k8s.io" {
				t.Errorf("%s: %s not pulled into k8s.io: %v", m.Name(), img, got)
			}
		}
	}
	if applies := h.applyCalls(); applies["cp-1"] == 0 {
		t.Errorf("no config applied on cp-1 after the pre-pull: %v\n%s", applies, log)
	}
}
