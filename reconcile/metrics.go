package reconcile

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/util/workqueue"

	"devata.dev/devata/drift"
	"devata.dev/devata/provenance"
)

// Metrics are the loop's Prometheus series, on a registry of their own (no
// global state, so two loops in one test process do not collide):
//
//	devata_drift_status{cluster,machine,check,rung,status}     one-hot per check, as the drift textfile has it
//	devata_reconcile_pass_duration_seconds                     histogram of whole passes
//	devata_reconcile_passes_total{result}                      ok, inventory-invalid, blocked, interrupted
//	devata_reconcile_last_pass_timestamp_seconds               when the last pass ended
//	devata_reconcile_actions_total{kind,result}                kind apply, upgrade, join, sync-bootstrap-manifests; result converged, failed, blocked, interrupted, dry-run, abandoned
//	devata_reconcile_errors_total{stage}                       inventory, observe, plan, apply, gate, audit
//	devata_reconcile_machine_failures{machine}                 consecutive failed syncs (0 once it succeeds)
//	devata_reconcile_machine_backoff_seconds{machine}          the delay before its next retry
//	devata_reconcile_inventory_valid                           0 while the last edit is invalid (the last valid one is in force)
//	devata_inventory_info{cluster,commit,dirty,sha256}         1, naming the inventory in force, as the drift textfile has it
//	devata_reconcile_gate_blocked                              1 while a failed gate stops every change
//	devata_reconcile_leader                                    1 while this instance acts
//	devata_reconcile_machine_held{machine,by}                  1 while the inventory holds a machine's change back: by hold, or window
//	workqueue_{depth,adds_total,queue_duration_seconds,work_duration_seconds,
//	  unfinished_work_seconds,longest_running_processor_seconds,retries_total}{name}
//	                                                            client-go's work queue metrics
type Metrics struct {
	Registry *prometheus.Registry

	drift          *driftCollector
	passDuration   prometheus.Histogram
	passes         *prometheus.CounterVec
	lastPass       prometheus.Gauge
	actions        *prometheus.CounterVec
	errors         *prometheus.CounterVec
	failures       *prometheus.GaugeVec
	backoff        *prometheus.GaugeVec
	inventoryValid prometheus.Gauge
	inventory      *inventoryInfo
	gateBlocked    prometheus.Gauge
	leader         prometheus.Gauge
	held           *prometheus.GaugeVec
	queue          *queueMetrics
}

// The values of devata_reconcile_passes_total's result label.
const (
	passOK               = "ok"
	passBlocked          = "blocked"
	passInventoryInvalid = "inventory-invalid"
	passInterrupted      = "interrupted"
)

// The values of devata_reconcile_errors_total's stage label.
const (
	stageInventory = "inventory"
	stageObserve   = "observe"
	stagePlan      = "plan"
	stageApply     = "apply"
	stageGate      = "gate"
	stageAudit     = "audit"
)

// NewMetrics registers every series (with Go and process collectors).
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		drift:    &driftCollector{desc: prometheus.NewDesc("devata_drift_status", "Status of one check on one machine in the last pass: 1 for its current status, 0 for the others.", []string{"cluster", "machine", "check", "rung", "status"}, nil)},
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "devata_reconcile_pass_duration_seconds", Help: "Duration of a reconcile pass: reading the inventory, observing, and the actions it queued.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}),
		passes:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "devata_reconcile_passes_total", Help: "Reconcile passes by result."}, []string{"result"}),
		lastPass:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "devata_reconcile_last_pass_timestamp_seconds", Help: "Unix time the last pass ended."}),
		actions:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "devata_reconcile_actions_total", Help: "Actions by kind and result."}, []string{"kind", "result"}),
		errors:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "devata_reconcile_errors_total", Help: "Errors by stage."}, []string{"stage"}),
		failures:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "devata_reconcile_machine_failures", Help: "Consecutive failed syncs of a machine; 0 once one succeeds."}, []string{"machine"}),
		backoff:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "devata_reconcile_machine_backoff_seconds", Help: "Delay before a failing machine is retried (exponential per machine)."}, []string{"machine"}),
		inventoryValid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "devata_reconcile_inventory_valid", Help: "1 when the inventory read last is valid; 0 when it is not and the last valid one stays in force."}),
		inventory: &inventoryInfo{desc: prometheus.NewDesc(drift.InventoryInfo, drift.InventoryInfoHelp,
			append([]string{"cluster"}, drift.InventoryInfoLabels()...), nil)},
		held:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "devata_reconcile_machine_held", Help: "1 while the inventory holds a machine's pending change back: by hold (machines[].hold) or window (it waits for a maintenance window)."}, []string{"machine", "by"}),
		gateBlocked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "devata_reconcile_gate_blocked", Help: "1 while a failed gate (etcd quorum and health) stops every change."}),
		leader:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "devata_reconcile_leader", Help: "1 while this instance is the one that acts."}),
		queue:       newQueueMetrics(),
	}
	// Every known label value is present at 0 from the start, so that
	// increase() and rate() over them (the alerts in deploy/monitoring) see
	// the first pass that is not ok, the first error and the first action.
	for _, result := range []string{ResultConverged, ResultFailed, ResultBlocked, ResultInterrupted, ResultDryRun, ResultAbandoned} {
		for _, kind := range []Kind{KindApply, KindUpgrade, KindJoin, ActionSyncManifests} {
			m.actions.WithLabelValues(string(kind), result)
		}
	}
	for _, result := range []string{passOK, passBlocked, passInventoryInvalid, passInterrupted} {
		m.passes.WithLabelValues(result)
	}
	for _, stage := range []string{stageInventory, stageObserve, stagePlan, stageApply, stageGate, stageAudit} {
		m.errors.WithLabelValues(stage)
	}
	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.drift, m.passDuration, m.passes, m.lastPass, m.actions, m.errors,
		m.failures, m.backoff, m.inventoryValid, m.inventory, m.gateBlocked, m.leader, m.held,
	)
	m.queue.register(r)
	return m
}

