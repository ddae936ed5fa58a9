package drift

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"devata.dev/devata/internal/outfile"
	"devata.dev/devata/provenance"
)

// statuses in the order the one-hot series are set.
var statuses = []Status{StatusInSync, StatusDrifted, StatusUnknown}

// WritePrometheus writes the report in the Prometheus text exposition format
// that node_exporter's textfile collector reads. Every series carries the
// cluster label so that reports of several clusters can sit side by side.
// Per check, machine and rung the worst status is kept (a check may return
// several results; a series may appear only once).
//
//	devata_drift_status{cluster,machine,check,rung,status}  one-hot per check: 1 for its status, 0 for the others
//	devata_drift_machine_status{cluster,machine,role,status} one-hot per machine
//	devata_drift_machines{cluster,status}                    machines by status
//	devata_drift_results{cluster,status}                     results by status
//	devata_drift_errors{cluster}                             errors that stopped part of the run
//	devata_drift_exit_code{cluster}                          the exit code of the run
//	devata_drift_last_run_timestamp_seconds{cluster}         when the run started
//	devata_drift_simulated{cluster}                          1 when the fleet was simulated
//	devata_inventory_info{cluster,commit,dirty,sha256}       1, naming the inventory (only with provenance)
//	devata_certificate_days_left{cluster,machine,credential}  days from the run to the certificate's notAfter (certificates check)
//	devata_certificate_lifetime_days{cluster,machine,credential} days from its notBefore to its notAfter
//
// The series are gauges on a registry of their own, gathered and encoded by
// client_golang and prometheus/common: families come sorted by name, series
// by label values, labels by name (as any exporter writes them), and a
// family without series (devata_drift_status of a report without results)
// is left out.
func WritePrometheus(w io.Writer, r *Report) error {
	reg, err := promRegistry(r)
	if err != nil {
		return err
	}
	families, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("prometheus report: %w", err)
	}
	bw := bufio.NewWriter(w)
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(bw, f); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// promRegistry holds the report's series.
func promRegistry(r *Report) (*prometheus.Registry, error) {
	r = r.finishedView()
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, append([]string{"cluster"}, labels...))
		reg.MustRegister(g) // names are constants here: a clash is a bug in this file
		return g
	}
	var err error
	// set records the first error: a label value client_golang refuses.
	// Values are made valid UTF-8 first, so none is expected.
	set := func(g *prometheus.GaugeVec, v float64, labels ...string) {
		if err != nil {
			return
		}
		values := append([]string{r.Cluster}, labels...)
		for i, v := range values {
			values[i] = strings.ToValidUTF8(v, "\uFFFD")
		}
		m, e := g.GetMetricWithLabelValues(values...)
		if e != nil {
			err = fmt.Errorf("prometheus report: %w", e)
			return
		}
		m.Set(v)
	}
	oneHot := func(g *prometheus.GaugeVec, current Status, labels ...string) {
		for _, s := range statuses {
			set(g, b2f(s == current), slices.Concat(labels, []string{string(s)})...)
		}
	}

	status := gauge("devata_drift_status", "Status of one check on one machine: 1 for its current status, 0 for the others.",
		"machine", "check", "rung", "status")
	// Results are sorted by machine, rung and check, so the results of one
	// series are adjacent and the worst can be kept without a map.
	for i := 0; i < len(r.Results); {
		res := r.Results[i]
		worst := res.Status
		j := i + 1
		for ; j < len(r.Results); j++ {
			n := r.Results[j]
			if n.Machine != res.Machine || n.Rung != res.Rung || n.Check != res.Check {
				break
			}
			worst = Worse(worst, n.Status)
		}
		oneHot(status, worst, res.Machine, res.Check, string(res.Rung))
		i = j
	}

	if certs := certificates(r.Results); len(certs) > 0 {
		left := gauge(CertificateDaysLeft, "Days from the drift run to the notAfter of a credential's certificate, as the certificates check read it on the machine (negative: expired).", "machine", "credential")
		life := gauge(CertificateLifetimeDays, "Days from the notBefore to the notAfter of a credential's certificate: a short one (a day or less) is renewed by Talos, not by a person.", "machine", "credential")
		for k, c := range certs {
			set(left, c.NotAfter.Sub(r.GeneratedAt).Hours()/24, k[0], k[1])
			set(life, c.NotAfter.Sub(c.NotBefore).Hours()/24, k[0], k[1])
		}
	}

	machine := gauge("devata_drift_machine_status", "Overall status of a machine, the worst of its checks: 1 for its current status, 0 for the others.",
		"machine", "role", "status")
	for _, m := range r.Machines {
		oneHot(machine, m.Status, m.Name, m.Role)
	}

	s := r.Summary
	machines := gauge("devata_drift_machines", "Number of machines by overall status.", "status")
	results := gauge("devata_drift_results", "Number of check results by status.", "status")
	for _, st := range statuses {
		set(machines, float64(countOf(s.Machines, st)), string(st))
		set(results, float64(countOf(s.Results, st)), string(st))
	}
	set(gauge("devata_drift_errors", "Number of errors that stopped part of the drift run."), float64(len(r.Errors)))
	set(gauge("devata_drift_exit_code", "Exit code of the drift run: 0 in sync, 1 drifted, 2 unknown or incomplete."), float64(s.ExitCode))
	set(gauge("devata_drift_last_run_timestamp_seconds", "Unix time the drift run started."), float64(r.GeneratedAt.UnixMilli())/1000)
	set(gauge("devata_drift_simulated", "1 when the results come from devata's simulated fleet, not from real machines."), b2f(r.Simulated))
	if !r.Provenance.IsZero() {
		set(gauge(InventoryInfo, InventoryInfoHelp, InventoryInfoLabels()...), 1, InventoryInfoValues(r.Provenance)...)
	}
	return reg, err
}

