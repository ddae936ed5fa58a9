package reconcile_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
	"devata.dev/devata/storagecheck"
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
	f     *simtest.Fleet
	loop  *reconcile.Loop
	audit *syncBuffer
	logs  *syncBuffer
}

// The checks that need no Kubernetes API.
var talosChecks = []string{machines.CheckConfig, machines.CheckTalosVersion, machines.CheckMachineStage, machines.CheckEtcd}

func newLoop(t *testing.T, f *simtest.Fleet) *loopHarness {
	t.Helper()
	if f == nil {
		f = simtest.Start(t, simtest.Options{Bootstrap: true})
	}
	h := &loopHarness{f: f, audit: &syncBuffer{}, logs: &syncBuffer{}}
	h.loop = &reconcile.Loop{
		Source: reconcile.FileSource(f.Inventory.Path), Dialer: f.Dialer, Checks: talosChecks,
		Interval: 200 * time.Millisecond, Mode: machines.ModeAuto, MaxUnavailable: 1, Concurrency: 8,
		Timeout: 5 * time.Second, Wait: 5 * time.Second, Poll: 20 * time.Millisecond, Grace: 5 * time.Second,
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
	go func() { errc <- h.loop.Run(ctx) }()
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
	o := machines.Observe(context.Background(), h.f.Dialer, h.f.Inventory.Machine(machine))
	d, err := machines.DiffConfigs(o.Active, h.f.Desired[machine])
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
	_, text := scrape(t, h.loop.Metrics, "/metrics")
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
	t.Logf("corrected %s after the drift (interval %s)", took.Round(time.Millisecond), h.loop.Interval)
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
		want := h.loop.BackoffBase << (i - 1)
		if gap := times[i].Sub(times[i-1]); gap < want*9/10 {
			t.Errorf("retry %d came %s after the one before, want at least %s", i+1, gap, want)
		}
	}
	if skipped < 1 {
		t.Errorf("only %d passes left worker-2 to its backoff", skipped)
	}
	_, text := scrape(t, h.loop.Metrics, "/metrics")
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

func TestInvalidInventoryEditKeepsTheLastValidOne(t *testing.T) {
	h := newLoop(t, nil)
	h.start(t)
	good, err := os.ReadFile(h.f.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(good), "machines:", "machnes:", 1)
	if err := os.WriteFile(h.f.Inventory.Path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, 5*time.Second, "the invalid edit to be reported", func() bool {
		return strings.Contains(h.logs.String(), "inventory is invalid: the last valid one stays in force")
	})
	if v := h.metric(t, "devata_reconcile_inventory_valid"); v != 0 {
		t.Errorf("devata_reconcile_inventory_valid %v, want 0", v)
	}
	if !strings.Contains(h.logs.String(), "machnes") {
		t.Errorf("the log does not say what is wrong:\n%s", h.logs)
	}
	if err := h.loop.Ready(); err != nil {
		t.Errorf("not ready on the last valid inventory: %v", err)
	}
	// Still reconciling, on the last valid inventory.
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.waitFor(t, 10*time.Second, "worker-1 to converge on the last valid inventory", func() bool { return h.inSync(t, "worker-1") })

	if err := os.WriteFile(h.f.Inventory.Path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, 5*time.Second, "the fixed inventory to be taken", func() bool {
		return h.metric(t, "devata_reconcile_inventory_valid") == 1
	})
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
			h.loop.Grace = tc.grace
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

func TestFailedGateStopsChangesAndIsReportedEveryPassUntilItClears(t *testing.T) {
	h := newLoop(t, nil)
	h.loop.Wait = 300 * time.Millisecond
	h.start(t)
	cp3 := h.f.Sim.Machine("cp-3")
	cp3.SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"EtcdStatus": codes.Unavailable, "EtcdMemberList": codes.Unavailable}})
	h.f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	h.waitFor(t, 10*time.Second, "the gate to block", func() bool { return h.metric(t, "devata_reconcile_gate_blocked") == 1 })
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	before := writes(h.f.Sim.Machine("worker-1"))
	h.waitFor(t, 10*time.Second, "three passes reporting the gate", func() bool {
		return strings.Count(h.logs.String(), "rollout stopped by a failed gate") >= 3
	})
	if writes(h.f.Sim.Machine("worker-1")) != before || writes(h.f.Sim.Machine("cp-2")) != 0 {
		t.Fatal("a machine was changed while the gate failed")
	}
	cp3.SetFaults(sim.Faults{})
	h.waitFor(t, 15*time.Second, "cp-2 and worker-1 to converge after the gate cleared", func() bool {
		return h.inSync(t, "cp-2") && h.inSync(t, "worker-1")
	})
	if v := h.metric(t, "devata_reconcile_gate_blocked"); v != 0 {
		t.Errorf("gate still reported blocked: %v", v)
	}
	var blocked bool
	for _, r := range h.audit.records(t) {
		blocked = blocked || r.Machine == "cp-2" && r.Result == reconcile.ResultBlocked && strings.Contains(r.Error, "gate failed")
	}
	if !blocked {
		t.Errorf("the blocked change is not in the audit log:\n%s", h.audit)
	}
}

