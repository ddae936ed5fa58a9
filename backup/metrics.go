package backup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"devata.dev/devata/internal/outfile"
)

// The series backup etcd and backup verify write to --prom-file, each a
// gauge labelled cluster and destination (the directory or URL prefix of
// the snapshots, without query or credentials: MetricsDestination):
//
//	devata_backup_last_success_timestamp_seconds   when backup etcd last wrote a snapshot there (0: never, as far as the file knows)
//	devata_backup_size_bytes                       that snapshot's size
//	devata_backup_last_verified_timestamp_seconds  when a restore was last proven (backup verify, or backup etcd --verify; 0: never)
//	devata_backup_verified_revision                the etcd revision that restore served
const (
	MetricLastSuccess      = "devata_backup_last_success_timestamp_seconds"
	MetricSize             = "devata_backup_size_bytes"
	MetricLastVerified     = "devata_backup_last_verified_timestamp_seconds"
	MetricVerifiedRevision = "devata_backup_verified_revision"
)

var metricHelp = map[string]string{
	MetricLastSuccess:      "When devata backup etcd last wrote a snapshot to the destination, in seconds since the epoch; 0 when no run this file knows of succeeded.",
	MetricSize:             "The size in bytes of the last snapshot devata backup etcd wrote to the destination.",
	MetricLastVerified:     "When a snapshot at the destination was last proven to restore (devata backup verify, or backup etcd --verify), in seconds since the epoch; 0 when no proof this file knows of succeeded.",
	MetricVerifiedRevision: "The etcd revision the restored etcd served in the last successful proof.",
}

// metricNames in the order they are written (by name, as client_golang
// gathers them).
var metricNames = []string{MetricLastSuccess, MetricLastVerified, MetricSize, MetricVerifiedRevision}

// Outcome is what one run of backup etcd or backup verify learned about a
// destination, for WriteMetrics.
type Outcome struct {
	Cluster     string
	Destination string // MetricsDestination's form
	// BackupTried: this run tried to write a snapshot; BackupAt is when it
	// succeeded (zero: it failed) and Size the snapshot's size.
	BackupTried bool
	BackupAt    time.Time
	Size        int64
	// VerifyTried: this run tried to prove a snapshot restores; VerifiedAt
	// is when it succeeded (zero: it failed) and Revision what it served.
	VerifyTried bool
	VerifiedAt  time.Time
	Revision    int64
}

// WriteMetrics records o in the Prometheus textfile path (node_exporter's
// textfile collector format), keeping what it does not update.
//
// backup etcd and backup verify run as separate jobs and share one file:
// each run rewrites only the series of what it tried, for its cluster and
// destination, and keeps every other series as the file had it. So a
// verify never resets last_success, and a failed run keeps the last
// success's timestamp (the alerts measure its age) instead of zeroing it;
// a timestamp the file never had is written as 0, so that a destination
// whose first run failed is seen too. One file rather than one per job
// because backup etcd --verify proves a restore as well: two files would
// both hold last_verified for the same labels, which node_exporter
// refuses as a duplicate series.
//
// The read, merge and write happen under an exclusive flock on path.lock
// (two jobs finishing at once do not lose one's update), and the write is
// atomic (internal/outfile: a temporary file, synced, renamed over path,
// whose name does not end in .prom), as drift's --prom-file is.
// A file that holds anything else than these series is refused, not
// overwritten: give each writer a file of its own.
func WriteMetrics(path string, o Outcome) error {
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("--prom-file %s: %w; the directory must be writable", path, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("--prom-file %s: lock %s: %w", path, lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too

	reg := prometheus.NewRegistry()
	gauges := map[string]*prometheus.GaugeVec{}
	for _, n := range metricNames {
		gauges[n] = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: metricHelp[n]}, []string{"cluster", "destination"})
		reg.MustRegister(gauges[n])
	}
	had, err := readMetrics(path, gauges)
	if err != nil {
		return err
	}
	key := [2]string{o.Cluster, o.Destination}
	set := func(name string, ok bool, v float64, zero bool) {
		switch {
		case ok:
			gauges[name].WithLabelValues(key[0], key[1]).Set(v)
		case zero && !had[name][key]:
			gauges[name].WithLabelValues(key[0], key[1]).Set(0)
		}
	}
	if o.BackupTried {
		ok := !o.BackupAt.IsZero()
		set(MetricLastSuccess, ok, unixSeconds(o.BackupAt), true)
		set(MetricSize, ok, float64(o.Size), false)
	}
	if o.VerifyTried {
		ok := !o.VerifiedAt.IsZero()
		set(MetricLastVerified, ok, unixSeconds(o.VerifiedAt), true)
		set(MetricVerifiedRevision, ok, float64(o.Revision), false)
	}
	families, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("--prom-file %s: %w", path, err)
	}
	return outfile.Write(path, 0o644, false, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		for _, f := range families {
			if _, err := expfmt.MetricFamilyToText(bw, f); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// readMetrics loads the series path holds into gauges and says which
// (cluster, destination) each family had. A missing file holds none.
func readMetrics(path string, gauges map[string]*prometheus.GaugeVec) (map[string]map[[2]string]bool, error) {
	had := map[string]map[[2]string]bool{}
	for n := range gauges {
		had[n] = map[[2]string]bool{}
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return had, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--prom-file %s: %w", path, err)
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(f)
	if err != nil {
		return nil, fmt.Errorf("--prom-file %s is not a Prometheus textfile: %w; remove it (the next run writes it anew) or give another path", path, err)
	}
	for name, fam := range families {
		g, ok := gauges[name]
		if !ok {
			return nil, fmt.Errorf("--prom-file %s holds %s, which devata backup does not write: give backup etcd and backup verify a file of their own (drift's --prom-file too)", path, name)
		}
		for _, m := range fam.GetMetric() {
			var k [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "cluster":
					k[0] = l.GetValue()
				case "destination":
					k[1] = l.GetValue()
				}
			}
			if m.GetGauge() == nil || len(m.GetLabel()) != 2 {
				return nil, fmt.Errorf("--prom-file %s: a %s series that devata backup did not write (labels %v); remove the file or give another path", path, name, m.GetLabel())
			}
			g.WithLabelValues(k[0], k[1]).Set(m.GetGauge().GetValue())
			had[name][k] = true
		}
	}
	return had, nil
}

// MetricsDestination is the destination label of where snapshots go: a
// URL's scheme, bucket and prefix without query or credentials
// (s3://backups/homelab/), or a directory's clean path ending in a slash.
// dest is what --to or --latest names; a snapshot's own name (a file, an
// object) gives its directory or prefix, so that backup etcd --to DIR/
// and backup verify DIR/NAME.db label the same series.
func MetricsDestination(dest string) string {
	if IsURL(dest) {
		base, _, _ := strings.Cut(dest, "?")
		u, err := url.Parse(base)
		if err != nil {
			return "(unparsable URL)"
		}
		u.User, u.RawQuery, u.Fragment = nil, "", ""
		if !strings.HasSuffix(u.Path, "/") {
			u.Path = u.Path[:strings.LastIndex(u.Path, "/")+1] // the object's prefix
			if u.Path == "" {
				u.Path = "/"
			}
		}
		return u.String()
	}
	dir := dest
	if !NamesDirectory(dest) {
		dir = filepath.Dir(dest)
	}
	dir = filepath.Clean(dir)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return dir
}
