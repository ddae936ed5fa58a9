package drift_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"

	"devata.dev/devata/drift"
)

func TestExitCode(t *testing.T) {
	insync := drift.InSync().Of("cp-1", "config", drift.RungReconciliation)
	drifted := drift.Drifted("labels differ", "a", "b").Of("cp-1", "kubelet", drift.RungResources)
	unknown := drift.Unknown(errors.New("timeout"), "").Of("cp-2", "config", drift.RungReconciliation)
	one := []drift.Machine{{Name: "cp-1"}}
	two := []drift.Machine{{Name: "cp-1"}, {Name: "cp-2"}}
	tests := []struct {
		name     string
		machines []drift.Machine
		results  []drift.Result
		errs     []error
		want     int
	}{
		{"all in sync", one, []drift.Result{insync}, nil, 0},
		{"in sync, machines not declared", nil, []drift.Result{insync}, nil, 0},
		{"drifted", one, []drift.Result{insync, drifted}, nil, 1},
		{"unknown", two, []drift.Result{insync, drifted, unknown}, nil, 2},
		{"unknown only", nil, []drift.Result{unknown}, nil, 2},
		{"in sync but an error stopped part of the run", one, []drift.Result{insync}, []error{errors.New("render: boom")}, 2},
		{"drifted and an error", one, []drift.Result{drifted}, []error{errors.New("render: boom")}, 2},
		{"a declared machine without results", two, []drift.Result{insync}, nil, 2},
		{"nothing observed at all", nil, nil, nil, 2},
		{"invalid status counts as unknown", one, []drift.Result{{Machine: "cp-1", Check: "x", Status: "Fine"}}, nil, 2},
		{"empty status counts as unknown", one, []drift.Result{{Machine: "cp-1", Check: "x"}}, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := drift.NewReport(drift.Header{Cluster: "c", Machines: tt.machines})
			r.Add(tt.results...)
			for _, err := range tt.errs {
				r.AddError(err)
			}
			if got := r.ExitCode(); got != tt.want {
				t.Errorf("ExitCode() before Finish = %d, want %d", got, tt.want)
			}
			r.Finish()
			if got := r.ExitCode(); got != tt.want {
				t.Errorf("ExitCode() = %d, want %d", got, tt.want)
			}
			if r.Summary.ExitCode != tt.want {
				t.Errorf("Summary.ExitCode = %d, want %d", r.Summary.ExitCode, tt.want)
			}
		})
	}
}

