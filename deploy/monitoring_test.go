package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	"devata.dev/devata/backup"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/machines"
	"devata.dev/devata/provenance"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

const (
	dashboardFile = "monitoring/devata-dashboard.json"
	rulesFile     = "monitoring/prometheusrule.yaml"
)

// query is one PromQL expression of the dashboard or the rules, and where
// it is.
type query struct{ where, expr string }

// Every metric the dashboard and the alerts query is one devata exports: a
// renamed or removed series fails here, not on a blank panel or a silent
// alert.
func TestMonitoringQueriesOnlyExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	queries := append(dashboardQueries(t), ruleQueries(t)...)
	if len(queries) < 10 {
		t.Fatalf("only %d queries found in %s and %s: the test would prove little", len(queries), dashboardFile, rulesFile)
	}
	used := map[string]bool{}
	for _, q := range queries {
		unknown, names, err := unknownMetrics(q.expr, exported)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(names) == 0 && !strings.HasPrefix(q.where, dashboardFile+": variable") {
			t.Errorf("%s queries no metric: %s", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = true
		}
		for _, n := range unknown {
			t.Errorf("%s queries %s, which devata does not export (reconcile's /metrics and the drift textfile have no such series; histograms are _bucket, _sum and _count): %s", q.where, n, q.expr)
		}
	}
	// What the brief of the dashboard and the alerts promises.
	for _, want := range []string{
		"devata_drift_status", "devata_reconcile_pass_duration_seconds_bucket", "devata_reconcile_actions_total",
		"devata_reconcile_machine_backoff_seconds", "devata_reconcile_leader", "devata_reconcile_gate_blocked",
		"devata_reconcile_errors_total",
		backup.MetricLastSuccess, backup.MetricLastVerified, backup.MetricVerifiedRevision, backup.MetricSize,
	} {
		if !used[want] {
			t.Errorf("neither the dashboard nor the alerts query %s", want)
		}
	}
}

// The check above fails on a metric devata does not have, and only then.
func TestUnknownMetrics(t *testing.T) {
	exported := map[string]bool{
		"devata_reconcile_passes_total": true, "devata_drift_status": true,
		"devata_reconcile_pass_duration_seconds_bucket": true,
	}
	for _, c := range []struct {
		name, expr     string
		names, unknown []string
	}{
		{"known", `sum by (result) (increase(devata_reconcile_passes_total{job=~"$job"}[$__rate_interval]))`,
			[]string{"devata_reconcile_passes_total"}, nil},
		{"typo", `rate(devata_reconcile_passes_totl[5m])`,
			[]string{"devata_reconcile_passes_totl"}, []string{"devata_reconcile_passes_totl"}},
		{"a histogram by its family name", `histogram_quantile(0.9, sum by (le) (rate(devata_reconcile_pass_duration_seconds[5m])))`,
			[]string{"devata_reconcile_pass_duration_seconds"}, []string{"devata_reconcile_pass_duration_seconds"}},
		{"one known, one not, in a binary operation", `devata_drift_status{status="Drifted"} * on (machine) group_left (role) devata_drift_machine_role`,
			[]string{"devata_drift_status", "devata_drift_machine_role"}, []string{"devata_drift_machine_role"}},
		{"label names and values are not metrics", `max without (instance, pod) (devata_drift_status{check="devata_unknown",rung!~'x|y'} offset 5m) > bool 0`,
			[]string{"devata_drift_status"}, nil},
		{"Grafana's label_values", `label_values(devata_drift_status{job=~"$job"}, cluster)`,
			[]string{"devata_drift_status"}, nil},
		{"label_values of an unknown metric", `label_values(devata_reconcile_lead, job)`,
			[]string{"devata_reconcile_lead"}, []string{"devata_reconcile_lead"}},
		{"up is Prometheus', not devata's", `absent(up{job="devata-metrics"}) or vector(0)`,
			[]string{"up"}, []string{"up"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			unknown, names, err := unknownMetrics(c.expr, exported)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names, c.names) || !slices.Equal(unknown, c.unknown) {
				t.Errorf("%s: metrics %q, unknown %q; want %q, %q", c.expr, names, unknown, c.names, c.unknown)
			}
		})
	}
	for _, bad := range []string{`devata_drift_status{status="Drifted}`, `sum(rate(x[5m])`, `label_values(`} {
		if _, _, err := unknownMetrics(bad, exported); err == nil {
			t.Errorf("%s: no error; a broken query must not pass for one without unknown metrics", bad)
		}
	}
}

