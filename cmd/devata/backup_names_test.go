package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/backup"
	"devata.dev/devata/internal/simtest"
)

// Two backup etcd --to DIR/ runs one after the other (issue 34: in the
// same second they got the same name, and the second run was refused):
// two snapshots, named in the order they were taken, both listed.
// TestOutPathUniqueAndSorted holds the names of one second apart.
func TestBackupEtcdDirTwiceInASecond(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	dir := t.TempDir() + "/"
	var names []string
	for i := range 2 {
		r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", dir)
		if r.code != 0 {
			t.Fatalf("backup %d: exit %d\n%s%s", i, r.code, r.stdout, r.err)
		}
		_, after, _ := strings.Cut(r.stdout, "written to "+filepath.Clean(dir)+"/")
		name, _, _ := strings.Cut(after, ":")
		if _, _, ok := backup.SnapshotName(name); !ok {
			t.Fatalf("backup %d wrote %q, not a name of etcd-CLUSTER-TIME.db:\n%s", i, name, r.stdout)
		}
		names = append(names, name)
	}
	_, t0, _ := backup.SnapshotName(names[0])
	_, t1, _ := backup.SnapshotName(names[1])
	t.Logf("names %v (same second: %v)", names, t0.Unix() == t1.Unix())
	if names[0] >= names[1] {
		t.Errorf("the second run's name %s does not sort after the first's %s", names[1], names[0])
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Errorf("%s holds %d entries, want two snapshots and their sidecars", dir, len(entries))
	}
	l := listDir(t, sf, dir)
	if len(l.Snapshots) != 2 || l.Snapshots[0].Name != names[1] || l.Snapshots[1].Name != names[0] {
		t.Errorf("list: %+v, want %s then %s (newest first)", l.Snapshots, names[1], names[0])
	}
}
