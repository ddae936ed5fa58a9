package drift_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/golden"
)

type renderer struct {
	name, golden string
	write        func(io.Writer, *drift.Report) error
}

func renderers() []renderer {
	return []renderer{
		{"table", "report.txt", func(w io.Writer, r *drift.Report) error { return drift.WriteTable(w, r, drift.TableOptions{}) }},
		{"table-color", "report-color.txt", func(w io.Writer, r *drift.Report) error {
			return drift.WriteTable(w, r, drift.TableOptions{Color: true})
		}},
		{"json", "report.json", drift.WriteJSON},
		{"junit", "report.xml", drift.WriteJUnit},
		{"prom", "report.prom", drift.WritePrometheus},
	}
}

func render(t *testing.T, write func(io.Writer, *drift.Report) error, r *drift.Report) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The goldens hold the simulated fixture in every format; review their diff
// after go test ./drift -update.
func TestGolden(t *testing.T) {
	for _, rd := range renderers() {
		t.Run(rd.name, func(t *testing.T) {
			got := render(t, rd.write, fixtureReport(true))
			golden.Assert(t, filepath.Join("testdata", rd.golden), got)
		})
	}
}

// Every renderer says visibly whether the fleet was simulated, and only then.
func TestSimulatedIsVisible(t *testing.T) {
	marks := map[string]string{
		"table":       "SIMULATED: these results come from devata's simulated fleet",
		"table-color": "SIMULATED: these results come from devata's simulated fleet",
		"json":        `"simulated": true`,
		"junit":       `name="cp-1 (simulated)"`,
		"prom":        `devata_drift_simulated{cluster="devata-test"} 1`,
	}
	for _, rd := range renderers() {
		mark := marks[rd.name]
		if mark == "" {
			t.Fatalf("no simulation mark for renderer %s", rd.name)
		}
		if out := render(t, rd.write, fixtureReport(true)); !bytes.Contains(out, []byte(mark)) {
			t.Errorf("%s: simulated report lacks %q", rd.name, mark)
		}
		if out := render(t, rd.write, fixtureReport(false)); bytes.Contains(out, []byte(mark)) {
			t.Errorf("%s: real report says %q", rd.name, mark)
		}
	}
	table := string(render(t, renderers()[0].write, fixtureReport(true)))
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if !strings.HasPrefix(lines[0], "SIMULATED") || !strings.HasPrefix(lines[len(lines)-1], "SIMULATED") {
		t.Errorf("a simulated table must say so on its first and last lines:\n%s", table)
	}
}

// Renderers must not reorder or otherwise change the report they are given.
func TestRenderersDoNotMutate(t *testing.T) {
	for _, rd := range renderers() {
		r := drift.NewReport(fixtureHeader(true))
		r.Add(fixtureResults()...) // not finished: the renderer finishes a copy
		before := slices.Clone(r.Results)
		out := render(t, rd.write, r)
		if !reflect.DeepEqual(r.Results, before) {
			t.Errorf("%s reordered the report's results", rd.name)
		}
		if want := render(t, rd.write, fixtureReport(true)); !bytes.Equal(out, want) {
			t.Errorf("%s: an unfinished report renders differently from a finished one", rd.name)
		}
	}
}