func TestMachineSummaries(t *testing.T) {
	r := fixtureReport(false)
	type row struct {
		name, role string
		status     drift.Status
		counts     drift.Counts
	}
	var got []row
	for _, m := range r.Machines {
		got = append(got, row{m.Name, m.Role, m.Status, m.Counts})
	}
	want := []row{ // natural order: worker-2 before worker-10
		{"cp-1", "controlplane", drift.StatusInSync, drift.Counts{InSync: 5}},
		{"cp-2", "controlplane", drift.StatusDrifted, drift.Counts{InSync: 2, Drifted: 2}},
		{"worker-1", "worker", drift.StatusUnknown, drift.Counts{Unknown: 2}},
		{"worker-2", "worker", drift.StatusInSync, drift.Counts{InSync: 3}},
		{"worker-10", "worker", drift.StatusUnknown, drift.Counts{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("machines:\ngot  %+v\nwant %+v", got, want)
	}
	wantSummary := drift.Summary{
		Machines: drift.Counts{InSync: 2, Drifted: 1, Unknown: 2},
		Results:  drift.Counts{InSync: 10, Drifted: 2, Unknown: 2},
		ExitCode: 2,
	}
	if r.Summary != wantSummary {
		t.Errorf("summary %+v, want %+v", r.Summary, wantSummary)
	}
}

func TestResultOrder(t *testing.T) {
	r := fixtureReport(false)
	var got []string
	for _, res := range r.Results {
		got = append(got, res.Machine+"/"+string(res.Rung)+"/"+res.Check)
	}
	want := []string{
		"cp-1/declaration/cilium-declaration",
		"cp-1/reconciliation/config",
		"cp-1/reconciliation/talos-version",
		"cp-1/resources/etcd",
		"cp-1/resources/kubelet",
		"cp-2/reconciliation/config",
		"cp-2/reconciliation/talos-version",
		"cp-2/resources/etcd",
		"cp-2/resources/kubelet",
		"worker-1/reconciliation/config",
		"worker-1/reconciliation/talos-version",
		"worker-2/reconciliation/config",
		"worker-2/reconciliation/talos-version",
		"worker-2/infrastructure/storage-mounts",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order:\ngot  %q\nwant %q", got, want)
	}
}

func TestNewReport(t *testing.T) {
	before := time.Now()
	r := drift.NewReport(drift.Header{Cluster: "c"})
	if r.APIVersion != "devata.dev/v1alpha1" || r.Kind != "DriftReport" {
		t.Errorf("apiVersion %q kind %q", r.APIVersion, r.Kind)
	}
	if r.GeneratedAt.Before(before.Add(-time.Second)) || r.GeneratedAt.After(time.Now()) || r.GeneratedAt.Location() != time.UTC {
		t.Errorf("GeneratedAt %v is not now in UTC", r.GeneratedAt)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	if r := drift.NewReport(drift.Header{GeneratedAt: at}); !r.GeneratedAt.Equal(at) || r.GeneratedAt.Location() != time.UTC {
		t.Errorf("GeneratedAt %v, want %v in UTC", r.GeneratedAt, at)
	}
}

func TestUnknownCarriesTheError(t *testing.T) {
	var merr *multierror.Error
	merr = multierror.Append(merr, errors.New("cp-1: permission denied"), errors.New("cp-1: not authorized"))
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"dial", fmt.Errorf("dial tcp 10.20.0.11:50000: %w", errors.New("i/o timeout")), "dial tcp 10.20.0.11:50000: i/o timeout"},
		{"multierror on one line", merr, "2 errors occurred: cp-1: permission denied; cp-1: not authorized"},
		{"errors.Join on one line", errors.Join(errors.New("a"), errors.New("b")), "a; b"},
		{"nil error", nil, "could not observe (no error given)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := drift.Unknown(tt.err, "talosctl -n cp-1 version").Of("cp-1", "config", drift.RungReconciliation)
			if r.Status != drift.StatusUnknown || r.Reason != tt.want || r.Next != "talosctl -n cp-1 version" {
				t.Errorf("got %+v, want reason %q", r, tt.want)
			}
		})
	}
}

func TestConstructors(t *testing.T) {
	d := drift.Drifted("differs\nreally", "v8", "v7").Of("cp-1", "config", drift.RungReconciliation).
		WithDiff("-a\n+b\n").WithEvidence("e1").WithEvidence("e2").WithNext("devata apply")
	want := drift.Result{
		Machine: "cp-1", Check: "config", Rung: drift.RungReconciliation, Status: drift.StatusDrifted,
		Reason: "differs; really", Desired: "v8", Actual: "v7", Diff: "-a\n+b\n", Evidence: []string{"e1", "e2"}, Next: "devata apply",
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Drifted:\ngot  %+v\nwant %+v", d, want)
	}
	// WithEvidence never writes into the evidence of the result it came from.
	base := drift.InSync(make([]string, 1, 4)...).Of("cp-1", "config", drift.RungReconciliation)
	a, b := base.WithEvidence("a"), base.WithEvidence("b")
	if a.Evidence[1] != "a" || b.Evidence[1] != "b" || len(base.Evidence) != 1 {
		t.Errorf("WithEvidence shares memory: %q %q %q", base.Evidence, a.Evidence, b.Evidence)
	}
	u := drift.Unknown(errors.New("x"), "").Of("cp-1", "config", drift.RungReconciliation)
	if u.Blocks() {
		t.Errorf("a fail-open Unknown blocks")
	}
	u.FailClosed = true
	if !u.Blocks() {
		t.Errorf("a fail-closed Unknown does not block")
	}
	d.FailClosed = true
	if d.Blocks() {
		t.Errorf("a Drifted result blocks")
	}
}