// certificates is each machine's certificate by credential, keyed by machine
// and credential: the one with the fewest days left where a machine reports
// one credential twice.
func certificates(results []Result) map[[2]string]*Certificate {
	certs := map[[2]string]*Certificate{}
	for _, res := range results {
		if c := res.Certificate; c != nil {
			k := [2]string{res.Machine, c.Credential}
			if v, ok := certs[k]; !ok || c.NotAfter.Before(v.NotAfter) {
				certs[k] = c
			}
		}
	}
	return certs
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The series of the certificates check: gauges per machine and credential.
const (
	CertificateDaysLeft     = "devata_certificate_days_left"
	CertificateLifetimeDays = "devata_certificate_lifetime_days"
)

// InventoryInfo is the info series naming the inventory a run used; the
// drift textfile and reconcile's /metrics both carry it, with this help
// and these labels after cluster.
const (
	InventoryInfo     = "devata_inventory_info"
	InventoryInfoHelp = "The inventory the run used: its Git commit, whether the work tree was dirty, and its sha256 (commit and dirty empty without Git); always 1."
)

// InventoryInfoLabels are devata_inventory_info's label names after cluster.
func InventoryInfoLabels() []string { return []string{"commit", "dirty", "sha256"} }

// InventoryInfoValues are the values of InventoryInfoLabels for pv:
// dirty is "true" or "false" in Git, and like commit "" without it.
func InventoryInfoValues(pv provenance.Info) []string {
	dirty := ""
	if pv.InGit() {
		dirty = strconv.FormatBool(pv.Dirty)
	}
	return []string{pv.Commit, dirty, pv.InventorySHA256}
}

func countOf(c Counts, s Status) int {
	switch s {
	case StatusInSync:
		return c.InSync
	case StatusDrifted:
		return c.Drifted
	default:
		return c.Unknown
	}
}

// WritePromTextfile writes the report's metrics to path atomically: into a
// temporary file in the same directory, synced, made 0644 and renamed over
// path, so that node_exporter never reads half a file. The temporary name does
// not end in .prom, so the collector never picks it up either.
//
// prometheus.WriteToTextfile does the same but for the sync: without it a
// crash right after the rename can leave an empty devata_drift.prom behind,
// so the registry's text goes through internal/outfile instead (which also
// replaces only a regular file).
func WritePromTextfile(path string, r *Report) error {
	return outfile.Write(path, 0o644, false, func(w io.Writer) error { return WritePrometheus(w, r) })
}
