package talosapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
	"devata.dev/devata/snapshot"
	"devata.dev/devata/talosapi"
)

// EtcdSnapshot on the sim: a whole snapshot is written, counted, hashed and
// verified, and its revision read back; a worker, a role that may not take
// snapshots, a corrupt and a cut stream each fail naming the machine and
// what to do, the last two as ErrSnapshotInvalid.
func TestEtcdSnapshot(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	ctx := context.Background()
	snap := func(d *talosapi.Dialer, name string) (talosapi.SnapshotInfo, []byte, error) {
		t.Helper()
		var buf bytes.Buffer
		info, err := talosapi.EtcdSnapshot(ctx, d, f.Inventory.Machine(name), &buf)
		return info, buf.Bytes(), err
	}

	info, data, err := snap(f.Dialer, "cp-2")
	if err != nil {
		t.Fatal(err)
	}
	want, rev := f.Sim.EtcdSnapshotFile("cp-2")
	sum := sha256.Sum256(data)
	if !bytes.Equal(data, want) || info.Size != int64(len(want)) || info.SHA256 != hex.EncodeToString(sum[:]) || info.Machine != "cp-2" || info.TalosVersion != "v1.11.0" {
		t.Errorf("snapshot %+v of %d bytes; want the sim's %d bytes, their sha256, cp-2, v1.11.0", info, len(data), len(want))
	}
	// the sim's file is a database bbolt itself reads (package snapshot)
	path := filepath.Join(t.TempDir(), "etcd.snapshot")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := snapshot.Verify(ctx, path)
	if err != nil || file.Revision != rev {
		t.Fatalf("snapshot.Verify = %+v, %v; want the cluster's revision %d", file, err, rev)
	}
	for _, m := range file.Members {
		if m.ID == 0 || m.IsLearner {
			t.Errorf("snapshot member %+v: want an ID, not a learner", m)
		}
	}
	if names := slices.Sorted(slices.Values(file.Voters())); !slices.Equal(names, []string{"cp-1", "cp-2", "cp-3"}) {
		t.Errorf("the snapshot's voters = %v; want cp-1, cp-2, cp-3", names)
	}

	if _, _, err := snap(f.Dialer, "worker-1"); err == nil || !strings.Contains(err.Error(), "etcd snapshot from worker-1: worker-1 is a worker") {
		t.Errorf("snapshot from a worker: %v", err)
	}

	// each role: os:reader is refused, naming its role and the one
	// needed; the others take the snapshot, os:etcd:backup without asking
	// for what it may not (Version), so without a Talos version
	for _, tc := range []struct {
		roles   role.Set
		version string
	}{
		{role.MakeSet(role.Reader), ""},
		{role.MakeSet(role.EtcdBackup), ""},
		{role.MakeSet(role.Operator), "v1.11.0"},
		{role.MakeSet(role.Admin), "v1.11.0"},
	} {
		d := roleDialer(t, f, tc.roles)
		cp1 := f.Sim.Machine("cp-1")
		versions := cp1.Calls("Version")
		info, data, err := snap(d, "cp-1")
		if tc.roles.Includes(role.Reader) {
			if !errors.Is(err, talosapi.ErrSnapshotNotAuthorized) {
				t.Fatalf("snapshot as os:reader: %v, want ErrSnapshotNotAuthorized", err)
			}
			for _, w := range []string{"etcd snapshot from cp-1", "the certificate's roles: os:reader", "os:etcd:backup", "talosctl config new --roles os:etcd:backup"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("snapshot as os:reader: %v, want %q", err, w)
				}
			}
			continue
		}
		if err != nil || len(data) != int(info.Size) || info.TalosVersion != tc.version {
			t.Errorf("snapshot as %v: %+v, %d bytes, %v; want it whole, Talos version %q", tc.roles.Strings(), info, len(data), err, tc.version)
		}
		if n := cp1.Calls("Version") - versions; tc.roles.Includes(role.EtcdBackup) && n != 0 {
			t.Errorf("snapshot as os:etcd:backup called Version %d times: the role may not", n)
		}
	}

	for _, tc := range []struct {
		faults sim.Faults
		want   string
	}{
		{sim.Faults{EtcdSnapshotCorrupt: true}, "the sha256 etcd appended does not match"},
		{sim.Faults{EtcdSnapshotCutAt: 5000}, "5000 bytes is not an etcd snapshot's size"},
		{sim.Faults{EtcdSnapshotCutAt: 4096 + 32}, "the sha256 etcd appended does not match"}, // the right shape, by chance
	} {
		f.Sim.Machine("cp-1").SetFaults(tc.faults)
		_, _, err := snap(f.Dialer, "cp-1")
		if !errors.Is(err, talosapi.ErrSnapshotInvalid) || !strings.Contains(err.Error(), "etcd snapshot from cp-1") || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "take the snapshot again") {
			t.Errorf("faults %+v: %v, want ErrSnapshotInvalid %q", tc.faults, err, tc.want)
		}
	}
}

// roleDialer dials the fleet with a client certificate of roles, as a
// talosconfig made by talosctl config new --roles would.
func roleDialer(t *testing.T, f *simtest.Fleet, roles role.Set) *talosapi.Dialer {
	t.Helper()
	crt, err := f.Bundle.GenerateTalosAPIClientCertificate(roles)
	if err != nil {
		t.Fatal(err)
	}
	d, err := talosapi.NewDialer(clientconfig.NewConfig("roles", nil, f.Bundle.Certs.OS.Crt, crt), f.Overrides)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