func TestTableDetails(t *testing.T) {
	out := string(render(t, renderers()[0].write, fixtureReport(false)))
	for _, want := range []string{
		"NAME       ROLE          ADDRESS     STATUS   CHECKS",
		"cp-1       controlplane  10.20.0.11  InSync   5/5 in sync",
		"cp-2       controlplane  10.20.0.12  Drifted  2/4 in sync",
		"worker-1   worker        10.20.0.21  Unknown  0/2 in sync",
		"worker-10  worker        10.20.0.30  Unknown  0/0 in sync",
		"  config (reconciliation): Drifted\n",
		"    desired:  version 8\n    actual:   version 7\n",
		"      -    hostname: cp-2\n      +    hostname: cp-2-old\n",
		"    next:     devata apply --machines cp-2\n",
		"config (reconciliation): Unknown, fail-closed: blocks a rollout",
		"reason:   observe worker-1: dial tcp 10.20.0.21:50000: connection refused",
		"worker-10 (worker, 10.20.0.30): Unknown, 0/0 in sync\n  no check produced a result",
		"2 in sync, 1 drifted, 2 unknown (5 machines, 14 results) — exit 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// InSync results have no details.
	if strings.Contains(out, "etcd (resources)") {
		t.Errorf("table details an InSync result:\n%s", out)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("table without Color has escape sequences:\n%q", out)
	}
	colored := string(render(t, renderers()[1].write, fixtureReport(false)))
	if !strings.Contains(colored, "\x1b[33mDrifted\x1b[0m") || !strings.Contains(colored, "\x1b[31mUnknown\x1b[0m") {
		t.Errorf("table with Color paints no status:\n%q", colored)
	}
}

// Text observed on a machine cannot drive the terminal: control characters,
// bidi overrides and invalid UTF-8 print escaped, in every field.
func TestTableEscapesObservedText(t *testing.T) {
	r := drift.NewReport(drift.Header{Cluster: "c", Machines: []drift.Machine{{Name: "m\x1b]0;pwned\a", Role: "worker\u202e"}}})
	r.Add(drift.Drifted("labels differ", "zone=a", "zone=\x1b[2Jb\xff").Of("m\x1b]0;pwned\a", "kubelet", drift.RungResources).
		WithDiff("-\tzone: a\n+\tzone: \x1b[2Jb").WithEvidence("Node \x9b1m").WithNext("look\rhere"))
	r.AddError(errors.New("stopped: \x1b[31mred"))
	out := string(render(t, renderers()[0].write, r))
	for _, bad := range []string{"\x1b", "\a", "\u202e", "\xff", "\r", "\u009b"} {
		if strings.Contains(out, bad) {
			t.Errorf("table holds raw %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{`m\x1b]0;pwned\x07`, `worker\u202e`, `zone=\x1b[2Jb\xff`, "-\tzone: a", `look\x0dhere`, `Node \x9b1m`, `stopped: \x1b[31mred`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks escaped %q:\n%s", want, out)
		}
	}
}

func TestTableErrors(t *testing.T) {
	r := drift.NewReport(drift.Header{Cluster: "c", Machines: []drift.Machine{{Name: "cp-1"}}})
	r.Add(drift.InSync().Of("cp-1", "config", drift.RungReconciliation))
	r.AddError(errors.New("render cp-1: patch patches/cp-1.yaml: line 3: unknown field\nsecond line"))
	out := string(render(t, renderers()[0].write, r))
	for _, want := range []string{
		"Errors that stopped part of the run:\n  - render cp-1: patch patches/cp-1.yaml: line 3: unknown field\n    second line\n",
		"1 in sync, 0 drifted, 0 unknown, 1 error (1 machine, 1 result) — exit 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	want := fixtureReport(true)
	want.Add(drift.Drifted("kubelet version differs", "<v1.34.1>", "v1.34.0 & older").Of("cp-1", "kubelet", drift.RungResources))
	want.AddError(errors.New("kubernetes: list nodes: forbidden"))
	want.Finish()
	out := render(t, drift.WriteJSON, want)
	got := decodeReport(t, out)
	got.Finish()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded report differs:\ngot  %+v\nwant %+v", got, want)
	}
	if again := render(t, drift.WriteJSON, got); !bytes.Equal(again, out) {
		t.Errorf("re-encoding a decoded report changes its bytes")
	}
	for _, want := range []string{`"exitCode": 2`, `"desired": "<v1.34.1>"`, `"actual": "v1.34.0 & older"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("JSON lacks %s:\n%s", want, out)
		}
	}
}

func decodeReport(t *testing.T, b []byte) *drift.Report {
	t.Helper()
	var r drift.Report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decode report: %v\n%s", err, b)
	}
	if dec.More() {
		t.Fatalf("trailing data after the report:\n%s", b)
	}
	return &r
}

// The report's order never depends on the order results arrived in.
func TestFinishIsDeterministic(t *testing.T) {
	// Results that differ only after machine, rung and check are ordered too.
	same := func() []drift.Result {
		return []drift.Result{
			drift.Drifted("volume a missing", "", "").Of("cp-1", "storage", drift.RungInfrastructure),
			drift.Drifted("volume b missing", "", "").Of("cp-1", "storage", drift.RungInfrastructure),
			drift.InSync("volume c").Of("cp-1", "storage", drift.RungInfrastructure),
			drift.InSync("volume d").Of("cp-1", "storage", drift.RungInfrastructure),
			drift.Drifted("volume e small", "100GiB", "50GiB").Of("cp-1", "storage", drift.RungInfrastructure),
			drift.Drifted("volume e small", "100GiB", "60GiB").Of("cp-1", "storage", drift.RungInfrastructure),
		}
	}
	all := func() []drift.Result { return append(fixtureResults(), same()...) }
	first := drift.NewReport(fixtureHeader(false))
	first.Add(all()...)
	want := render(t, drift.WriteJSON, first)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		results := all()
		rng.Shuffle(len(results), func(a, b int) { results[a], results[b] = results[b], results[a] })
		r := drift.NewReport(fixtureHeader(false))
		r.Add(results...)
		r.Finish()
		r.Finish() // idempotent
		if got := render(t, drift.WriteJSON, r); !bytes.Equal(got, want) {
			t.Fatalf("permutation %d renders differently:\n%s", i, got)
		}
	}
}

func TestJSONStream(t *testing.T) {
	errs := []error{errors.New("kubernetes: list nodes: forbidden")}
	tests := []struct {
		name    string
		results func() []drift.Result
		shuffle bool
		errs    []error
	}{
		{"sorted", func() []drift.Result { return fixtureReport(true).Results }, false, nil},
		{"sorted with errors", func() []drift.Result { return fixtureReport(true).Results }, false, errs},
		{"shuffled", fixtureResults, true, errs},
		{"no results", func() []drift.Result { return nil }, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results := tt.results()
			if tt.shuffle {
				rand.New(rand.NewPCG(3, 4)).Shuffle(len(results), func(a, b int) { results[a], results[b] = results[b], results[a] })
			}
			want := drift.NewReport(fixtureHeader(true))
			want.Add(results...)
			for _, err := range tt.errs {
				want.AddError(err)
			}
			want.Finish()

			var buf bytes.Buffer
			s := drift.NewJSONStream(&buf)
			if err := s.Begin(fixtureHeader(true)); err != nil {
				t.Fatal(err)
			}
			for _, res := range results { // one by one, as checks finish
				s.Add(res)
			}
			for _, err := range tt.errs {
				s.AddError(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.ExitCode() != want.ExitCode() {
				t.Errorf("stream exit code %d, report %d", s.ExitCode(), want.ExitCode())
			}

			got := decodeReport(t, buf.Bytes())
			if !tt.shuffle {
				// Results arrived in canonical order: the very same bytes.
				if wantJSON := render(t, drift.WriteJSON, want); !bytes.Equal(buf.Bytes(), wantJSON) {
					t.Errorf("stream differs from WriteJSON:\n%s\nwant\n%s", buf.Bytes(), wantJSON)
				}
			} else if reflect.DeepEqual(got.Results, want.Results) {
				t.Fatalf("shuffled results came out sorted; the test proves nothing")
			}
			got.Finish()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("stream decodes to a different report:\ngot  %+v\nwant %+v", got, want)
			}
		})
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n--; w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestJSONStreamErrors(t *testing.T) {
	s := drift.NewJSONStream(&failingWriter{n: 1})
	if err := s.Begin(fixtureHeader(false)); err != nil {
		t.Fatal(err)
	}
	s.Add(fixtureResults()...) // fails: the error sticks
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Close = %v, want the write error", err)
	}

	s = drift.NewJSONStream(io.Discard)
	s.Add(fixtureResults()...)
	if err := s.Close(); err == nil {
		t.Errorf("Add and Close before Begin succeeded")
	}
}

// junit mirrors the attributes CI systems read.
type junit struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Errors   int      `xml:"errors,attr"`
	Time     string   `xml:"time,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Errors   int    `xml:"errors,attr"`
		Time     string `xml:"time,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Time      string `xml:"time,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func TestJUnitParses(t *testing.T) {
	r := fixtureReport(false)
	r.Add(drift.Drifted("label \x1b[31m\x00 differs", "a", "b").Of("cp-1", "kubelet", drift.RungResources).
		WithDiff("-a ]]> b\n+\x00c\xff\n"))
	r.AddError(errors.New("kubernetes: list nodes: forbidden"))
	out := render(t, drift.WriteJUnit, r)
	var doc junit
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("junit does not parse: %v\n%s", err, out)
	}
	// 15 results, one for the machine without results, one for the error.
	if doc.Tests != 17 || doc.Failures != 3 || doc.Errors != 4 {
		t.Errorf("testsuites tests=%d failures=%d errors=%d, want 17, 3, 4", doc.Tests, doc.Failures, doc.Errors)
	}
	type counts struct{ tests, failures, errors int }
	want := map[string]counts{
		"cp-1": {6, 1, 0}, "cp-2": {4, 2, 0}, "worker-1": {2, 0, 2}, "worker-2": {3, 0, 0}, "worker-10": {1, 0, 1}, "devata": {1, 0, 1},
	}
	var names []string
	for _, s := range doc.Suites {
		names = append(names, s.Name)
		var c counts
		for _, tc := range s.Cases {
			c.tests++
			if tc.Failure != nil {
				c.failures++
			}
			if tc.Error != nil {
				c.errors++
			}
			if tc.Time == "" || tc.Name == "" || tc.Classname == "" {
				t.Errorf("%s: testcase lacks name, classname or time: %+v", s.Name, tc)
			}
		}
		if c != (counts{s.Tests, s.Failures, s.Errors}) {
			t.Errorf("suite %s says %d/%d/%d but holds %+v", s.Name, s.Tests, s.Failures, s.Errors, c)
		}
		if c != want[s.Name] {
			t.Errorf("suite %s holds %+v, want %+v", s.Name, c, want[s.Name])
		}
		if s.Time == "" {
			t.Errorf("suite %s has no time", s.Name)
		}
	}
	if wantNames := []string{"cp-1", "cp-2", "worker-1", "worker-2", "worker-10", "devata"}; !slices.Equal(names, wantNames) {
		t.Errorf("suites %v, want %v", names, wantNames)
	}
	if doc.Time == "" {
		t.Errorf("testsuites has no time")
	}
	var texts []string
	for _, s := range doc.Suites {
		for _, tc := range s.Cases {
			if tc.Failure != nil {
				texts = append(texts, tc.Failure.Text)
			}
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"+    hostname: cp-2-old\n", "-a ]]> b\n+\uFFFDc\uFFFD\n", "reason: label \uFFFD[31m\uFFFD differs"} {
		if !strings.Contains(all, want) {
			t.Errorf("failure texts lack %q:\n%s", want, all)
		}
	}
}

// promSeries parses a textfile with Prometheus' own parser and returns each
// series' value by "name{label=value,...}" with labels sorted.
func promSeries(t *testing.T, b []byte) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("prometheus text does not parse: %v\n%s", err, b)
	}
	series := map[string]float64{}
	for name, f := range families {
		if f.GetHelp() == "" || f.GetType().String() != "GAUGE" {
			t.Errorf("%s: help %q, type %s", name, f.GetHelp(), f.GetType())
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(labels)
			key := name + "{" + strings.Join(labels, ",") + "}"
			if _, dup := series[key]; dup {
				t.Errorf("duplicate series %s", key)
			}
			series[key] = m.GetGauge().GetValue()
		}
	}
	return series
}

