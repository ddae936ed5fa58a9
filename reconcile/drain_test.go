package reconcile_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/talosapi"
)

// A rebooting change with Drain but no kubeconfig is not drained, and the
// plan and the rollout say so (no silent skip); with a kubeconfig whose
// API server does not answer the machine is not changed at all: its step
// fails before any apply, naming the way out (--drain=false), and the
// outcome counts it failed.
func TestDrainWithoutKubernetesSaysWhatHappens(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	p := h.planner()
	p.Mode, p.Drain = talosapi.ModeReboot, true
	plan, err := p.Plan(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	plan.Write(&buf)
	if !strings.Contains(buf.String(), "not drained: devata has no kubeconfig") {
		t.Errorf("the plan does not say the reboot goes undrained without a kubeconfig:\n%s", buf.String())
	}

	// an API server that refuses connections: a port just closed
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() //nolint:errcheck
	kc, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := h.rollout(nil)
	r.Drain, r.Kube = true, kc
	before := h.applyCalls()["worker-1"]
	out := r.Run(ctx, plan)
	if out.Done() || len(out.Failed) != 1 || out.Failed[0] != "worker-1" {
		t.Fatalf("rollout with an API server that does not answer: %+v, want worker-1 failed", out)
	}
	for _, want := range []string{"worker-1: not changed: its Node could not be cordoned before the reboot", "--drain=false"} {
		if !strings.Contains(out.Stopped, want) {
			t.Errorf("the stop lacks %q: %s", want, out.Stopped)
		}
	}
	if n := h.applyCalls()["worker-1"] - before; n != 0 {
		t.Errorf("worker-1 got %d ApplyConfiguration calls though its Node could not be cordoned", n)
	}

	r = h.rollout(nil)
	r.Drain = true
	out = r.Run(ctx, plan)
	log := strings.Join(h.lines, "\n")
	if !out.Done() {
		t.Fatalf("rollout without a kubeconfig: %+v\n%s", out, log)
	}
	if !strings.Contains(log, "worker-1: not drained: devata has no kubeconfig") {
		t.Errorf("the rollout does not say it reboots undrained:\n%s", log)
	}
}
