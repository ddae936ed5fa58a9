package drift_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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
	if _, err := drift.ParseFormat("xml"); err == nil || !strings.Contains(err.Error(), "table, json, yaml, junit, prom, html") {
		t.Errorf("ParseFormat(xml) = %v, want an error listing the formats", err)
	}
	if err := drift.Render(io.Discard, "xml", fixtureReport(false), drift.TableOptions{}); err == nil {
		t.Errorf("Render(xml) succeeded")
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