func TestPrometheus(t *testing.T) {
	r := fixtureReport(true)
	// A second result of the same check and machine: one series, worst status.
	r.Add(drift.Drifted("volume u-scratch missing", "present", "absent").Of("worker-2", "storage", drift.RungInfrastructure))
	series := promSeries(t, render(t, drift.WritePrometheus, r))
	for key, want := range map[string]float64{
		"devata_drift_status{check=config,cluster=devata-test,machine=cp-2,rung=reconciliation,status=Drifted}":      1,
		"devata_drift_status{check=config,cluster=devata-test,machine=cp-2,rung=reconciliation,status=InSync}":       0,
		"devata_drift_status{check=config,cluster=devata-test,machine=worker-1,rung=reconciliation,status=Unknown}":  1,
		"devata_drift_status{check=storage,cluster=devata-test,machine=worker-2,rung=infrastructure,status=Drifted}": 1,
		"devata_drift_status{check=storage,cluster=devata-test,machine=worker-2,rung=infrastructure,status=InSync}":  0,
		"devata_drift_machine_status{cluster=devata-test,machine=worker-10,role=worker,status=Unknown}":              1,
		"devata_drift_machine_status{cluster=devata-test,machine=cp-1,role=controlplane,status=InSync}":              1,
		"devata_drift_machines{cluster=devata-test,status=InSync}":                                                   1,
		"devata_drift_machines{cluster=devata-test,status=Drifted}":                                                  2,
		"devata_drift_machines{cluster=devata-test,status=Unknown}":                                                  2,
		"devata_drift_results{cluster=devata-test,status=Unknown}":                                                   2,
		"devata_drift_errors{cluster=devata-test}":                                                                   0,
		"devata_drift_exit_code{cluster=devata-test}":                                                                2,
		"devata_drift_last_run_timestamp_seconds{cluster=devata-test}":                                               float64(fixtureTime.Unix()),
		"devata_drift_simulated{cluster=devata-test}":                                                                1,
	} {
		got, ok := series[key]
		if !ok {
			t.Errorf("missing series %s", key)
		} else if got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	// One-hot: every check and machine has exactly one status at 1.
	hot := map[string]float64{}
	for key, v := range series {
		if name, rest, _ := strings.Cut(key, "{"); name == "devata_drift_status" || name == "devata_drift_machine_status" {
			i := strings.Index(rest, ",status=")
			hot[name+rest[:i]] += v
		}
	}
	if len(hot) != 14+5 { // 14 checks on machines (worker-2's two storage results are one), 5 machines
		t.Errorf("%d one-hot groups, want 19: %v", len(hot), hot)
	}
	for group, sum := range hot {
		if sum != 1 {
			t.Errorf("%s: %v statuses at 1, want exactly one", group, sum)
		}
	}
}

func TestPrometheusEscapesLabels(t *testing.T) {
	name := "we\"ird\\name\nline\xff"
	r := drift.NewReport(drift.Header{Cluster: `c"1`})
	r.Add(drift.InSync().Of(name, "config", drift.RungReconciliation))
	series := promSeries(t, render(t, drift.WritePrometheus, r))
	key := "devata_drift_status{check=config,cluster=c\"1,machine=we\"ird\\name\nline\uFFFD,rung=reconciliation,status=InSync}"
	if series[key] != 1 {
		t.Errorf("escaped labels do not round-trip; got series:\n%v", slices.Sorted(func(yield func(string) bool) {
			for k := range series {
				if !yield(k) {
					return
				}
			}
		}))
	}
}

func TestWritePromTextfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "devata.prom")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := fixtureReport(true)
	if err := drift.WritePromTextfile(path, r); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := render(t, drift.WritePrometheus, r); !bytes.Equal(got, want) {
		t.Errorf("textfile differs from WritePrometheus:\n%s", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	assertOnlyFile(t, dir, "devata.prom")

	if err := drift.WritePromTextfile(filepath.Join(dir, "missing", "x.prom"), r); err == nil {
		t.Errorf("writing into a missing directory succeeded")
	}
}

func assertOnlyFile(t *testing.T, dir, name string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{name}) {
		t.Errorf("directory holds %v, want only %s", names, name)
	}
}

