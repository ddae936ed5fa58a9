//go:build talosctl

package sim_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// The real talosctl v1.11.0's `etcd snapshot` (cmd/talosctl/cmd/talos/
// etcd.go) against the sim. It copies the stream to PATH.part (0600),
// checks only the size (`size % 512 == sha256.Size`, the sign that etcd's
// hash is there, not the hash itself), renames it to PATH and runs
// etcdutl's snapshot Status on it: bbolt opens the file, Check walks every
// page, and the key bucket's revisions and mvccpb.KeyValues are read. So
// the sim's snapshot passes as a real one: talosctl reports the sim's
// revision and one key per member. A corrupt stream of the right size
// passes too (talosctl never checks the sha256; etcdutl's restore would
// refuse the file), a cut one is refused and leaves no file, and a worker
// answers as machined does.
func TestTalosctlEtcdSnapshot(t *testing.T) {
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	dir := t.TempDir()
	tc := f.Talosconfig(t)
	ctx := tc.Contexts[tc.Context]
	ctx.Endpoints = []string{f.Overrides["cp-1"]}
	ctx.Nodes = []string{"cp-2"}
	tcPath := filepath.Join(dir, "talosconfig")
	if err := tc.Save(tcPath); err != nil {
		t.Fatal(err)
	}

	want, rev := f.Sim.EtcdSnapshotFile("cp-2")
	path := filepath.Join(dir, "db.snapshot")
	out, err := talosctlErr(bin, tcPath, "etcd", "snapshot", path)
	if err != nil {
		t.Fatalf("talosctl etcd snapshot: %v\n%s", err, out)
	}
	t.Logf("talosctl etcd snapshot:\n%s", out)
	for _, w := range []string{
		fmt.Sprintf("etcd snapshot saved to %q (%d bytes)", path, len(want)),
		fmt.Sprintf("revision %d, total keys 3, total size %d", rev, len(want)-32),
	} {
		if !strings.Contains(out, w) {
			t.Errorf("talosctl's output lacks %q:\n%s", w, out)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("saved snapshot: %v, %d bytes, want the sim's %d", err, len(got), len(want))
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("saved snapshot mode: %v %v, want 0600", st.Mode(), err)
	}

	f.Sim.Machine("cp-2").SetFaults(sim.Faults{EtcdSnapshotCorrupt: true})
	corrupt := filepath.Join(dir, "corrupt.snapshot")
	if out, err := talosctlErr(bin, tcPath, "etcd", "snapshot", corrupt); err != nil || !strings.Contains(out, "snapshot info: hash") {
		t.Errorf("talosctl on a corrupt stream of the right size: %v, want it accepted (talosctl checks the size only)\n%s", err, out)
	}

	f.Sim.Machine("cp-2").SetFaults(sim.Faults{EtcdSnapshotCutAt: 5000})
	cut := filepath.Join(dir, "cut.snapshot")
	out, err = talosctlErr(bin, tcPath, "etcd", "snapshot", cut)
	if err == nil || !strings.Contains(out, "sha256 checksum not found (size 5000)") {
		t.Errorf("talosctl on a cut stream: %v, want \"sha256 checksum not found (size 5000)\"\n%s", err, out)
	}
	for _, p := range []string{cut, cut + ".part"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left behind by a refused snapshot", p)
		}
	}

	out, err = talosctlErr(bin, tcPath, "-n", "worker-1", "etcd", "snapshot", filepath.Join(dir, "worker.snapshot"))
	if err == nil || !strings.Contains(out, "etcd snapshot is only available on control plane nodes") {
		t.Errorf("talosctl etcd snapshot on a worker: %v\n%s", err, out)
	}
}