func TestOnceDryRunAndReportOnlyWriteNothing(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	m := f.Sim.Machine("worker-1")

	h := newLoop(t, f)
	h.loop.ReportOnly = true
	res := h.loop.Once(context.Background())
	if res.ExitCode() != 1 || len(res.Queued) != 0 || m.Calls("ApplyConfiguration") != 0 {
		t.Errorf("report-only: exit %d, queued %v, %d apply calls", res.ExitCode(), res.Queued, m.Calls("ApplyConfiguration"))
	}

	h = newLoop(t, f)
	h.loop.DryRun = true
	res = h.loop.Once(context.Background())
	if res.ExitCode() != 1 || res.Outcomes["worker-1"] != reconcile.OutcomeDryRun || writes(m) != 0 {
		t.Errorf("dry run: exit %d, outcomes %v, %d writes", res.ExitCode(), res.Outcomes, writes(m))
	}
	if r := h.audit.records(t); len(r) != 1 || r[0].Result != reconcile.ResultDryRun || r[0].Machine != "worker-1" {
		t.Errorf("dry-run audit: %+v", r)
	}

	h = newLoop(t, f)
	res = h.loop.Once(context.Background())
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
	code, text := scrape(t, h.loop.Metrics, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`devata_drift_status{check="config",cluster="homelab",machine="cp-1",rung="reconciliation",status="InSync"} 1`,
		`devata_drift_status{check="config",cluster="homelab",machine="worker-2",rung="reconciliation",status="Unknown"} 1`,
		`devata_reconcile_pass_duration_seconds_count`,
		`devata_reconcile_passes_total{result="ok"}`,
		`devata_reconcile_actions_total{kind="apply",result="converged"} 1`,
		`devata_reconcile_errors_total{stage="plan"}`,
		`devata_reconcile_errors_total{stage="observe"}`,
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
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := scrape(t, h.loop.Metrics, path); code != http.StatusOK {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	srv := httptest.NewServer(h.loop.Metrics.Handler(func() error { return os.ErrNotExist }))
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

// Two shards between them observe and fix the whole fleet, each only its own
// machines, and only shard 0 touches control planes.
func TestShardsSplitTheFleet(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	for _, m := range []string{"cp-2", "worker-1", "worker-2"} {
		f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	seen := map[string]int{}
	for i := range 2 {
		h := newLoop(t, f)
		h.loop.Shard = reconcile.Shard{Index: i, Count: 2}
		res := h.loop.Once(context.Background())
		if res.ExitCode() != 0 {
			t.Errorf("shard %d: exit %d, outcomes %v\n%s", i, res.ExitCode(), res.Outcomes, h.logs)
		}
		for _, m := range res.Report.Machines {
			seen[m.Name]++
			if mm := f.Inventory.Machine(m.Name); !h.loop.Shard.Owns(mm) || mm.IsControlPlane() && i != 0 {
				t.Errorf("shard %d observed %s", i, m.Name)
			}
		}
		for _, r := range h.audit.records(t) {
			if !h.loop.Shard.Owns(f.Inventory.Machine(r.Machine)) {
				t.Errorf("shard %d acted on %s", i, r.Machine)
			}
		}
	}
	for _, m := range f.Inventory.Machines {
		if seen[m.Name] != 1 {
			t.Errorf("%s observed by %d shards", m.Name, seen[m.Name])
		}
		h := &loopHarness{f: f}
		if !h.inSync(t, m.Name) {
			t.Errorf("%s not converged", m.Name)
		}
	}
}

// The checks that ride on the machine checks' connection (storage, Cilium)
// are part of every pass's report when the Loop is given them.
func TestPassesCarryTheExtensionChecks(t *testing.T) {
	h := newLoop(t, nil)
	h.loop.Checks = append(slices.Clone(talosChecks), "storage-volumes")
	h.loop.Extensions = func(*inventory.Inventory) []machines.Extension { return []machines.Extension{storagecheck.Extension()} }
	res := h.loop.Once(context.Background())
	n := 0
	for _, r := range res.Report.Results {
		if r.Check == "storage-volumes" && r.Status == drift.StatusInSync {
			n++
		}
	}
	if n != len(h.f.Inventory.Machines) || res.ExitCode() != 0 {
		t.Errorf("exit %d, %d storage-volumes results in sync, want %d", res.ExitCode(), n, len(h.f.Inventory.Machines))
	}
}

// Past LeanAbove machines the spec holds no configs: the pass renders each
// where it observes or changes it, and converges all the same.
func TestLeanDesiredConverges(t *testing.T) {
	before := reconcile.LeanAbove
	reconcile.LeanAbove = 0
	defer func() { reconcile.LeanAbove = before }()
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	m := f.Sim.Machine("worker-1")
	h := newLoop(t, f)
	res := h.loop.Once(context.Background())
	if res.ExitCode() != 0 || res.Outcomes["worker-1"] != reconcile.OutcomeConverged || writes(m) != 1 {
		t.Fatalf("lean once: exit %d, outcomes %v, %d writes\n%s", res.ExitCode(), res.Outcomes, writes(m), h.logs)
	}
	res = h.loop.Once(context.Background())
	if res.ExitCode() != 0 || len(res.Queued) != 0 || writes(m) != 1 {
		t.Errorf("second lean pass: exit %d, queued %v, %d writes", res.ExitCode(), res.Queued, writes(m))
	}
}

// An operator's `talosctl apply-config --mode try` is pending on worker-1.
// Any ApplyConfiguration but TRY, dry runs included, cancels its rollback
// (Talos v1.11.0 internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// ApplyConfiguration: CancelConfigRollbackTimeout), so reconcile leaves the
// machine alone, says why, and the try still rolls back on its own.
func TestOnceLeavesAPendingTryAlone(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	m := f.Sim.Machine("worker-1")
	tried := []byte(strings.Replace(string(f.Desired["worker-1"]), "time.cloudflare.com", "pool.ntp.org", 1))
	c, err := f.Dialer.Client(context.Background(), f.Inventory.Machine("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := machines.Apply(context.Background(), c, tried, machines.ModeTry, 3*time.Second); err != nil {
		t.Fatalf("try: %v", err)
	}
	before := m.Calls("ApplyConfiguration")

	h := newLoop(t, f)
	res := h.loop.Once(context.Background())
	if res.ExitCode() != 1 || res.Outcomes["worker-1"] != reconcile.OutcomeHeld {
		t.Errorf("once: exit %d, outcomes %v, want worker-1 held\n%s", res.ExitCode(), res.Outcomes, h.logs)
	}
	if n := m.Calls("ApplyConfiguration") - before; n != 0 {
		t.Errorf("%d ApplyConfiguration calls (dry runs included) reached worker-1 with a try pending", n)
	}
	if !strings.Contains(h.logs.String(), "a `--mode try` waiting for its rollback") {
		t.Errorf("the log does not say why worker-1 was left alone:\n%s", h.logs)
	}
	// the try was not made permanent: it rolls back, then reconcile has nothing to do there
	h.waitFor(t, 10*time.Second, "the try's rollback", func() bool { return h.inSync(t, "worker-1") })
}

// Probe 1 of issue 15: a control plane's change was applied from a plan
// made before it took the change lock. cp-2 and cp-3 drift; while the
// first of them is being changed, the other (planned, waiting for the
// lock) is put back to its desired config behind the loop's back. Once its
// change holds the lock it plans again, finds it in sync and sends nothing.
func TestAControlPlaneIsPlannedAgainOnceItHoldsTheChangeLock(t *testing.T) {
	h := newLoop(t, nil)
	f := h.f
	writes := func(m string) int {
		return f.Sim.Machine(m).Calls("ApplyConfiguration") - f.Sim.Machine(m).Calls("ApplyConfiguration(dry-run)")
	}
	dryRuns := func(m string) int { return f.Sim.Machine(m).Calls("ApplyConfiguration(dry-run)") }
	f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	f.Drift(t, "cp-3", "time.cloudflare.com", "pool.ntp.org")
	base := map[string]int{"cp-2": writes("cp-2"), "cp-3": writes("cp-3")}
	first, other := "", ""
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if dryRuns("cp-2") > 0 && dryRuns("cp-3") > 0 {
				for _, pair := range [][2]string{{"cp-2", "cp-3"}, {"cp-3", "cp-2"}} {
					if writes(pair[0]) > base[pair[0]] && writes(pair[1]) == base[pair[1]] {
						first, other = pair[0], pair[1]
						faults := f.Sim.Machine(other).Faults()
						faults.DriftedConfig = f.Desired[other]
						f.Sim.Machine(other).SetFaults(faults)
						return
					}
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	h.start(t)
	<-done
	if first == "" {
		t.Fatal("never saw one control plane changed while the other waited, planned")
	}
	for _, m := range []string{"cp-2", "cp-3"} {
		h.waitFor(t, 10*time.Second, m+" in sync", func() bool { return h.inSync(t, m) })
	}
	if n := writes(other) - base[other]; n != 0 {
		t.Errorf("%s was written %d times from a plan made before it held the change lock", other, n)
	}
	if n := writes(first) - base[first]; n != 1 {
		t.Errorf("%s written %d times, want 1", first, n)
	}
}

// A pass changes its control planes before any worker (docs/reconcile.md;
// issue 17 saw worker-1 applied before cp-2): with a control plane slow to
// plan, a worker queued after it still waits until it is done, gate
// included.
func TestAPassChangesControlPlanesBeforeWorkers(t *testing.T) {
	h := newLoop(t, nil)
	h.loop.Workers = 4
	for _, m := range []string{"cp-2", "worker-1", "worker-2"} {
		h.f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	faults := h.f.Sim.Machine("cp-2").Faults()
	faults.Latency = 150 * time.Millisecond
	h.f.Sim.Machine("cp-2").SetFaults(faults)
	res := h.loop.Once(context.Background())
	for _, m := range []string{"cp-2", "worker-1", "worker-2"} {
		if res.Outcomes[m] != reconcile.OutcomeConverged {
			t.Fatalf("%s: %q, want converged\n%s", m, res.Outcomes[m], h.logs.String())
		}
	}
	var cpDone time.Time
	for _, r := range h.audit.records(t) {
		if r.Machine == "cp-2" && r.Result != reconcile.ResultStarted {
			cpDone = r.Time
		}
	}
	for _, r := range h.audit.records(t) {
		if r.Machine != "cp-2" && r.Result == reconcile.ResultStarted && (cpDone.IsZero() || r.Time.Before(cpDone)) {
			t.Errorf("%s started at %s, before cp-2 was done (%s)", r.Machine, r.Time.Format(time.StampMicro), cpDone.Format(time.StampMicro))
		}
	}
}

// failAfter accepts n writes, then fails every one, as a disk that fills.
type failAfter struct {
	mu sync.Mutex
	n  int
}

func (w *failAfter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		return 0, errors.New("no space left on device")
	}
	w.n--
	return len(p), nil
}

// The audit log fails closed after a change too: when a change's final
// record cannot be written, the pass makes no further change and says why.
func TestAChangeWhoseFinalRecordIsLostStopsThePass(t *testing.T) {
	h := newLoop(t, nil)
	h.loop.Workers, h.loop.Concurrency = 1, 1
	h.loop.Audit = reconcile.NewAuditLog(&failAfter{n: 1}, "test", reconcile.Shard{})
	for _, m := range []string{"worker-1", "worker-2"} {
		h.f.Drift(t, m, "time.cloudflare.com", "pool.ntp.org")
	}
	res := h.loop.Once(context.Background())
	changed := 0
	for _, m := range []string{"worker-1", "worker-2"} {
		if res.Outcomes[m] == reconcile.OutcomeConverged {
			changed++
			if !strings.Contains(res.Errors[m], "audit record could not be written") {
				t.Errorf("%s converged without its record and says %q", m, res.Errors[m])
			}
		}
	}
	if changed != 1 || !strings.Contains(res.Blocked, "could not be written") {
		t.Fatalf("%d workers changed, blocked %q: want one, then the pass stopped\n%v", changed, res.Blocked, res.Outcomes)
	}
	if res.ExitCode() == 0 {
		t.Error("a pass that lost an audit record exits 0")
	}
}
