package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/backup"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/snapshottest"
	"devata.dev/devata/sim"
)

// backup etcd on the sim: the snapshot lands at FILE, 0600, as the cluster's
// etcd streamed it, and FILE.json says where it came from, nothing secret in
// it or in the output; a second run refuses to replace either without
// --force.
func TestBackupEtcd(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	out := filepath.Join(t.TempDir(), "etcd.db")
	r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", out)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, rev := sf.Sim.EtcdSnapshotFile("cp-1")
	if !bytes.Equal(data, want) {
		t.Errorf("FILE holds %d bytes, not the %d of cp-1's snapshot", len(data), len(want))
	}
	etcdSum := sha256.Sum256(data[:len(data)-sha256.Size])
	if !bytes.Equal(etcdSum[:], data[len(data)-sha256.Size:]) {
		t.Error("FILE's trailing sha256 is not etcd's hash of the rest")
	}
	for _, p := range []string{out, out + ".json"} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", p, err, st.Mode().Perm())
		}
	}
	for _, p := range []string{out + ".tmp", out + ".json.tmp"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}

	raw, err := os.ReadFile(out + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var meta backup.Sidecar
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatalf("sidecar: %v\n%s", err, raw)
	}
	sum := sha256.Sum256(data)
	invData, err := os.ReadFile(sf.Inventory.Path)
	if err != nil {
		t.Fatal(err)
	}
	invSum := sha256.Sum256(invData)
	invAbs, _ := filepath.Abs(sf.Inventory.Path)
	if meta.Cluster != "homelab" || meta.ControlPlane != "cp-1" || meta.Endpoint != sf.Overrides["cp-1"] ||
		meta.EtcdRevision != rev || !slices.Equal(meta.Members, []string{"cp-1", "cp-2", "cp-3"}) ||
		meta.Snapshot != "etcd.db" || meta.Size != int64(len(data)) || meta.SHA256 != hex.EncodeToString(sum[:]) ||
		meta.TalosVersion != "v1.11.0" || meta.KubernetesVersion != "v1.34.1" ||
		meta.Inventory != invAbs || meta.InventorySHA256 != hex.EncodeToString(invSum[:]) ||
		time.Since(meta.Time) > time.Minute {
		t.Errorf("sidecar:\n%s", raw)
	}
	for _, w := range []string{"etcd snapshot of homelab from cp-1 written to " + out, hex.EncodeToString(sum[:]), "members cp-1 cp-2 cp-3", "sidecar written to " + out + ".json"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
	for _, secret := range simtest.BundleSecrets(sf.Bundle) {
		if strings.Contains(r.stdout+r.err+string(raw), secret) {
			t.Errorf("a secret of the bundle is in the output or the sidecar: %.12s…", secret)
		}
	}

	again := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", out)
	if again.code != 2 || !strings.Contains(again.err, out+" exists") {
		t.Errorf("second run without --force: exit %d\n%s", again.code, again.err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Error("FILE changed without --force")
	}
	if forced := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", out, "--force"); forced.code != 0 {
		t.Errorf("--force: exit %d\n%s", forced.code, forced.err)
	}

	for _, args := range [][]string{{"backup", "etcd"}, {"backup", "etcd", "--to", out, "extra"}, {"backup", "nope"}} {
		if r := devata(t, nil, append(args, "--config", sf.settings)...); r.code != 64 {
			t.Errorf("devata %s: exit %d, want 64\n%s", strings.Join(args, " "), r.code, r.err)
		}
	}
}

// A corrupt stream and a cut one are refused from every control plane in
// turn, each named with what went wrong, and nothing is left at FILE.
func TestBackupEtcdRefusesCorruptAndCutSnapshots(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("cp-1").SetFaults(sim.Faults{EtcdSnapshotCorrupt: true})
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{EtcdSnapshotCutAt: 5000})
	sf.Sim.Machine("cp-3").SetFaults(sim.Faults{EtcdSnapshotCorrupt: true})
	dir := t.TempDir()
	out := filepath.Join(dir, "etcd.db")
	r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", out)
	show(t, r)
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", r.code, r.stdout, r.err)
	}
	for _, w := range []string{
		"etcd snapshot from cp-1: not a whole etcd snapshot: the sha256 etcd appended does not match",
		"etcd snapshot from cp-2: not a whole etcd snapshot: 5000 bytes is not an etcd snapshot's size",
		"trying cp-2", "trying cp-3", "etcd snapshot from cp-3",
		"no verified etcd snapshot from cp-1, cp-2, cp-3 (why is above); nothing was written to " + out,
	} {
		if !strings.Contains(r.err, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.err)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout of a failed backup:\n%s", r.stdout)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in FILE's directory: %v", entries)
	}
}

