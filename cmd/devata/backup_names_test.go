package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// backup prune and snapshots left without their sidecar (issue 34,
// leftover b): one older than --orphan-grace, named as devata names them,
// is shown in the dry run and deleted with --yes; a younger one (an upload
// may be in progress), a file devata did not name and a sidecar alone are
// left; the pair the policy keeps stays.
func TestBackupPruneOrphans(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	dir := t.TempDir() + "/"
	if r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", dir); r.code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	old := time.Now().Add(-50 * time.Hour)
	files := map[string]time.Time{
		"etcd-homelab-20261201T000000.000000000Z.db": old,        // interrupted two days ago
		"etcd-homelab-20261130T000000Z.db":           old,        // the layout before issue 34
		"etcd-homelab-20261206T000000.000000000Z.db": time.Now(), // in progress, maybe
		"notes.db":                              old, // not devata's name
		"etcd-homelab-20261129T000000Z.db.json": old, // a sidecar alone
	}
	for name, at := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	r := devata(t, nil, "backup", "prune", "--config", sf.settings, dir, "--keep-last", "1")
	show(t, r)
	if r.code != 0 {
		t.Fatalf("prune (dry run): exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "the dry run", r.stdout, "delete etcd-homelab-20261201T000000.000000000Z.db", "delete etcd-homelab-20261130T000000Z.db",
		"keep   etcd-homelab-20261206T000000.000000000Z.db", "younger than --orphan-grace 24h0m0s", "dry run: 2 snapshots without a sidecar would be deleted")
	lacks(t, "the dry run's notes", r.err, "note: notes.db", "note: etcd-homelab-20261129T000000Z.db.json")
	if strings.Contains(r.err, "note: etcd-homelab-20261201T000000.000000000Z.db") {
		t.Errorf("an orphan prune decides on is also noted as left alone:\n%s", r.err)
	}
	for name := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("the dry run removed %s", name)
		}
	}
	r = devata(t, nil, "backup", "prune", "--config", sf.settings, dir, "--keep-last", "1", "--yes", "-o", "json")
	var pj struct {
		Snapshots []struct{ Name string } `json:"snapshots"`
		Orphans   []struct {
			Name    string `json:"name"`
			Delete  bool   `json:"delete"`
			Deleted bool   `json:"deleted"`
		} `json:"orphans"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pj) != nil || len(pj.Orphans) != 3 || len(pj.Snapshots) != 1 {
		t.Fatalf("prune --yes -o json: exit %d, %+v\n%s%s", r.code, pj, r.stdout, r.err)
	}
	for name, at := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		gone := err != nil
		if want := at.Equal(old) && strings.HasPrefix(name, "etcd-") && strings.HasSuffix(name, ".db"); gone != want {
			t.Errorf("%s: gone %v, want %v", name, gone, want)
		}
	}
	if l := listDir(t, sf, dir); len(l.Snapshots) != 1 {
		t.Errorf("the pair: %+v, want it kept", l.Snapshots)
	}
	if r := devata(t, nil, "backup", "prune", "--config", sf.settings, dir, "--keep-last", "1", "--orphan-grace", "-1h"); r.code != 64 {
		t.Errorf("--orphan-grace -1h: exit %d, want 64", r.code)
	}
}
