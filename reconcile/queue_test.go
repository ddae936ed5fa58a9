package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"devata.dev/devata/sim"
)

func TestFailingMachineBacksOffWhileOthersConverge(t *testing.T) {
	h := newLoop(t, nil)
	h.start(t)
	h.f.Sim.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.waitFor(t, 10*time.Second, "worker-1 to converge", func() bool { return h.inSync(t, "worker-1") })
	h.waitFor(t, 15*time.Second, "worker-2 to fail five times", func() bool {
		return h.metric(t, "devata_reconcile_machine_failures", `machine="worker-2"`) >= 5
	})
	// Others keep converging while worker-2 backs off.
	h.f.Drift(t, "cp-3", "time.cloudflare.com", "pool.ntp.org")
	h.waitFor(t, 10*time.Second, "cp-3 to converge", func() bool { return h.inSync(t, "cp-3") })

	// Each retry came at least its backoff after the one before: 100ms, 200ms, 400ms, …
	var times []time.Time
	skipped := 0
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, "backing-off=worker-2") {
			skipped++
		}
		if !strings.Contains(line, "retrying with backoff") || !strings.Contains(line, "machine=worker-2") {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(strings.Fields(line)[0], "time="))
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, ts)
	}
	for i := 2; i < len(times); i++ {
		want := h.opts.BackoffBase << (i - 1)
		if gap := times[i].Sub(times[i-1]); gap < want*9/10 {
			t.Errorf("retry %d came %s after the one before, want at least %s", i+1, gap, want)
		}
	}
	if skipped < 1 {
		t.Errorf("only %d passes left worker-2 to its backoff", skipped)
	}
	_, text := scrape(t, h.opts.Metrics, "/metrics")
	failures := sample(text, "devata_reconcile_machine_failures", `machine="worker-2"`)
	backoff := sample(text, "devata_reconcile_machine_backoff_seconds", `machine="worker-2"`)
	retries := sample(text, "workqueue_retries_total", `name="devata"`)
	t.Logf("worker-2: %v failures, backoff %vs, %v retries; %d passes left it to its backoff", failures, backoff, retries, skipped)
	if backoff < 1.6 {
		t.Errorf("worker-2 backoff %vs after %v failures, want exponential growth", backoff, failures)
	}
	if retries < failures {
		t.Errorf("workqueue_retries_total %v < failures %v", retries, failures)
	}
	for _, m := range []string{"worker-1", "cp-3"} {
		if v := sample(text, "devata_reconcile_machine_failures", `machine="`+m+`"`); v != 0 {
			t.Errorf("%s failures %v", m, v)
		}
	}
	// Recovery resets the backoff.
	h.f.Sim.Machine("worker-2").SetFaults(sim.Faults{})
	h.waitFor(t, 15*time.Second, "worker-2's failures to reset", func() bool {
		return h.metric(t, "devata_reconcile_machine_failures", `machine="worker-2"`) == 0
	})
}
