package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// NodeExporterVersion is the Prometheus node_exporter the test bed runs to
// read a textfile as a cluster's monitoring does: its textfile collector
// over a directory, scraped over HTTP. Built from the Go module proxy
// (build/node_exporter) into the cache directory as node_exporter-VERSION.
const NodeExporterVersion = "v1.12.1"

var nodeExporterBinary = binary{
	name:     "node_exporter-" + NodeExporterVersion,
	module:   "node_exporter",
	pkg:      "github.com/prometheus/node_exporter",
	version:  NodeExporterVersion,
	estimate: "about 1 minute",
	// promu sets these in a release build; node_exporter_build_info and
	// --version read them
	ldflags: []string{"-X", "github.com/prometheus/common/version.Version=" + strings.TrimPrefix(NodeExporterVersion, "v")},
}

// NodeExporter is a running node_exporter with only its textfile collector
// enabled, reading Dir (every *.prom file in it) on each scrape.
type NodeExporter struct {
	URL string // http://127.0.0.1:PORT/metrics
	Dir string

	proc *loopbackProcess
}

// StartNodeExporter starts node_exporter over dir on loopback and stops it
// when the test ends. The binary is built first if missing.
func StartNodeExporter(t testing.TB, dir string) *NodeExporter {
	t.Helper()
	cache, err := DefaultDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := Install(t.Context(), cache, logWriter{t}); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	bin := filepath.Join(cache, nodeExporterBinary.name)
	proc, err := startLoopback("node_exporter "+NodeExporterVersion,
		func(addr string) *exec.Cmd {
			return exec.Command(bin,
				"--web.listen-address="+addr,
				"--collector.disable-defaults",
				"--collector.textfile",
				"--collector.textfile.directory="+dir,
				"--web.disable-exporter-metrics", // no go_* and process_* series
			)
		},
		func(addr string) bool {
			resp, err := http.Get(metricsURL(addr))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	n := &NodeExporter{URL: metricsURL(proc.addr), Dir: dir, proc: proc}
	t.Cleanup(n.Stop)
	t.Logf("testenv: node_exporter %s up at %s (textfile collector over %s)", NodeExporterVersion, n.URL, dir)
	return n
}

func metricsURL(addr string) string { return "http://" + addr + "/metrics" }

// Scrape reads /metrics as Prometheus' text format (version 0.0.4) and
// returns its families by name: the textfile's series as node_exporter
// serves them, and its own node_textfile_* and node_scrape_* series.
func (n *NodeExporter) Scrape(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape node_exporter: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("scrape node_exporter: %s: %s", resp.Status, body)
	}
	if ft := expfmt.ResponseFormat(resp.Header).FormatType(); ft != expfmt.TypeTextPlain {
		return nil, fmt.Errorf("scrape node_exporter: answered %q, not the text format asked for", resp.Header.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape node_exporter: %w", err)
	}
	return fams, nil
}

// Log is what node_exporter wrote to stdout and stderr (the last 16 KiB):
// a textfile it refused is logged there.
func (n *NodeExporter) Log() string { return n.proc.out.String() }

// Stop ends node_exporter (SIGTERM, then SIGKILL after 10 seconds).
// Stopping twice is fine.
func (n *NodeExporter) Stop() { n.proc.Stop() }