// Readers polling the file while it is rewritten only ever see a whole file.
func TestWritePromTextfileNeverHalf(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "devata.prom")
	small := drift.NewReport(drift.Header{Cluster: "c", GeneratedAt: fixtureTime})
	small.Add(drift.InSync().Of("cp-1", "config", drift.RungReconciliation))
	big := fixtureReport(false)
	whole := map[string]bool{
		string(render(t, drift.WritePrometheus, small)): true,
		string(render(t, drift.WritePrometheus, big)):   true,
	}
	if err := drift.WritePromTextfile(path, small); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	seen := make(chan int)
	go func() {
		reads := 0
		defer func() { seen <- reads }()
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("read during rewrite: %v", err)
				return
			}
			if !whole[string(b)] {
				t.Errorf("reader saw a partial file of %d bytes", len(b))
				return
			}
			reads++
		}
	}()
	for i := range 200 {
		r := small
		if i%2 == 0 {
			r = big
		}
		if err := drift.WritePromTextfile(path, r); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	if n := <-seen; n == 0 {
		t.Errorf("the reader never read the file; the test proves nothing")
	}
	assertOnlyFile(t, dir, "devata.prom")
}

func TestFormats(t *testing.T) {
	for _, f := range drift.Formats() {
		got, err := drift.ParseFormat(string(f))
		if err != nil || got != f {
			t.Errorf("ParseFormat(%q) = %q, %v", f, got, err)
		}
		var buf bytes.Buffer
		if err := drift.Render(&buf, f, fixtureReport(false), drift.TableOptions{}); err != nil || buf.Len() == 0 {
			t.Errorf("Render(%s) wrote %d bytes, %v", f, buf.Len(), err)
		}
	}
	if _, err := drift.ParseFormat("yaml"); err == nil || !strings.Contains(err.Error(), "table, json, junit, prom") {
		t.Errorf("ParseFormat(yaml) = %v, want an error listing the formats", err)
	}
	if err := drift.Render(io.Discard, "yaml", fixtureReport(false), drift.TableOptions{}); err == nil {
		t.Errorf("Render(yaml) succeeded")
	}
}

