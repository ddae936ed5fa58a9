package backup

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// -o DIR/ (or an existing directory) names the snapshot after the cluster
// and the time to the nanosecond, so a schedule keeps every one; -o FILE
// is FILE.
func TestOutPath(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 4, 4, 5, 0, 0, time.FixedZone("CET", 3600))
	want := filepath.Join(dir, "etcd-homelab-20261204T030500.000000000Z.db")
	for _, out := range []string{dir, dir + "/"} {
		if got := OutPath(out, "homelab", at); got != want {
			t.Errorf("OutPath(%q) = %q, want %q", out, got, want)
		}
	}
	if got := OutPath(filepath.Join(dir, "etcd.db"), "homelab", at); got != filepath.Join(dir, "etcd.db") {
		t.Errorf("a file path is changed: %q", got)
	}
	if got := OutPath(filepath.Join(dir, "new")+"/", "homelab", at); got != filepath.Join(dir, "new", "etcd-homelab-20261204T030500.000000000Z.db") {
		t.Errorf("a directory to be made is not used as one: %q", got)
	}
}

// Two runs in the same second get two names (issue 34: they got one), and
// the names sort as the times do, across a change of second and with
// trailing zeros; SnapshotName reads back both layouts and nothing else.
func TestOutPathUniqueAndSorted(t *testing.T) {
	base := time.Date(2026, 12, 4, 4, 5, 0, 0, time.UTC)
	times := []time.Time{base, base.Add(time.Nanosecond), base.Add(10 * time.Millisecond), base.Add(100 * time.Millisecond),
		base.Add(999999999), base.Add(time.Second), base.Add(time.Second + 5*time.Microsecond), base.Add(24 * time.Hour)}
	var names []string
	for _, at := range times {
		names = append(names, filepath.Base(OutPath("/b/", "homelab", at)))
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("%s (at %s) does not sort before %s (at %s)", names[i-1], times[i-1].Format(time.RFC3339Nano), names[i], times[i].Format(time.RFC3339Nano))
		}
	}
	for i, name := range names {
		cluster, at, ok := SnapshotName(name)
		if !ok || cluster != "homelab" || !at.Equal(times[i]) {
			t.Errorf("SnapshotName(%q) = %q, %s, %v; want homelab, %s", name, cluster, at, ok, times[i])
		}
	}
	for name, want := range map[string]string{
		"etcd-homelab-20261204T040500Z.db":                "homelab", // before issue 34
		"etcd-my-lab-20261204T040500.123456789Z.db":       "my-lab",
		"etcd-homelab-20261204T040500.123Z.db":            "",
		"etcd-homelab-20261204T040500.123456789Z.db.json": "",
		"etcd-20261204T040500Z.db":                        "",
		"named.db":                                        "",
		"etcd-homelab-yesterday.db":                       "",
	} {
		cluster, _, ok := SnapshotName(name)
		if ok != (want != "") || cluster != want {
			t.Errorf("SnapshotName(%q) = %q, %v; want %q", name, cluster, ok, want)
		}
	}
}

// PrepareOut makes a directory named with a trailing slash (0700), and
// refuses, before anything is asked of a machine, a file whose directory
// is missing or is not one.
func TestPrepareOut(t *testing.T) {
	dir := t.TempDir()
	made := filepath.Join(dir, "backups", "etcd") + "/"
	if err := PrepareOut(made); err != nil {
		t.Fatalf("PrepareOut(%q): %v", made, err)
	}
	if st, err := os.Stat(made); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want a directory, 0700", made, st, err)
	}
	if err := PrepareOut(filepath.Join(dir, "etcd.db")); err != nil {
		t.Errorf("a file in an existing directory: %v", err)
	}
	missing := filepath.Join(dir, "nowhere", "etcd.db")
	if err := PrepareOut(missing); err == nil || !strings.Contains(err.Error(), "does not exist: create it (mkdir -p "+filepath.Join(dir, "nowhere")+")") {
		t.Errorf("PrepareOut(%q) = %v, want the directory named with what to do", missing, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere")); err == nil {
		t.Error("a file's missing directory was created")
	}
	file := filepath.Join(dir, "etcd.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrepareOut(filepath.Join(file, "x.db")); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file under a file: %v", err)
	}
}

// Probe 7 of issue 31: -o /dev/null --force turned /dev/null into a 0600
// file (as root). A device or a symbolic link is refused, with --force
// too, before any machine is asked; a pipe is written through, never
// replaced, and asks for no --force.
func TestCheckVacantRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "etcd.db")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"/dev/null", link} {
		if err := CheckVacant(out); err == nil || !strings.Contains(err.Error(), "devata replaces only regular files") {
			t.Errorf("CheckVacant(%s): %v", out, err)
		}
		if _, err := Etcd(t.Context(), Options{Out: out, Force: true}); err == nil || !strings.Contains(err.Error(), "devata replaces only regular files") {
			t.Errorf("Etcd -o %s --force: %v", out, err)
		}
	}
	fifo := filepath.Join(dir, "snapshot.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckVacant(fifo); err != nil {
		t.Errorf("a pipe: %v", err)
	}
}
