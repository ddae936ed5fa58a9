package reconcile_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/machines"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// syncBuffer is a bytes.Buffer safe for the loop's goroutines; onWrite, if
// set, sees every write (one audit record or one log line).
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	onWrite func(p []byte)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	hook := b.onWrite
	b.mu.Unlock()
	if hook != nil {
		hook(p)
	}
	return n, err
}

func (b *syncBuffer) setHook(fn func(p []byte)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onWrite = fn
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records parses the audit log.
func (b *syncBuffer) records(t *testing.T) []reconcile.AuditRecord {
	t.Helper()
	var out []reconcile.AuditRecord
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var r reconcile.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

type loopHarness struct {
	f *simtest.Fleet
	// opts are the loop's options; loop makes the loop of them.
	opts  reconcile.LoopOptions
	built *reconcile.Loop
	audit *syncBuffer
	logs  *syncBuffer
}

// loop is the loop of h.opts, made on first use and kept (with the spec in
// force and a gate's stop) until renew.
func (h *loopHarness) loop() *reconcile.Loop {
	if h.built == nil {
		h.built = reconcile.NewLoop(h.opts)
	}
	return h.built
}

// renew makes the next use of loop a new loop of h.opts, as a restart with
// other flags would.
func (h *loopHarness) renew() { h.built = nil }

// The checks that need no Kubernetes API.
var talosChecks = []string{machines.CheckConfig, machines.CheckTalosVersion, machines.CheckMachineStage, machines.CheckEtcd}

func newLoop(t *testing.T, f *simtest.Fleet) *loopHarness {
	t.Helper()
	if f == nil {
		f = simtest.Start(t, simtest.Options{Bootstrap: true})
	}
	h := &loopHarness{f: f, audit: &syncBuffer{}, logs: &syncBuffer{}}
	h.opts = reconcile.LoopOptions{
		Source: reconcile.FileSource(f.Inventory.Path), Checks: talosChecks,
		Changes: reconcile.Changes{
			Dialer: f.Dialer, Mode: talosapi.ModeAuto, MaxUnavailable: 1, Concurrency: 8,
			Timeout: 5 * time.Second, Wait: 5 * time.Second, Poll: 20 * time.Millisecond,
		},
		Interval: 200 * time.Millisecond, Grace: 5 * time.Second,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 5 * time.Second,
		Metrics: reconcile.NewMetrics(),
		Audit:   reconcile.NewAuditLog(h.audit, "test", reconcile.Shard{}),
		Log:     slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	return h
}

// start runs the loop until the test ends (or stop is called) and waits for
// its first pass.
func (h *loopHarness) start(t *testing.T) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h.loop().Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-errc })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	h.waitFor(t, 10*time.Second, "the first pass", func() bool { return h.metric(t, "devata_reconcile_passes_total", `result="ok"`) >= 1 })
	return stop
}

func (h *loopHarness) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\nlogs:\n%s\naudit:\n%s", what, h.logs, h.audit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *loopHarness) inSync(t *testing.T, machine string) bool {
	o := talosapi.Observe(context.Background(), h.f.Dialer, h.f.Inventory.Machine(machine))
	d, err := talosapi.DiffConfigs(o.Active, h.f.Desired[machine])
	return o.Err == nil && err == nil && d.Equal
}

// writes counts the configuration writes (dry runs excluded) a machine received.
func writes(m *sim.Machine) int {
	return m.Calls("ApplyConfiguration") - m.Calls("ApplyConfiguration(dry-run)")
}