// A report of nothing renders in every format, parses, and exits 2.
func TestEmptyReport(t *testing.T) {
	r := drift.NewReport(drift.Header{Cluster: "empty", GeneratedAt: fixtureTime})
	if r.ExitCode() != 2 {
		t.Errorf("empty report exits %d, want 2", r.ExitCode())
	}
	for _, rd := range renderers() {
		out := render(t, rd.write, r)
		switch rd.name {
		case "json":
			got := decodeReport(t, out)
			if got.Results == nil || got.Machines == nil || !bytes.Contains(out, []byte(`"results": [],`)) {
				t.Errorf("empty JSON report lacks empty arrays:\n%s", out)
			}
		case "junit":
			var doc junit
			if err := xml.Unmarshal(out, &doc); err != nil || doc.Tests != 0 {
				t.Errorf("empty junit: %v, %d tests\n%s", err, doc.Tests, out)
			}
		case "prom":
			if series := promSeries(t, out); series[`devata_drift_exit_code{cluster=empty}`] != 2 {
				t.Errorf("empty prom exit code %v", series[`devata_drift_exit_code{cluster=empty}`])
			}
		default:
			if !bytes.Contains(out, []byte("0 in sync, 0 drifted, 0 unknown (0 machines, 0 results) — exit 2")) {
				t.Errorf("empty table:\n%s", out)
			}
		}
	}
}