// unknownMetrics returns the metric names expr selects, and those of them
// that exported lacks, in the order they appear.
func unknownMetrics(expr string, exported map[string]bool) (unknown, names []string, err error) {
	if m := regexp.MustCompile(`^\s*label_values\((.*)\)\s*$`).FindStringSubmatch(expr); m != nil {
		// Grafana's label_values(label) or label_values(selector, label).
		if i := strings.LastIndexByte(m[1], ','); i >= 0 {
			expr = m[1][:i]
		} else {
			expr = ""
		}
	}
	names, err = promqlMetrics(expr)
	for _, n := range names {
		if !exported[n] {
			unknown = append(unknown, n)
		}
	}
	return unknown, names, err
}

// promqlKeywords are PromQL's words that are not metric names: aggregation
// operators (which may take "by (…)" before their parentheses), binary
// operators, modifiers and the special float values.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true, "inf": true, "nan": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// promqlMetrics is a small PromQL tokenizer: it returns the names of the
// series an expression selects, and an error when a string, a brace or a
// parenthesis is left open. It skips strings, label matchers ({…}), ranges
// and subqueries ([…]), numbers and durations, Grafana's $variables, the
// label lists after by, without, on, ignoring, group_left and group_right,
// keywords, and function names (an identifier followed by "(").
func promqlMetrics(expr string) ([]string, error) {
	rs := []rune(expr)
	var names []string
	depth := 0
	isIdent := func(r rune, first bool) bool {
		return r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || !first && r >= '0' && r <= '9'
	}
	next := func(i int) int { // the first non-space at or after i
		for i < len(rs) && unicode.IsSpace(rs[i]) {
			i++
		}
		return i
	}
	skipString := func(i int) (int, error) { // rs[i] is the opening quote
		q := rs[i]
		for i++; i < len(rs); i++ {
			switch {
			case rs[i] == '\\' && q != '`':
				i++
			case rs[i] == q:
				return i + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated string in %q", expr)
	}
	skipTo := func(i int, open, close rune) (int, error) { // rs[i] is open
		for i++; i < len(rs); {
			switch rs[i] {
			case '"', '\'', '`':
				var err error
				if i, err = skipString(i); err != nil {
					return 0, err
				}
				continue
			case close:
				return i + 1, nil
			case open:
				return 0, fmt.Errorf("nested %c in %q", open, expr)
			}
			i++
		}
		return 0, fmt.Errorf("unclosed %c in %q", open, expr)
	}
	for i := 0; i < len(rs); {
		r := rs[i]
		var err error
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case r == '"' || r == '\'' || r == '`':
			i, err = skipString(i)
		case r == '{':
			i, err = skipTo(i, '{', '}')
		case r == '[':
			i, err = skipTo(i, '[', ']')
		case r == '$': // $var, ${var}, $__rate_interval
			if i++; i < len(rs) && rs[i] == '{' {
				i, err = skipTo(i, '{', '}')
			}
			for i < len(rs) && isIdent(rs[i], false) {
				i++
			}
		case r >= '0' && r <= '9' || r == '.' && i+1 < len(rs) && rs[i+1] >= '0' && rs[i+1] <= '9':
			for i++; i < len(rs) && (isIdent(rs[i], false) || rs[i] == '.' ||
				(rs[i] == '+' || rs[i] == '-') && (rs[i-1] == 'e' || rs[i-1] == 'E')); i++ {
			}
		case isIdent(r, true):
			start := i
			for i < len(rs) && isIdent(rs[i], false) {
				i++
			}
			word := string(rs[start:i])
			j := next(i)
			switch lower := strings.ToLower(word); {
			case lower == "by" || lower == "without" || lower == "on" || lower == "ignoring" || lower == "group_left" || lower == "group_right":
				if j < len(rs) && rs[j] == '(' {
					i, err = skipTo(j, '(', ')')
				}
			case promqlKeywords[lower]:
			case j < len(rs) && rs[j] == '(':
				// a function
			default:
				names = append(names, word)
			}
		case r == '(':
			depth++
			i++
		case r == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unmatched ) in %q", expr)
			}
			i++
		case r == '}' || r == ']':
			return nil, fmt.Errorf("unmatched %c in %q", r, expr)
		default: // operators, commas, @
			i++
		}
		if err != nil {
			return nil, err
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unclosed ( in %q", expr)
	}
	return names, nil
}

// exportedMetrics are the series names devata exports, taken from the code:
// reconcile's registry after a real pass over a simulated fleet (a drifted
// machine converged, so the per-machine series exist too), and the drift
// textfile of a report with results and provenance. Histograms and
// summaries export their _bucket, _sum and _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	// worker-2 is held by the inventory, so its held series exists too
	f.Drift(t, "worker-2", "time.cloudflare.com", "pool.ntp.org")
	inv, err := os.ReadFile(f.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	held := strings.Replace(string(inv), "  - name: worker-2\n", "  - name: worker-2\n    hold: {reason: test}\n", 1)
	if err := os.WriteFile(f.Inventory.Path, []byte(held), 0o644); err != nil {
		t.Fatal(err)
	}
	loop := reconcile.NewLoop(reconcile.LoopOptions{
		Source: reconcile.FileSource(f.Inventory.Path), Checks: []string{machines.CheckConfig, machines.CheckTalosVersion},
		Changes: reconcile.Changes{
			Dialer: f.Dialer, Mode: talosapi.ModeAuto, MaxUnavailable: 1, Concurrency: 4,
			Timeout: 5 * time.Second, Wait: 5 * time.Second, Poll: 20 * time.Millisecond,
		},
		Grace: 5 * time.Second, Metrics: reconcile.NewMetrics(),
	})
	if res := loop.Once(t.Context()); res.Outcomes["worker-1"] != reconcile.OutcomeConverged || res.Outcomes["worker-2"] != reconcile.OutcomeHeld {
		t.Fatalf("the pass did not converge worker-1 and hold worker-2 (%v): the per-machine series would be missing", res.Outcomes)
	}
	families, err := loop.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}

	r := drift.NewReport(drift.Header{Cluster: "c", GeneratedAt: time.Unix(1, 0), Provenance: provenance.Info{InventorySHA256: strings.Repeat("0", 64)}})
	r.Add(drift.Drifted("x", "a", "b").Of("m", "config", drift.RungReconciliation))
	r.Add(drift.InSync().WithCertificate(drift.Certificate{Credential: "talosconfig", NotBefore: time.Unix(1, 0), NotAfter: time.Unix(86400, 0)}).Of("m", "certificates", drift.RungResources))
	var buf bytes.Buffer
	if err := drift.WritePrometheus(&buf, r); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	textfile, err := parser.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range textfile {
		families = append(families, mf)
	}
	// the backup textfile (backup etcd --verify and backup verify
	// --prom-file), as a run that backed up and proved writes it
	backupProm := filepath.Join(t.TempDir(), "devata_backup.prom")
	if err := backup.WriteMetrics(backupProm, backup.Outcome{
		Cluster: "c", Destination: "s3://b/p/", BackupTried: true, BackupAt: time.Unix(1, 0), Size: 1, VerifyTried: true, VerifiedAt: time.Unix(2, 0), Revision: 3,
	}); err != nil {
		t.Fatal(err)
	}
	bf, err := os.Open(backupProm)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	backupFamilies, err := parser.TextToMetricFamilies(bf)
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range backupFamilies {
		families = append(families, mf)
	}

	names := map[string]bool{}
	for _, mf := range families {
		n := mf.GetName()
		switch mf.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case "SUMMARY":
			names[n], names[n+"_sum"], names[n+"_count"] = true, true, true
		default:
			names[n] = true
		}
	}
	// The families reconcile.Metrics and drift.WritePrometheus document:
	// had the pass left one out, a query of it would fail for nothing.
	for _, want := range []string{
		"devata_drift_status", "devata_reconcile_passes_total", "devata_reconcile_errors_total", "devata_reconcile_actions_total",
		"devata_reconcile_machine_failures", "devata_reconcile_machine_backoff_seconds", "devata_reconcile_last_pass_timestamp_seconds",
		"devata_reconcile_inventory_valid", "devata_inventory_info", "devata_reconcile_gate_blocked", "devata_reconcile_leader", "devata_reconcile_machine_held",
		"workqueue_depth", "workqueue_retries_total", "devata_drift_exit_code", "devata_drift_last_run_timestamp_seconds",
		backup.MetricLastSuccess, backup.MetricLastVerified, backup.MetricVerifiedRevision, backup.MetricSize,
	} {
		if !names[want] {
			t.Errorf("the exported series lack %s: the pass or the report does not produce it", want)
		}
	}
	return names
}