func scrape(t *testing.T, m *reconcile.Metrics, path string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(m.Handler(nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric sums the samples of name whose labels contain every given label.
func (h *loopHarness) metric(t *testing.T, name string, labels ...string) float64 {
	_, text := scrape(t, h.opts.Metrics, "/metrics")
	return sample(text, name, labels...)
}

func sample(text, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += f
		}
	}
	return sum
}

func TestDriftInjectedWhileRunningIsCorrectedWithinOneInterval(t *testing.T) {
	h := newLoop(t, nil)
	h.start(t)
	for _, m := range []string{"worker-1", "cp-2"} {
		h.f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	injected := time.Now()
	before := h.metric(t, "devata_reconcile_passes_total")
	h.waitFor(t, 15*time.Second, "worker-1 and cp-2 to converge", func() bool { return h.inSync(t, "worker-1") && h.inSync(t, "cp-2") })
	took := time.Since(injected)
	// The pass running when the drift came may have observed before it; the
	// next one, started at most one interval later, must correct it.
	if passes := h.metric(t, "devata_reconcile_passes_total") - before; passes > 2 {
		t.Errorf("corrected after %v passes (%s), want within the next pass", passes, took)
	}
	t.Logf("corrected %s after the drift (interval %s)", took.Round(time.Millisecond), h.opts.Interval)
	// cp-2's action ends with the etcd gate after it.
	h.waitFor(t, 10*time.Second, "both actions to end", func() bool {
		return strings.Count(h.audit.String(), `"result":"converged"`) == 2
	})
	got := map[string]string{}
	for _, r := range h.audit.records(t) {
		got[r.Machine] += r.Result + " "
		if r.Diff == "" || r.Reason == "" || r.Action != "apply" {
			t.Errorf("audit record lacks action, reason or diff: %+v", r)
		}
	}
	for _, m := range []string{"worker-1", "cp-2"} {
		if got[m] != "started converged " {
			t.Errorf("%s audit: %q, want started then converged", m, got[m])
		}
	}
	if !strings.Contains(h.logs.String(), "gate before cp-2: etcd healthy") {
		t.Errorf("cp-2 was changed without the etcd gate:\n%s", h.logs)
	}
	// Level-triggered and idempotent: a fleet in sync sees no more writes.
	n := 0
	for _, m := range h.f.Sim.Machines() {
		n += writes(m)
	}
	start := h.metric(t, "devata_reconcile_passes_total")
	h.waitFor(t, 5*time.Second, "three more passes", func() bool { return h.metric(t, "devata_reconcile_passes_total") >= start+3 })
	m := 0
	for _, mm := range h.f.Sim.Machines() {
		m += writes(mm)
	}
	if m != n {
		t.Errorf("%d writes to a fleet in sync", m-n)
	}
}

func TestStopDuringAnApplyLeavesNothingUnreported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		// latency slows worker-2 so that the grace period cannot cover its change.
		latency time.Duration
		final   string
	}{
		{name: "finished", grace: 10 * time.Second, final: reconcile.ResultConverged},
		{name: "abandoned", grace: 50 * time.Millisecond, latency: 300 * time.Millisecond, final: reconcile.ResultAbandoned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newLoop(t, nil)
			h.opts.Grace = tc.grace
			stop := h.start(t)
			// A change that reboots worker-2, so the change takes a while.
			h.f.Drift(t, "worker-2", "diskQuotaSupport: true", "diskQuotaSupport: false")
			if tc.latency > 0 {
				m := h.f.Sim.Machine("worker-2")
				f := m.Faults()
				f.Latency = tc.latency
				m.SetFaults(f)
			}
			started := make(chan struct{})
			var once sync.Once
			h.audit.setHook(func(p []byte) {
				if bytes.Contains(p, []byte(`"result":"started"`)) {
					once.Do(func() { close(started) })
				}
			})
			select {
			case <-started:
			case <-time.After(15 * time.Second):
				t.Fatalf("no change started\n%s", h.logs)
			}
			stopped := time.Now()
			if err := stop(); err != nil { // SIGTERM
				t.Fatalf("Run returned %v, want nil", err)
			}
			if took := time.Since(stopped); took > tc.grace+5*time.Second {
				t.Errorf("stop took %s with a grace of %s", took, tc.grace)
			}
			var results []string
			for _, r := range h.audit.records(t) {
				if r.Machine == "worker-2" {
					results = append(results, r.Result)
				}
			}
			if len(results) < 2 || results[0] != reconcile.ResultStarted || results[1] != tc.final {
				t.Fatalf("worker-2 audit %v, want started then %s\n%s", results, tc.final, h.logs)
			}
			if tc.final == reconcile.ResultConverged && !h.inSync(t, "worker-2") {
				t.Error("worker-2 was reported converged but is not")
			}
		})
	}
}

