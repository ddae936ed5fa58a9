package testenv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/testenv"
)

// node_exporter's textfile collector reads the directory on every scrape:
// a series written is served with its labels and exact value, and a file
// it cannot parse sets node_textfile_scrape_error and serves none of it
// (collector/textfile.go, processFile).
func TestNodeExporter(t *testing.T) {
	dir := t.TempDir()
	ne := testenv.StartNodeExporter(t, dir)
	path := filepath.Join(dir, "x.prom")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write("# HELP devata_test_seconds A test.\n# TYPE devata_test_seconds gauge\ndevata_test_seconds{cluster=\"homelab\"} 1.7650123456789011e+09\n")
	fams, err := ne.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f := fams["devata_test_seconds"]
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("scraped %v, want one devata_test_seconds series\n%s", fams, ne.Log())
	}
	m := f.GetMetric()[0]
	if got := m.GetGauge().GetValue(); got != 1.7650123456789011e+09 {
		t.Errorf("devata_test_seconds = %v, want the file's value exactly", got)
	}
	if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "cluster" || l[0].GetValue() != "homelab" {
		t.Errorf("devata_test_seconds labels %v, want cluster=homelab", l)
	}
	if e := fams["node_textfile_scrape_error"]; e == nil || e.GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Errorf("node_textfile_scrape_error = %v, want 0", e)
	}
	if _, ok := fams["go_goroutines"]; ok {
		t.Error("node_exporter serves its own go_* series: --web.disable-exporter-metrics was not applied")
	}

	write("devata_test_seconds{cluster=\"homelab\"} not-a-number\n")
	fams, err = ne.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fams["devata_test_seconds"]; ok {
		t.Error("a file node_exporter cannot parse still served its series")
	}
	if e := fams["node_textfile_scrape_error"]; e == nil || e.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("node_textfile_scrape_error = %v after a broken file, want 1", e)
	}
	// node_exporter logs the refusal while it serves the scrape, but its
	// output reaches Log through a pipe that exec copies on its own
	// goroutine: the line may arrive just after the response (CI met
	// that once). Wait for it, a bounded while.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ne.Log(), "x.prom") {
		if time.Now().After(deadline) {
			t.Fatalf("node_exporter's log does not name the broken file within 10s:\n%s", ne.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