// dashboardQueries are every PromQL expression of the dashboard: each
// panel's targets (rows' nested panels too) and each query variable.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	var dash struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	readJSON(t, dashboardFile, &dash)
	var qs []query
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				qs = append(qs, query{fmt.Sprintf("%s: panel %q target %s", dashboardFile, p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q.Query); err != nil { // a string, or {"query": …}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("%s: variable %s: query: %v", dashboardFile, v.Name, err)
			}
		}
		qs = append(qs, query{fmt.Sprintf("%s: variable %s", dashboardFile, v.Name), q.Query})
	}
	return qs
}

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule
// devata writes; unknown fields are errors (a misspelt "annotation" would
// otherwise just vanish).
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func readRules(t *testing.T) prometheusRule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(b, &pr); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", rulesFile, pr.APIVersion, pr.Kind)
	}
	return pr
}

func ruleQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, g := range readRules(t).Spec.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{fmt.Sprintf("%s: alert %s", rulesFile, r.Alert), r.Expr})
		}
	}
	return qs
}

// Every alert says what is wrong and what to do, and its runbook_url is a
// section of devata's docs that exists.
func TestAlertsSayWhatToDo(t *testing.T) {
	pr := readRules(t)
	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			where := rulesFile + ": alert " + r.Alert
			if r.Alert == "" {
				t.Errorf("%s: a rule without an alert name (expr %s)", rulesFile, r.Expr)
			}
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", where, r.For, err)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", where, s)
			}
			if len(r.Annotations["summary"]) < 20 || len(r.Annotations["description"]) < 100 {
				t.Errorf("%s: summary %q and description %q must say what is wrong and what to do next", where, r.Annotations["summary"], r.Annotations["description"])
			}
			for k, v := range r.Annotations {
				if !slices.Contains([]string{"summary", "description", "runbook_url"}, k) {
					t.Errorf("%s: annotation %s=%q is not one devata writes", where, k, v)
				}
			}
			file, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "#")
			if !ok || !strings.HasPrefix(file, "docs/") {
				t.Errorf("%s: runbook_url %q, want docs/FILE.md#section", where, r.Annotations["runbook_url"])
				continue
			}
			if !slices.Contains(anchors(t, "../"+file), anchor) {
				t.Errorf("%s: runbook_url %s: %s has no section #%s (has %v)", where, r.Annotations["runbook_url"], file, anchor, anchors(t, "../"+file))
			}
		}
	}
	for _, want := range []string{"DevataDriftPresent", "DevataReconcilePassFailing", "DevataReconcileGateBlocked", "DevataReconcileLeaderMissing", "DevataEtcdBackupMissing", "DevataEtcdRestoreUnproven"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s lacks the alert %s (has %v)", rulesFile, want, alerts)
		}
	}
}

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var as []string
	fence := false
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		title, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "#")
		if fence || !ok {
			continue
		}
		title = strings.TrimSpace(strings.TrimLeft(title, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		as = append(as, a.String())
	}
	return as
}