func TestAutoColor(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := func(string) string { return "" }
	if drift.AutoColor(&bytes.Buffer{}, env) || drift.AutoColor(f, env) {
		t.Errorf("AutoColor is true for a buffer or a regular file")
	}
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		defer null.Close()
		if drift.AutoColor(null, env) {
			t.Errorf("AutoColor is true for %s, a character device but no terminal", os.DevNull)
		}
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !drift.AutoColor(tty, env) {
			t.Errorf("AutoColor is false on a terminal")
		}
		if drift.AutoColor(tty, func(k string) string { return map[string]string{"NO_COLOR": "1"}[k] }) {
			t.Errorf("AutoColor ignores NO_COLOR")
		}
		if drift.AutoColor(tty, func(k string) string { return map[string]string{"TERM": "dumb"}[k] }) {
			t.Errorf("AutoColor ignores TERM=dumb")
		}
	}
}

// Checks finish on many goroutines; the stream takes their results as they come.
func TestJSONStreamConcurrent(t *testing.T) {
	machines, results := fleetResults(50)
	var buf bytes.Buffer
	s := drift.NewJSONStream(&buf)
	if err := s.Begin(drift.Header{Cluster: "c", GeneratedAt: fixtureTime, Machines: machines}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := i; j < len(results); j += 8 {
				s.Add(results[j])
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := decodeReport(t, buf.Bytes())
	got.Finish()
	want := drift.NewReport(drift.Header{Cluster: "c", GeneratedAt: fixtureTime, Machines: machines})
	want.Add(results...)
	want.Finish()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("concurrently streamed report differs: %d results, want %d", len(got.Results), len(want.Results))
	}
}
