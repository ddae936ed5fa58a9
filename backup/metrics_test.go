package backup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"devata.dev/devata/backup"
)

// readProm reads a textfile as node_exporter would, into name → "cluster
// destination" → value.
func readProm(t *testing.T, path string) map[string]map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("%s is no textfile node_exporter reads: %v", path, err)
	}
	out := map[string]map[string]float64{}
	for name, fam := range fams {
		if fam.GetType().String() != "GAUGE" || fam.GetHelp() == "" {
			t.Errorf("%s: %s is a %s with help %q, want a gauge with help", path, name, fam.GetType(), fam.GetHelp())
		}
		out[name] = map[string]float64{}
		for _, m := range fam.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			out[name][strings.Join(l, " ")] = m.GetGauge().GetValue()
		}
	}
	return out
}

// backup etcd and backup verify share one textfile: each run rewrites only
// what it tried for its cluster and destination; a failure keeps the last
// success (0 when there never was one), a verify keeps last_success, and
// other destinations' series stay.
func TestWriteMetricsKeepsWhatARunDidNotUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devata_backup.prom")
	t1 := time.Date(2026, 12, 5, 3, 17, 0, 0, time.UTC)
	t2 := t1.Add(6 * time.Hour)
	const s3 = "cluster=homelab destination=s3://backups/homelab/"
	const dir = "cluster=homelab destination=/backups/"
	steps := []struct {
		name string
		o    backup.Outcome
		want map[string]map[string]float64
	}{
		{"backup etcd succeeds", backup.Outcome{Cluster: "homelab", Destination: "s3://backups/homelab/", BackupTried: true, BackupAt: t1, Size: 4096},
			map[string]map[string]float64{
				backup.MetricLastSuccess: {s3: float64(t1.Unix())}, backup.MetricSize: {s3: 4096},
			}},
		{"backup verify succeeds", backup.Outcome{Cluster: "homelab", Destination: "s3://backups/homelab/", VerifyTried: true, VerifiedAt: t2, Revision: 777},
			map[string]map[string]float64{
				backup.MetricLastSuccess: {s3: float64(t1.Unix())}, backup.MetricSize: {s3: 4096},
				backup.MetricLastVerified: {s3: float64(t2.Unix())}, backup.MetricVerifiedRevision: {s3: 777},
			}},
		{"backup etcd --verify fails to back up", backup.Outcome{Cluster: "homelab", Destination: "s3://backups/homelab/", BackupTried: true, VerifyTried: true},
			map[string]map[string]float64{
				backup.MetricLastSuccess: {s3: float64(t1.Unix())}, backup.MetricSize: {s3: 4096},
				backup.MetricLastVerified: {s3: float64(t2.Unix())}, backup.MetricVerifiedRevision: {s3: 777},
			}},
		{"a first backup elsewhere fails", backup.Outcome{Cluster: "homelab", Destination: "/backups/", BackupTried: true},
			map[string]map[string]float64{
				backup.MetricLastSuccess: {s3: float64(t1.Unix()), dir: 0}, backup.MetricSize: {s3: 4096},
				backup.MetricLastVerified: {s3: float64(t2.Unix())}, backup.MetricVerifiedRevision: {s3: 777},
			}},
		{"a first verify there fails too", backup.Outcome{Cluster: "homelab", Destination: "/backups/", VerifyTried: true},
			map[string]map[string]float64{
				backup.MetricLastSuccess: {s3: float64(t1.Unix()), dir: 0}, backup.MetricSize: {s3: 4096},
				backup.MetricLastVerified: {s3: float64(t2.Unix()), dir: 0}, backup.MetricVerifiedRevision: {s3: 777},
			}},
		{"backup etcd --verify succeeds there", backup.Outcome{Cluster: "homelab", Destination: "/backups/", BackupTried: true, BackupAt: t2, Size: 8192, VerifyTried: true, VerifiedAt: t2, Revision: 900},
			map[string]map[string]float64{
				backup.MetricLastSuccess: {s3: float64(t1.Unix()), dir: float64(t2.Unix())}, backup.MetricSize: {s3: 4096, dir: 8192},
				backup.MetricLastVerified: {s3: float64(t2.Unix()), dir: float64(t2.Unix())}, backup.MetricVerifiedRevision: {s3: 777, dir: 900},
			}},
	}
	for _, s := range steps {
		if err := backup.WriteMetrics(path, s.o); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := readProm(t, path)
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("after %s:\n got %v\nwant %v", s.name, got, s.want)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: %v, mode %v; want 0644 (node_exporter runs as another user)", path, err, fi.Mode())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if e.Name() != "devata_backup.prom" && strings.HasSuffix(e.Name(), ".prom") {
			t.Errorf("%s left beside the textfile: the collector would read it", e.Name())
		}
	}
}

// Jobs that finish at once each keep their update: the read, merge and
// write are done under a lock.
func TestWriteMetricsConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devata_backup.prom")
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- backup.WriteMetrics(path, backup.Outcome{Cluster: "c", Destination: fmt.Sprintf("s3://b/p%d/", i), BackupTried: true, BackupAt: time.Unix(1000, 0), Size: int64(i)})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := len(readProm(t, path)[backup.MetricSize]); got != n {
		t.Errorf("%d of %d concurrent runs' series are in the file: updates were lost", got, n)
	}
}

// A file devata backup did not write is refused and left as it was.
func TestWriteMetricsRefusesAnotherFile(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, content, want string }{
		{"drift's", "# TYPE devata_drift_exit_code gauge\ndevata_drift_exit_code{cluster=\"c\"} 0\n", "holds devata_drift_exit_code, which devata backup does not write"},
		{"garbage", "this is { not a textfile\n", "is not a Prometheus textfile"},
		{"other labels", "# TYPE devata_backup_size_bytes gauge\ndevata_backup_size_bytes{cluster=\"c\",destination=\"d\",job=\"x\"} 1\n", "that devata backup did not write"},
	} {
		path := filepath.Join(dir, c.name+".prom")
		if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		err := backup.WriteMetrics(path, backup.Outcome{Cluster: "c", Destination: "d/", BackupTried: true, BackupAt: time.Now(), Size: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s and saying %q", c.name, err, path, c.want)
		}
		if b, _ := os.ReadFile(path); string(b) != c.content {
			t.Errorf("%s: the file was changed to %q", c.name, b)
		}
	}
}

func TestMetricsDestination(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct{ in, want string }{
		{"s3://backups/homelab/", "s3://backups/homelab/"},
		{"s3://backups/homelab/?endpoint=http://10.0.0.5:9000&region=eu", "s3://backups/homelab/"},
		{"s3://backups/homelab/etcd-homelab-20261205T031700Z.db", "s3://backups/homelab/"},
		{"s3://backups/homelab", "s3://backups/"},
		{"s3://backups", "s3://backups/"},
		{"s3://AKIAEXAMPLE:s3cr3t@backups/homelab/", "s3://backups/homelab/"},
		{"file:///var/backups/etcd/", "file:///var/backups/etcd/"},
		{"/backups/", "/backups/"},
		{"/backups//etcd-x.db", "/backups/"},
		{dir, dir + "/"},
		{"rel/", filepath.Join(wd, "rel") + "/"},
	} {
		if got := backup.MetricsDestination(c.in); got != c.want {
			t.Errorf("MetricsDestination(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(backup.MetricsDestination(c.in), "s3cr3t") {
			t.Errorf("MetricsDestination(%q) keeps the secret", c.in)
		}
	}
}