// Handler serves /metrics, /healthz (the process answers) and /readyz
// (ready returns nil, or says why not).
func (m *Metrics) Handler(ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// SetLeader records whether this instance acts.
func (m *Metrics) SetLeader(leading bool) {
	if m == nil {
		return
	}
	m.leader.Set(b2f(leading))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// driftCollector exposes the last pass's results as a whole: a scrape never
// sees a half-updated pass, and machines that left the inventory vanish.
type driftCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	cluster string
	results []drift.Result
}

func (c *driftCollector) set(cluster string, rs []drift.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cluster, c.results = cluster, rs
}

func (c *driftCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *driftCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	type key struct{ machine, check, rung string }
	worst := map[key]drift.Status{}
	var order []key
	for _, r := range c.results {
		k := key{r.Machine, r.Check, string(r.Rung)}
		s, seen := worst[k]
		if !seen {
			order = append(order, k)
			s = r.Status
		}
		worst[k] = drift.Worse(s, r.Status)
	}
	for _, k := range order {
		for _, s := range []drift.Status{drift.StatusInSync, drift.StatusDrifted, drift.StatusUnknown} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, b2f(worst[k] == s), c.cluster, k.machine, k.check, k.rung, string(s))
		}
	}
}

// inventoryInfo is devata_inventory_info for the inventory in force: one
// series, replaced whole when another inventory is taken, absent until one
// with provenance is.
type inventoryInfo struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	labels []string // label values, in desc's order; nil: no series
}

func (c *inventoryInfo) set(cluster string, pv provenance.Info) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.labels = nil
	if !pv.IsZero() {
		c.labels = append([]string{cluster}, drift.InventoryInfoValues(pv)...)
	}
}

func (c *inventoryInfo) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *inventoryInfo) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.labels != nil {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, c.labels...)
	}
}

// queueMetrics is a workqueue.MetricsProvider over Prometheus vectors
// labelled by queue name, with the series names Kubernetes components use.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = (*queueMetrics)(nil)

func newQueueMetrics() *queueMetrics {
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	return &queueMetrics{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of the work queue."}, []string{"name"}),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Adds handled by the work queue."}, []string{"name"}),
		latency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "Seconds an item stays in the queue before being requested.", Buckets: buckets}, []string{"name"}),
		work:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: "Seconds processing an item from the queue takes.", Buckets: buckets}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, []string{"name"}),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "Seconds the longest running processor has been running."}, []string{"name"}),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Retries (rate-limited re-adds) handled by the work queue."}, []string{"name"}),
	}
}

func (q *queueMetrics) register(r prometheus.Registerer) {
	r.MustRegister(q.depth, q.adds, q.latency, q.work, q.unfinished, q.longest, q.retries)
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}

// setHeld records whether machine's pending change is held back, and by
// what (Action.HeldBy; "" when it is not).
func (m *Metrics) setHeld(machine, by string) {
	for _, b := range []string{HeldByHold, HeldByWindow} {
		if b == by {
			m.held.WithLabelValues(machine, b).Set(1)
		} else {
			m.held.DeleteLabelValues(machine, b)
		}
	}
}
