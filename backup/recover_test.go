package backup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/snapshot"
)

// Probe 3 of issue 31: a snapshot of cluster staging (members stg-cp-*,
// sidecar "cluster": "staging") was uploaded to homelab's control plane.
// It is refused, naming what gives it away, and saying what to do.
func TestCheckSnapshotOf(t *testing.T) {
	inv, err := inventory.Load(filepath.Join("..", "examples", "homelab", "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	members := func(names ...string) *snapshot.File {
		f := &snapshot.File{}
		for i, n := range names {
			f.Members = append(f.Members, snapshot.Member{ID: uint64(i + 1), Name: n})
		}
		return f
	}
	own := members("cp-1", "cp-2", "cp-3")
	if err := CheckSnapshotOf(inv, own, &Sidecar{Cluster: "homelab"}); err != nil {
		t.Errorf("homelab's own snapshot: %v", err)
	}
	if err := CheckSnapshotOf(inv, members("cp-2"), nil); err != nil {
		t.Errorf("a one-member snapshot of homelab, without a sidecar: %v", err)
	}
	for _, c := range []struct {
		name string
		f    *snapshot.File
		side *Sidecar
		want string
	}{
		{"staging's members", members("stg-cp-1", "stg-cp-2", "stg-cp-3"), nil, `its etcd members "stg-cp-1", "stg-cp-2", "stg-cp-3" are not control planes of the inventory (cp-1, cp-2, cp-3)`},
		{"staging's sidecar", own, &Sidecar{Cluster: "staging"}, `its sidecar names cluster "staging", the inventory "homelab"`},
		{"a worker's name among the members", members("cp-1", "worker-1"), nil, `"worker-1" are not control planes`},
	} {
		err := CheckSnapshotOf(inv, c.f, c.side)
		if !errors.Is(err, ErrForeignSnapshot) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--foreign-snapshot") {
			t.Errorf("%s: %v, want %q and the flag that overrides it", c.name, err, c.want)
		}
	}
}

// A sidecar is read as every file devata reads, and one that is not a
// sidecar is refused without quoting it.
func TestReadSidecar(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "etcd.db")
	if s, err := ReadSidecar(snap); s != nil || err != nil {
		t.Errorf("no sidecar: %+v, %v", s, err)
	}
	if err := os.WriteFile(SidecarPath(snap), []byte(`{"cluster":"homelab","members":["cp-1"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadSidecar(snap); err != nil || s.Cluster != "homelab" {
		t.Errorf("a sidecar: %+v, %v", s, err)
	}
	if err := os.WriteFile(SidecarPath(snap), []byte("token: s3cr3t-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSidecar(snap); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("not a sidecar: %v", err)
	}
}
