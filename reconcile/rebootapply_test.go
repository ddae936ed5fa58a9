package reconcile_test

import (
	"context"
	"strings"
	"testing"
)

// Probe 7 of issue 15: a machine that reboots in the middle of an apply
// (the config persisted, the connection cut before the reply, as
// v1alpha1_server.go ApplyConfiguration can when the reboot wins the race)
// was reported failed at once. The rollout now waits for it to come back,
// re-observes, and judges by what it runs: here it converged, and on a
// control plane the etcd gate after the change still runs.
func TestRebootDuringTheApplyIsNotAFailure(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"cp-2", "worker-1"} {
		faults := h.f.Sim.Machine(m).Faults()
		faults.RebootDuringApply = true
		h.f.Sim.Machine(m).SetFaults(faults)
	}
	out := h.rollout(nil).Run(ctx, plan)
	log := strings.Join(h.lines, "\n")
	if !out.Done() || len(out.Converged) != 2 {
		t.Fatalf("rollout after a reboot during the apply: %+v\n%s", out, log)
	}
	for _, want := range []string{
		"cp-2: connection lost during the apply", "cp-2: back, runs the desired config", "gate after cp-2: etcd healthy",
		"worker-1: connection lost during the apply", "worker-1: back, runs the desired config",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}
