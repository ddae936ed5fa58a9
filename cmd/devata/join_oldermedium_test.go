package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/talosapi"
)

// A control plane added to a v1.14.1 fleet boots a v1.13.9 medium in
// maintenance mode (issue 30; TestApplyJoinsAMachineBootedFromAnOlderMedium
// is the worker's case). devata apply joins it with the config of the
// release it boots: v1.13.9 refuses a 1.14 document (the sim's
// notRegistered, as its configloader does), so a join with the
// inventory's would fail. Once cp-3 runs the v1.14.1 it installed from
// that config, apply gives it the inventory's config, with the Kubernetes
// documents of the 1.14 contract (KubeAPIServerConfig). etcd keeps its two
// voting members throughout (one cluster, never fewer), cp-3 ends the
// third, no learner left; drift is clean and a second run has nothing to
// do.
func TestApplyJoinsAControlPlaneBootedFromAnOlderMedium(t *testing.T) {
	const restartDelay = 200 * time.Millisecond
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.14.1", DesiredKubernetesVersion: "v1.36.3",
		TalosVersions: map[string]string{"cp-3": "v1.13.9"}, Maintenance: []string{"cp-3"}, RestartDelay: restartDelay})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig
	if voting, _ := members(t, sf.Sim); !slices.Equal(voting, []string{"cp-1", "cp-2"}) {
		t.Fatalf("etcd members %v before the join, want cp-1, cp-2", voting)
	}

	broken := etcdWatch(t, sf.Sim, 2)
	r := devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "apply", r.stdout,
		"cp-3: its config is written for Talos 1.13, the release it boots (it boots v1.13.9), until it runs v1.14.1",
		"cp-3: runs Talos v1.14.1 now, installed from its config: applying the inventory's config (mode auto)",
		"cp-3: joined: runs its desired config on Talos v1.14.1",
		"gate after cp-3: etcd healthy, 3/3 members",
		// the 1.14 documents hold the 1.13 config's secrets in new places
		// (PEM where v1alpha1 has base64): moved, not changed
		"v1alpha1.cluster.ca.key → KubeAPIServerCAConfig.issuingCA.key",
		"v1alpha1.cluster.serviceAccount.key → KubeServiceAccountConfig.issuer.privateKey",
	)
	for _, m := range regexp.MustCompile(`secrets? changed \(([^)]*)\)`).FindAllStringSubmatch(r.stdout, -1) {
		if strings.Contains(m[1], "issuingCA.key") || strings.Contains(m[1], "serviceAccount.key") {
			t.Errorf("apply calls an unchanged key changed: %s", m[0])
		}
	}
	// the 1.13 config's release first, then the inventory's: in that order
	if first, then := strings.Index(r.stdout, "cp-3: its config is written for Talos 1.13"), strings.Index(r.stdout, "cp-3: runs Talos v1.14.1 now"); first < 0 || then < first {
		t.Error("cp-3 was not configured for v1.13.9 before v1.14.1")
	}
	if t.Failed() {
		t.Fatalf("apply:\n%s", r.stdout)
	}
	for _, b := range broken() {
		t.Error(b)
	}
	if voting, learners := members(t, sf.Sim); !slices.Equal(voting, []string{"cp-1", "cp-2", "cp-3"}) || len(learners) != 0 {
		t.Errorf("etcd members %v, learners %v after the join; want cp-1, cp-2, cp-3", voting, learners)
	}
	if got := sf.Sim.Machine("cp-3").Observe().TalosVersion; got != "v1.14.1" {
		t.Errorf("cp-3 runs %s after its join, want v1.14.1", got)
	}
	// The inventory's config moves cp-3's Kubernetes settings from
	// v1alpha1 to the 1.14 documents; the kubelet's derive the same
	// KubeletSpec there, so it keeps running, but the 1.14 contract also
	// turns on API server settings the 1.13 config lacks (startup probes,
	// an authentication config, the ca-roots volume), so cp-3's static
	// pods restart after the live apply, as on Talos (sim restart.go
	// restartsOf), and apply does not wait for that (it cannot tell a
	// restart to come from none). Drift is read once they are back (its
	// Node stays NotReady without a CNI, as drift allows): they begin at
	// most restartDelay/4 after the apply and take restartDelay.
	time.Sleep(restartDelay * 5 / 4)
	var o *talosapi.Observation
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		o = talosapi.Observe(context.Background(), sf.Dialer, sf.Inventory.Machine("cp-3"))
		if o.Err == nil && o.ConfigErr == nil && o.Stage == "running" && (o.Ready || o.NotReadyOnlyForNode()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cp-3 not running and ready 30s after its join: %v %v, stage %s, unmet %v", o.Err, o.ConfigErr, o.Stage, o.Unmet)
		}
	}
	if !strings.Contains(string(o.Active), "kind: KubeAPIServerConfig") {
		t.Error("cp-3's active config lacks the 1.14 contract's KubeAPIServerConfig: it does not run the inventory's config")
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks); r.code != 0 {
		t.Errorf("drift after the join: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig); r.code != 0 || !strings.Contains(r.stdout, "nothing to apply") {
		t.Errorf("second run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}