// The dashboard loads in Grafana as provisioned: a fixed uid, unique panel
// ids, and every panel on the dashboard's datasource variable.
func TestDashboardIsWellFormed(t *testing.T) {
	var dash struct {
		UID    string      `json:"uid"`
		Title  string      `json:"title"`
		Panels []dashPanel `json:"panels"`
	}
	readJSON(t, dashboardFile, &dash)
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("%s: uid %q, title %q: both must be set (the uid keeps links and a reprovisioned dashboard stable)", dashboardFile, dash.UID, dash.Title)
	}
	ids := map[int]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("%s: panel %q has id %d (also %q)", dashboardFile, p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("%s: panel %q does not use the ${datasource} variable", dashboardFile, p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
}

// deploy/monitoring builds as `kubectl apply -k deploy/monitoring/` would:
// the dashboard as a ConfigMap Grafana's sidecar loads, the rules and the
// ServiceMonitor, all in the devata namespace.
func TestKustomizeMonitoring(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "monitoring")
	if err != nil {
		t.Fatalf("kustomize build deploy/monitoring/: %v", err)
	}
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var monitor map[string]any
	for _, r := range res.Resources() {
		kind, name := r.GetKind(), r.GetName()
		seen[kind+"/"+name] = true
		if ns := r.GetNamespace(); ns != "devata" {
			t.Errorf("%s/%s in namespace %q, want devata", kind, name, ns)
		}
		if kind == "ConfigMap" && name == "devata-dashboard" {
			if l := r.GetLabels()["grafana_dashboard"]; l != "1" {
				t.Errorf("ConfigMap devata-dashboard has grafana_dashboard=%q, want 1 (Grafana's sidecar loads only those)", l)
			}
			if got := r.GetDataMap()["devata-dashboard.json"]; got != string(dashboard) {
				t.Errorf("ConfigMap devata-dashboard does not carry %s whole", dashboardFile)
			}
		}
		if kind == "ServiceMonitor" {
			m, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			monitor = m
		}
	}
	// The ServiceMonitor selects deploy/'s metrics Service, by its labels
	// and the name of its port.
	base, err := k.Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	svc, err := base.GetById(resid.NewResIdWithNamespace(resid.NewGvk("", "v1", "Service"), "devata-metrics", "devata"))
	if err != nil {
		t.Fatalf("deploy/ has no Service devata-metrics: %v", err)
	}
	var sm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if b, err := json.Marshal(monitor); err != nil || json.Unmarshal(b, &sm) != nil {
		t.Fatalf("ServiceMonitor: %v", err)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("the ServiceMonitor selects no labels: it would select every Service in the namespace")
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; Service devata-metrics has %v", k, v, svc.GetLabels())
		}
	}
	ports, _ := svc.GetFieldValue("spec.ports")
	for _, e := range sm.Spec.Endpoints {
		found := false
		for _, p := range ports.([]any) {
			found = found || p.(map[string]any)["name"] == e.Port
		}
		if !found {
			t.Errorf("the ServiceMonitor scrapes port %q; Service devata-metrics has %v", e.Port, ports)
		}
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Errorf("the ServiceMonitor has no endpoints")
	}
	for _, want := range []string{"ConfigMap/devata-dashboard", "PrometheusRule/devata", "ServiceMonitor/devata-reconcile"} {
		if !seen[want] {
			t.Errorf("build lacks %s; has %v", want, seen)
		}
	}
}