type node struct{ name, version string }

func TestCheckEvaluate(t *testing.T) {
	version := drift.Check[node]{
		Name: "talos-version", Rung: drift.RungReconciliation, FailClosed: true,
		Run: func(_ context.Context, n node) []drift.Result {
			if n.version == "" {
				return nil
			}
			if n.version == "panic" {
				panic("boom")
			}
			if n.version != "v1.11.0" {
				return []drift.Result{{Status: drift.StatusDrifted, Desired: "v1.11.0", Actual: n.version}}
			}
			return []drift.Result{{Status: drift.StatusInSync}}
		},
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		check  drift.Check[node]
		target node
		status drift.Status
		reason string
	}{
		{"in sync", context.Background(), version, node{"cp-1", "v1.11.0"}, drift.StatusInSync, ""},
		{"drifted", context.Background(), version, node{"cp-1", "v1.10.6"}, drift.StatusDrifted, ""},
		{"no result", context.Background(), version, node{"cp-1", ""}, drift.StatusUnknown, "check returned no result"},
		{"panic", context.Background(), version, node{"cp-1", "panic"}, drift.StatusUnknown, "check panicked: boom"},
		{"context done", canceled, version, node{"cp-1", "v1.11.0"}, drift.StatusUnknown, "not started: context canceled"},
		{"no Run", context.Background(), drift.Check[node]{Name: "talos-version", Rung: drift.RungReconciliation, FailClosed: true}, node{"cp-1", "v1.11.0"}, drift.StatusUnknown, "check has no Run function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.check.Evaluate(tt.ctx, tt.target.name, tt.target)
			if len(got) != 1 {
				t.Fatalf("got %d results, want 1: %+v", len(got), got)
			}
			r := got[0]
			if r.Machine != "cp-1" || r.Check != "talos-version" || r.Rung != drift.RungReconciliation || !r.FailClosed {
				t.Errorf("result not stamped with machine, check, rung and policy: %+v", r)
			}
			if r.Status != tt.status || !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("status %s reason %q, want %s %q", r.Status, r.Reason, tt.status, tt.reason)
			}
		})
	}

	// A check may name other checks' or machines' results itself; Evaluate keeps them.
	multi := drift.Check[node]{Name: "storage", Rung: drift.RungInfrastructure, Run: func(context.Context, node) []drift.Result {
		return []drift.Result{
			{Check: "storage/longhorn", Status: drift.StatusInSync},
			{Machine: "other", Rung: drift.RungResources, Status: "bogus"},
		}
	}}
	got := multi.Evaluate(context.Background(), "cp-1", node{})
	if got[0].Check != "storage/longhorn" || got[0].Machine != "cp-1" || got[0].FailClosed {
		t.Errorf("first result %+v", got[0])
	}
	if got[1].Machine != "other" || got[1].Rung != drift.RungResources || got[1].Check != "storage" || got[1].Status != drift.StatusUnknown {
		t.Errorf("second result %+v", got[1])
	}
}

func TestBlocking(t *testing.T) {
	got := fixtureReport(false).Blocking()
	if len(got) != 1 || got[0].Machine != "worker-1" || got[0].Check != "config" {
		t.Errorf("Blocking() = %+v, want worker-1's fail-closed config result only", got)
	}
}

// Every JSON field of the report is documented in docs/report.md.
func TestJSONFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ == reflect.TypeFor[time.Time]() {
			return
		}
		seen[typ] = true
		for f := range typ.Fields() {
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue // never in the JSON
			}
			if name == "" && f.Anonymous {
				walk(f.Type)
				continue
			}
			if !strings.Contains(string(doc), "| `"+name+"` |") {
				t.Errorf("docs/report.md has no row for JSON field %q of %s", name, typ.Name())
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[drift.Report]())
	if len(seen) < 5 {
		t.Errorf("walked only %d types; the test proves little", len(seen))
	}
}
