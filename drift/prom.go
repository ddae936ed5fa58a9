package drift

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"devata.dev/devata/provenance"
)

// statuses in the order metrics list them.
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
func WritePrometheus(w io.Writer, r *Report) error {
	r = r.finishedView()
	bw := bufio.NewWriter(w)
	cluster := label("cluster", r.Cluster)
	family := func(name, help string) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
	}
	oneHot := func(name, labels string, current Status) {
		for _, s := range statuses {
			v := 0
			if s == current {
				v = 1
			}
			fmt.Fprintf(bw, "%s{%s,%s} %d\n", name, labels, label("status", string(s)), v)
		}
	}

	family("devata_drift_status", "Status of one check on one machine: 1 for its current status, 0 for the others.")
	// Results are sorted by machine, rung and check, so the results of one
	// series are adjacent and the worst can be kept without a map.
	for i := 0; i < len(r.Results); {
		res := r.Results[i]
		status := res.Status
		j := i + 1
		for ; j < len(r.Results); j++ {
			n := r.Results[j]
			if n.Machine != res.Machine || n.Rung != res.Rung || n.Check != res.Check {
				break
			}
			status = Worse(status, n.Status)
		}
		labels := strings.Join([]string{cluster, label("machine", res.Machine), label("check", res.Check), label("rung", string(res.Rung))}, ",")
		oneHot("devata_drift_status", labels, status)
		i = j
	}

	family("devata_drift_machine_status", "Overall status of a machine, the worst of its checks: 1 for its current status, 0 for the others.")
	for _, m := range r.Machines {
		oneHot("devata_drift_machine_status", cluster+","+label("machine", m.Name)+","+label("role", m.Role), m.Status)
	}

	s := r.Summary
	family("devata_drift_machines", "Number of machines by overall status.")
	for _, st := range statuses {
		fmt.Fprintf(bw, "devata_drift_machines{%s,%s} %d\n", cluster, label("status", string(st)), countOf(s.Machines, st))
	}
	family("devata_drift_results", "Number of check results by status.")
	for _, st := range statuses {
		fmt.Fprintf(bw, "devata_drift_results{%s,%s} %d\n", cluster, label("status", string(st)), countOf(s.Results, st))
	}
	family("devata_drift_errors", "Number of errors that stopped part of the drift run.")
	fmt.Fprintf(bw, "devata_drift_errors{%s} %d\n", cluster, len(r.Errors))
	family("devata_drift_exit_code", "Exit code of the drift run: 0 in sync, 1 drifted, 2 unknown or incomplete.")
	fmt.Fprintf(bw, "devata_drift_exit_code{%s} %d\n", cluster, s.ExitCode)
	family("devata_drift_last_run_timestamp_seconds", "Unix time the drift run started.")
	fmt.Fprintf(bw, "devata_drift_last_run_timestamp_seconds{%s} %s\n", cluster,
		strconv.FormatFloat(float64(r.GeneratedAt.UnixMilli())/1000, 'f', -1, 64))
	family("devata_drift_simulated", "1 when the results come from devata's simulated fleet, not from real machines.")
	sim := 0
	if r.Simulated {
		sim = 1
	}
	fmt.Fprintf(bw, "devata_drift_simulated{%s} %d\n", cluster, sim)
	if !r.Provenance.IsZero() {
		family(InventoryInfo, InventoryInfoHelp)
		labels := []string{cluster}
		for i, v := range InventoryInfoValues(r.Provenance) {
			labels = append(labels, label(InventoryInfoLabels()[i], v))
		}
		fmt.Fprintf(bw, "%s{%s} 1\n", InventoryInfo, strings.Join(labels, ","))
	}
	return bw.Flush()
}

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

// labelEscaper escapes a label value as the text format requires.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func label(name, value string) string {
	return name + `="` + labelEscaper.Replace(strings.ToValidUTF8(value, "\uFFFD")) + `"`
}

// WritePromTextfile writes the report's metrics to path atomically: into a
// temporary file in the same directory, synced, made 0644 and renamed over
// path, so that node_exporter never reads half a file. The temporary name does
// not end in .prom, so the collector never picks it up either.
func WritePromTextfile(path string, r *Report) error {
	return writeFileAtomic(path, 0o644, func(w io.Writer) error { return WritePrometheus(w, r) })
}

func writeFileAtomic(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			// Best effort: the write already failed, and this error says why.
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename survive a crash. The file is in place and whole either
	// way, so a failure here is not worth failing the run for.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