func TestOnceDryRunAndReportOnlyWriteNothing(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	m := f.Sim.Machine("worker-1")

	h := newLoop(t, f)
	h.opts.ReportOnly = true
	res := h.loop().Once(context.Background())
	if res.ExitCode() != 1 || len(res.Queued) != 0 || m.Calls("ApplyConfiguration") != 0 {
		t.Errorf("report-only: exit %d, queued %v, %d apply calls", res.ExitCode(), res.Queued, m.Calls("ApplyConfiguration"))
	}

	h = newLoop(t, f)
	h.opts.DryRun = true
	res = h.loop().Once(context.Background())
	if res.ExitCode() != 1 || res.Outcomes["worker-1"] != reconcile.OutcomeDryRun || writes(m) != 0 {
		t.Errorf("dry run: exit %d, outcomes %v, %d writes", res.ExitCode(), res.Outcomes, writes(m))
	}
	if r := h.audit.records(t); len(r) != 1 || r[0].Result != reconcile.ResultDryRun || r[0].Machine != "worker-1" {
		t.Errorf("dry-run audit: %+v", r)
	}

	h = newLoop(t, f)
	res = h.loop().Once(context.Background())
	if res.ExitCode() != 0 || res.Outcomes["worker-1"] != reconcile.OutcomeConverged || writes(m) != 1 {
		t.Errorf("once: exit %d, outcomes %v, %d writes\n%s", res.ExitCode(), res.Outcomes, writes(m), h.logs)
	}
}

func TestMetricsEndpointCarriesTheSeries(t *testing.T) {
	h := newLoop(t, nil)
	h.f.Sim.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.start(t)
	h.waitFor(t, 10*time.Second, "worker-1 to converge", func() bool { return h.inSync(t, "worker-1") })
	h.waitFor(t, 10*time.Second, "a retry and the action counted", func() bool {
		return h.metric(t, "workqueue_retries_total") >= 1 && h.metric(t, "devata_reconcile_actions_total", `result="converged"`) == 1
	})
	code, text := scrape(t, h.opts.Metrics, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`devata_drift_status{check="config",cluster="homelab",machine="cp-1",rung="reconciliation",status="InSync"} 1`,
		`devata_drift_status{check="config",cluster="homelab",machine="worker-2",rung="reconciliation",status="Unknown"} 1`,
		`devata_reconcile_pass_duration_seconds_count`,
		`devata_reconcile_actions_total{kind="apply",result="converged"} 1`,
		`devata_reconcile_machine_failures{machine="worker-2"}`,
		`devata_reconcile_machine_backoff_seconds{machine="worker-2"}`,
		`devata_reconcile_inventory_valid 1`,
		`devata_reconcile_gate_blocked 0`,
		`workqueue_depth{name="devata"}`,
		`workqueue_adds_total{name="devata"}`,
		`workqueue_queue_duration_seconds_bucket{name="devata"`,
		`workqueue_work_duration_seconds_count{name="devata"}`,
		`workqueue_unfinished_work_seconds{name="devata"}`,
		`workqueue_longest_running_processor_seconds{name="devata"}`,
		`workqueue_retries_total{name="devata"}`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Present at 0 from the start: these must have counted.
	for _, c := range [][]string{
		{"devata_reconcile_passes_total", `result="ok"`},
		{"devata_reconcile_errors_total", `stage="plan"`},
		{"devata_reconcile_errors_total", `stage="observe"`},
	} {
		if v := sample(text, c[0], c[1]); v < 1 {
			t.Errorf("%s{%s} = %v, want at least 1", c[0], c[1], v)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := scrape(t, h.opts.Metrics, path); code != http.StatusOK {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	srv := httptest.NewServer(h.opts.Metrics.Handler(func() error { return os.ErrNotExist }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz when not ready: %d", resp.StatusCode)
	}
}