// The docs that describe the monitoring, and the runbook its alerts link,
// link only sections that exist.
func TestMonitoringDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]*)\)`)
	for _, doc := range []string{"../README.md", "../docs/reconcile.md", "../docs/runbook.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") {
				continue
			}
			file := doc
			if target != "" {
				file = path.Join(path.Dir(doc), target)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s links %s: %v", doc, m[1], err)
				continue
			}
			n++
			if anchor != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchors(t, file), anchor) {
				t.Errorf("%s links %s: %s has no section #%s", doc, m[1], file, anchor)
			}
		}
		if n == 0 {
			t.Errorf("%s: no relative links found; the test would prove nothing", doc)
		}
	}
}

// Every alert's expression parses with Prometheus' own PromQL parser
// (github.com/prometheus/prometheus/promql/parser, what the rule manager
// loads rules with), and every series its vector selectors name is one
// devata writes: reconcile's registry, the drift textfile, the backup
// textfile. The parser's names are also the small tokenizer's above, so
// the dashboard, which Grafana's $variables keep from the parser, is
// held by a tokenizer that agrees with it.
func TestAlertRulesParsedByPrometheus(t *testing.T) {
	exported := exportedMetrics(t)
	rules := ruleQueries(t)
	if len(rules) < 5 {
		t.Fatalf("only %d alerts in %s: the test would prove little", len(rules), rulesFile)
	}
	for _, q := range rules {
		names, err := parsedMetrics(q.expr)
		if err != nil {
			t.Errorf("%s does not parse as Prometheus parses it: %v", q.where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s selects no series: %s", q.where, q.expr)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s selects %s, which devata does not write: %s", q.where, n, q.expr)
			}
		}
		tokens, err := promqlMetrics(q.expr)
		slices.Sort(tokens)
		if err != nil || !slices.Equal(slices.Compact(tokens), names) {
			t.Errorf("%s: the tokenizer reads %q (%v), Prometheus' parser %q", q.where, tokens, err, names)
		}
	}
	// and the check can fail: a misspelt series, a broken expression
	if names, _ := parsedMetrics(`time() - max by (cluster) (devata_backup_last_succes_timestamp_seconds) > 26 * 3600`); len(names) != 1 || exported[names[0]] {
		t.Errorf("a misspelt series: %q, want it found and not exported", names)
	}
	if _, err := parsedMetrics(`sum(rate(devata_reconcile_errors_total[5m])`); err == nil {
		t.Errorf("an unclosed parenthesis parsed")
	}
}

// parsedMetrics are the series names expr's vector selectors select (by
// name or by an equality matcher on __name__), sorted, without repeats.
func parsedMetrics(expr string) ([]string, error) {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name != "" {
			names = append(names, vs.Name)
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual && m.Value != vs.Name {
				names = append(names, m.Value)
			}
		}
		return nil
	})
	slices.Sort(names)
	return slices.Compact(names), nil
}