// Probe 2 of issue 31, through a hostile control plane: cp-1 streams a
// crafted file with etcd's sha256 (a two-way fan-out over 63 levels) that
// kept the old page walker spinning forever on the first member. It is
// refused, named, and the backup comes from cp-2.
func TestBackupEtcdPassesOverAHostileStream(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("cp-1").SetFaults(sim.Faults{EtcdSnapshotData: snapshottest.Fanout(63)})
	out := filepath.Join(t.TempDir(), "etcd.db")
	r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", out)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, w := range []string{"etcd snapshot from cp-1", "is reached twice", "not a database etcd wrote", "trying cp-2"} {
		if !strings.Contains(r.err, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.err)
		}
	}
	raw, err := os.ReadFile(out + ".json")
	var meta backup.Sidecar
	if err != nil || json.Unmarshal(raw, &meta) != nil || meta.ControlPlane != "cp-2" {
		t.Errorf("sidecar: %v\n%s; want the snapshot from cp-2", err, raw)
	}
}

// A control plane that is down is passed over, and so is one whose stream
// breaks: the backup comes from the next healthy member, and says why.
// Without etcd bootstrapped there is nothing to back up, and it says so.
func TestBackupEtcdPicksAnotherControlPlane(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("cp-1").SetFaults(sim.Faults{Unreachable: true})
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{EtcdSnapshotCutAt: 1024})
	out := filepath.Join(t.TempDir(), "etcd.db")
	r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", out)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, w := range []string{"warning: etcd is not wholly healthy", "cp-1", "etcd snapshot from cp-2", "trying cp-3"} {
		if !strings.Contains(r.err, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.err)
		}
	}
	raw, err := os.ReadFile(out + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var meta backup.Sidecar
	if err := json.Unmarshal(raw, &meta); err != nil || meta.ControlPlane != "cp-3" {
		t.Errorf("sidecar: %v\n%s; want the snapshot from cp-3", err, raw)
	}

	fresh := startSim(t, simtest.Options{})
	r = devata(t, nil, "backup", "etcd", "--config", fresh.settings, "--to", filepath.Join(t.TempDir(), "etcd.db"))
	if r.code != 2 || !strings.Contains(r.err, "run devata bootstrap") {
		t.Errorf("before bootstrap: exit %d, want 2 naming devata bootstrap\n%s", r.code, r.err)
	}
}

// -o DIR/ writes etcd-CLUSTER-TIME.db there (DIR made on the first run,
// as a schedule finds a fresh volume), so a schedule (the CronJob in
// deploy/) keeps every snapshot; two runs give two files. A file whose
// directory is missing is refused before any machine is asked.
func TestBackupEtcdIntoADirectory(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	calls := func(m *sim.Machine) int {
		return m.Calls("EtcdSnapshot") + m.Calls("EtcdMemberList") + m.Calls("Version")
	}
	before := map[string]int{}
	for _, m := range sf.Sim.Machines() {
		before[m.Name()] = calls(m)
	}
	missing := filepath.Join(t.TempDir(), "nowhere", "etcd.db")
	if r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", missing); r.code != 2 || !strings.Contains(r.err, "does not exist: create it") {
		t.Errorf("-o in a missing directory: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, m := range sf.Sim.Machines() {
		if n := calls(m) - before[m.Name()]; n != 0 {
			t.Errorf("%s was asked %d times before -o was found unwritable", m.Name(), n)
		}
	}
	dir := filepath.Join(t.TempDir(), "backups", "etcd") + "/"
	for range 2 {
		if r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", dir); r.code != 0 {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
		}
		// no pause: the names have the nanosecond (issue 34)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "etcd-"+sf.Inventory.Cluster.Name+"-*Z.db"))
	sidecars, _ := filepath.Glob(filepath.Join(dir, "etcd-*.db.json"))
	if len(snaps) != 2 || len(sidecars) != 2 {
		t.Errorf("two runs into %s left %v and %v, want two snapshots and two sidecars", dir, snaps, sidecars)
	}
}
