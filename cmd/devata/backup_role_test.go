package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/backup"
	"devata.dev/devata/gate"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
	"devata.dev/devata/snapshot"
)

// roleTalosconfig writes the sim fleet's talosconfig with a client
// certificate of roles in place of os:admin's, as talosctl config new
// --roles makes one, and returns its path.
func roleTalosconfig(t *testing.T, sf *simFleet, roles role.Set) string {
	t.Helper()
	tc, err := clientconfig.Open(filepath.Join(sf.Dir, "sim", "talosconfig"))
	if err != nil {
		t.Fatal(err)
	}
	crt, err := sf.Bundle.GenerateTalosAPIClientCertificate(roles)
	if err != nil {
		t.Fatal(err)
	}
	ctx := tc.Contexts[tc.Context]
	ctx.Crt, ctx.Key = base64.StdEncoding.EncodeToString(crt.Crt), base64.StdEncoding.EncodeToString(crt.Key)
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := tc.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// readBackup reads a backup's snapshot back as a restore would and its
// sidecar.
func readBackup(t *testing.T, out string) (*snapshot.File, []byte, backup.Sidecar) {
	t.Helper()
	file, err := snapshot.Verify(context.Background(), out)
	if err != nil {
		t.Fatalf("the snapshot at %s does not verify: %v", out, err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(backup.SidecarPath(out))
	if err != nil {
		t.Fatal(err)
	}
	var side backup.Sidecar
	if err := json.Unmarshal(raw, &side); err != nil {
		t.Fatalf("sidecar: %v\n%s", err, raw)
	}
	return file, data, side
}

// backup etcd with a talosconfig of each role: os:etcd:backup, the least,
// writes the same verified snapshot as os:operator and os:admin, and asks
// the machines nothing that role may not ask (no Version, ServiceList or
// resource), so its sidecar names no Talos version; os:reader is refused
// at the first control plane, naming its role and the one needed, and
// nothing is written.
func TestBackupEtcdWithEachRole(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	others := func() (n int) {
		for _, m := range sf.Sim.Machines() {
			n += m.Calls("Version") + m.Calls("ServiceList") + m.Calls("State.Get") + m.Calls("State.List") + m.Calls("State.Watch")
		}
		return n
	}
	for _, tc := range []struct {
		role    role.Role
		version string // in the sidecar
	}{
		{role.EtcdBackup, ""},
		{role.Operator, "v1.11.0"},
		{role.Admin, "v1.11.0"},
		{role.Reader, ""},
	} {
		t.Run(string(tc.role), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "etcd.db")
			before := others()
			r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--talosconfig", roleTalosconfig(t, sf, role.MakeSet(tc.role)), "--to", out)
			show(t, r)
			if tc.role == role.Reader {
				for _, w := range []string{"etcd snapshot from cp-1", "the talosconfig's role may not take etcd snapshots", "the certificate's roles: os:reader", "os:etcd:backup", "talosctl config new --roles os:etcd:backup", "nothing was written to " + out} {
					if !strings.Contains(r.err, w) {
						t.Errorf("stderr lacks %q:\n%s", w, r.err)
					}
				}
				if r.code != 2 || strings.Contains(r.err, "trying cp-2") || r.stdout != "" {
					t.Errorf("exit %d, want 2 at the first control plane, nothing on stdout:\n%s%s", r.code, r.stdout, r.err)
				}
				if entries, _ := os.ReadDir(dir); len(entries) != 0 {
					t.Errorf("left in FILE's directory: %v", entries)
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
			}
			_, data, side := readBackup(t, out)
			want, rev := sf.Sim.EtcdSnapshotFile("cp-1")
			if !bytes.Equal(data, want) || side.ControlPlane != "cp-1" || side.EtcdRevision != rev || side.NoQuorum ||
				!slices.Equal(side.Members, []string{"cp-1", "cp-2", "cp-3"}) || side.TalosVersion != tc.version {
				t.Errorf("%d bytes (want cp-1's %d), sidecar %+v; want cp-1, revision %d, all three members, Talos version %q", len(data), len(want), side, rev, tc.version)
			}
			if n := others() - before; tc.role == role.EtcdBackup && n != 0 {
				t.Errorf("with os:etcd:backup devata made %d calls besides etcd's (Version, ServiceList, COSI): the role may not", n)
			}
		})
	}
}

// Two control planes of three down: etcd has no quorum, and no member list
// answers. backup etcd still writes a verified snapshot, from the member
// that runs, with an os:admin talosconfig and with os:etcd:backup alone:
// it warns, says on its last line that etcd has no quorum and which
// member's copy it is, and the sidecar records noQuorum with the members
// the snapshot holds. The gate reports no quorum, not a healthy survivor.
func TestBackupEtcdWithoutQuorum(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	sf.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	for name, tcArgs := range map[string][]string{
		"os:admin":       nil,
		"os:etcd:backup": {"--talosconfig", roleTalosconfig(t, sf, role.MakeSet(role.EtcdBackup))},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "etcd.db")
			r := devata(t, nil, append([]string{"backup", "etcd", "--config", sf.settings, "--to", out}, tcArgs...)...)
			show(t, r)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
			}
			for _, w := range []string{"warning: etcd has no quorum: no member has a leader (cp-1 runs without one; cp-2, cp-3 are down)", "backing up from a member that still runs (cp-1)", "may lack the last writes"} {
				if !strings.Contains(r.err, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.err)
				}
			}
			if w := "etcd snapshot of homelab from cp-1 (etcd has no quorum: this is cp-1's local copy, taken without a leader) written to " + out; !strings.Contains(r.stdout, w) {
				t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
			}
			file, data, side := readBackup(t, out)
			want, rev := sf.Sim.EtcdSnapshotFile("cp-1")
			if !bytes.Equal(data, want) || file.Revision != rev {
				t.Errorf("%d bytes at revision %d, want cp-1's %d at %d", len(data), file.Revision, len(want), rev)
			}
			if !side.NoQuorum || side.ControlPlane != "cp-1" || side.EtcdRevision != rev || !slices.Equal(side.Members, []string{"cp-1", "cp-2", "cp-3"}) {
				t.Errorf("sidecar %+v; want noQuorum, cp-1, revision %d, the members the snapshot holds", side, rev)
			}
			raw, _ := os.ReadFile(backup.SidecarPath(out))
			if !strings.Contains(string(raw), `"noQuorum": true`) {
				t.Errorf("the sidecar's JSON does not say noQuorum:\n%s", raw)
			}
		})
	}

	v := gate.ObserveEtcd(context.Background(), sf.Inventory, sf.Dialer, 5*time.Second)
	if !v.NoQuorum() || len(v.Healthy) != 0 || v.Err() == nil || !strings.Contains(v.Err().Error(), "etcd has no quorum") {
		t.Errorf("the gate's view: %+v, err %v; want no quorum, nothing healthy", v, v.Err())
	}
	var qe *gate.QuorumError
	if err := gate.MayTakeDown(v, "cp-1"); !errors.As(err, &qe) || !strings.Contains(qe.Why, "etcd has no quorum") {
		t.Errorf("MayTakeDown(cp-1) without quorum: %v", err)
	}
	r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "etcd", "--machines", "cp-1")
	if r.code == 0 || !strings.Contains(r.stdout, "no quorum") {
		t.Errorf("drift --checks etcd on cp-1 without quorum: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}
