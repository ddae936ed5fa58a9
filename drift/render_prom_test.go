package drift_test

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"devata.dev/devata/drift"
)

func TestPrometheus(t *testing.T) {
	r := fixtureReport(true)
	// A second result of the same check and machine: one series, worst status.
	r.Add(drift.Drifted("volume u-scratch missing", "present", "absent").Of("worker-2", "storage-mounts", drift.RungInfrastructure))
	series := promSeries(t, render(t, drift.WritePrometheus, r))
	for key, want := range map[string]float64{
		"devata_drift_status{check=config,cluster=devata-test,machine=cp-2,rung=reconciliation,status=Drifted}":             1,
		"devata_drift_status{check=config,cluster=devata-test,machine=cp-2,rung=reconciliation,status=InSync}":              0,
		"devata_drift_status{check=config,cluster=devata-test,machine=worker-1,rung=reconciliation,status=Unknown}":         1,
		"devata_drift_status{check=storage-mounts,cluster=devata-test,machine=worker-2,rung=infrastructure,status=Drifted}": 1,
		"devata_drift_status{check=storage-mounts,cluster=devata-test,machine=worker-2,rung=infrastructure,status=InSync}":  0,
		"devata_drift_machine_status{cluster=devata-test,machine=worker-10,role=worker,status=Unknown}":                     1,
		"devata_drift_machine_status{cluster=devata-test,machine=cp-1,role=controlplane,status=InSync}":                     1,
		"devata_drift_machines{cluster=devata-test,status=InSync}":                                                          1,
		"devata_drift_machines{cluster=devata-test,status=Drifted}":                                                         2,
		"devata_drift_machines{cluster=devata-test,status=Unknown}":                                                         2,
		"devata_drift_results{cluster=devata-test,status=Unknown}":                                                          2,
		"devata_drift_errors{cluster=devata-test}":                                                                          0,
		"devata_drift_exit_code{cluster=devata-test}":                                                                       2,
		"devata_drift_last_run_timestamp_seconds{cluster=devata-test}":                                                      float64(fixtureTime.Unix()),
		"devata_drift_simulated{cluster=devata-test}":                                                                       1,
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

// The textfile is what prometheus/common's encoder writes for the families it
// holds, byte for byte: sorted families, sorted series, labels by name.
// Anything written by hand beside the registry would show here.
func TestPrometheusIsCanonical(t *testing.T) {
	weird := drift.NewReport(drift.Header{Cluster: `c"1`})
	weird.Add(drift.InSync().Of("we\"ird\\name\nline", "config", drift.RungReconciliation))
	for name, r := range map[string]*drift.Report{"fixture": fixtureReport(true), "escapes": weird, "empty": drift.NewReport(drift.Header{Cluster: "e"})} {
		out := render(t, drift.WritePrometheus, r)
		parser := expfmt.NewTextParser(model.LegacyValidation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		var again bytes.Buffer
		for _, n := range slices.Sorted(maps.Keys(families)) {
			if _, err := expfmt.MetricFamilyToText(&again, families[n]); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(out, again.Bytes()) {
			t.Errorf("%s: the textfile is not the encoder's canonical text:\n%s\nre-encoded:\n%s", name, out, again.Bytes())
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
