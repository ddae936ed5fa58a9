package backup

import (
	"path/filepath"
	"testing"
	"time"
)

// -o DIR/ (or an existing directory) names the snapshot after the cluster
// and the time, so a schedule keeps every one; -o FILE is FILE.
func TestOutPath(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 4, 4, 5, 0, 0, time.FixedZone("CET", 3600))
	want := filepath.Join(dir, "etcd-homelab-20261204T030500Z.db")
	for _, out := range []string{dir, dir + "/"} {
		if got := OutPath(out, "homelab", at); got != want {
			t.Errorf("OutPath(%q) = %q, want %q", out, got, want)
		}
	}
	if got := OutPath(filepath.Join(dir, "etcd.db"), "homelab", at); got != filepath.Join(dir, "etcd.db") {
		t.Errorf("a file path is changed: %q", got)
	}
	if got := OutPath(filepath.Join(dir, "new")+"/", "homelab", at); got != filepath.Join(dir, "new", "etcd-homelab-20261204T030500Z.db") {
		t.Errorf("a directory to be made is not used as one: %q", got)
	}
}
