package reconcile_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// A worker whose kubelet is unhealthy before its change: the plan says so
// before anything is sent, the rollout says so again, and while it waits for
// the worker to be ready it says every Heartbeat what it waits for, how long
// so far, the bound and what it last saw, until the wait fails.
func TestAWorkerAlreadyNotReadyIsNamedInThePlanAndItsWaitBeats(t *testing.T) {
	h := newHarness(t)
	w := h.f.Sim.Machine("worker-1")
	w.SetFaults(sim.Faults{KubeletUnhealthy: true})
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.f.Drift(t, "worker-2", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	plan.Write(&b)
	notReady := regexp.MustCompile(`(?m)^  worker-1 +apply .*\n      already not ready before the change: stage \w+, unmet: .*kubelet`)
	if !notReady.MatchString(b.String()) {
		t.Errorf("the plan does not say worker-1 is already not ready:\n%s", b.String())
	}
	if strings.Count(b.String(), "already not ready") > 1 {
		t.Errorf("the plan calls a ready machine not ready:\n%s", b.String())
	}
	for _, a := range plan.Pending() {
		if a.Machine.Name == "worker-1" && !strings.Contains(a.Evidence, "already not ready before the change") {
			t.Errorf("worker-1's evidence %q does not carry it", a.Evidence)
		}
	}

	ro := h.rollout(nil)
	ro.Wait, ro.Heartbeat = time.Second, 50*time.Millisecond
	out := ro.Run(context.Background(), plan)
	log := strings.Join(h.lines, "\n")
	if strings.Join(out.Failed, ",") != "worker-1" || !strings.Contains(out.Stopped, "worker-1 did not converge within 1s") {
		t.Fatalf("want worker-1 failed to converge, got %+v\n%s", out, log)
	}
	if !strings.Contains(log, "    worker-1: already not ready before the change: stage ") {
		t.Errorf("the rollout does not say worker-1 was already not ready:\n%s", log)
	}
	beat := regexp.MustCompile(`(?m)^    waiting for worker-1 to run its desired config, running and ready: \d+ms of 1s \(last: stage \w+, ready false; unmet: .*kubelet.*\)$`)
	if !beat.MatchString(log) {
		t.Errorf("no heartbeat matching %s in:\n%s", beat, log)
	}
}

// On a fleet whose etcd was never bootstrapped the gate before the first
// control plane refuses at once, saying to run devata bootstrap, and the
// plan already said the control plane was not ready (booting, etcd not
// running). Nothing is applied.
func TestRolloutOnAnUnbootstrappedFleetStopsAtOnce(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: false})
	h := &harness{f: f}
	f.Drift(t, "cp-1", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	plan.Write(&b)
	if !regexp.MustCompile(`(?m)^  cp-1 +apply .*\n      already not ready before the change: stage booting`).MatchString(b.String()) {
		t.Errorf("the plan does not say cp-1 is already not ready:\n%s", b.String())
	}
	before := h.applyCalls()
	ro := h.rollout(nil)
	ro.Wait = 3 * time.Second
	out := ro.Run(context.Background(), plan)
	want := "gate failed before cp-1: etcd is not bootstrapped on any control plane (each waits to be bootstrapped or to join: cp-1, cp-2, cp-3): run devata bootstrap"
	if out.Stopped != want || out.Refused {
		t.Fatalf("stopped %q (refused %t), want %q", out.Stopped, out.Refused, want)
	}
	if strings.Join(out.Untouched, ",") != "cp-1" {
		t.Errorf("untouched %v, want cp-1", out.Untouched)
	}
	if after := h.applyCalls(); after["cp-1"] != before["cp-1"] {
		t.Error("cp-1 was applied to")
	}
}
