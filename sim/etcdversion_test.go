package sim_test

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"devata.dev/devata/sim"
)

// EtcdStatus reports the etcd each machine's Talos release runs
// (constants.DefaultEtcdVersion of v1.11.0, v1.13.9 and v1.14.1: 3.6.4,
// 3.6.12, 3.7.1), or the tag of the config's cluster.etcd.image, and the
// storage version etcd migrates to the cluster version, the lowest
// major.minor of its members (etcdserver/version/monitor.go): 3.6.0 while
// a member runs 3.6, whatever this member runs.
func TestEtcdStatusVersionPerRelease(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	pinned := patch(t, cp, "cluster:\n  etcd:\n    image: registry.k8s.io/etcd:v3.6.8\n")
	f := startWith(t, sim.Options{Machines: []sim.MachineSpec{
		{Name: "cp-1", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
		{Name: "cp-2", Role: "controlplane", Config: cp, TalosVersion: "v1.13.9"},
		{Name: "cp-3", Role: "controlplane", Config: cp, TalosVersion: "v1.11.0"},
		{Name: "cp-4", Role: "controlplane", Config: pinned, TalosVersion: "v1.14.1"},
	}})
	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	joined(t, f, 4)

	for name, want := range map[string]string{"cp-1": "3.7.1", "cp-2": "3.6.12", "cp-3": "3.6.4", "cp-4": "3.6.8"} {
		st := etcdStatus(t, admin(t, f.Machine(name).Addr()))
		if st.ProtocolVersion != want || st.StorageVersion != "3.6.0" {
			t.Errorf("%s: etcd %s, storage %s; want %s, 3.6.0", name, st.ProtocolVersion, st.StorageVersion, want)
		}
	}

	// the snapshot says what Status says
	if cluster, storage := snapshotVersions(t, f, "cp-1"); cluster != "3.6.0" || storage != "3.6.0" {
		t.Errorf("snapshot of a cluster with members on etcd 3.6: clusterVersion %q, storageVersion %q; want 3.6.0", cluster, storage)
	}
}

// snapshotVersions reads the cluster version (cluster bucket) and storage
// version (meta bucket) from the etcd snapshot of name's member, with bbolt
// as etcdutl opens it (the sim's trailing sha256 cut off, as etcd's
// snapshot restore does).
func snapshotVersions(t *testing.T, f *sim.Fleet, name string) (cluster, storage string) {
	t.Helper()

	file, _ := f.EtcdSnapshotFile(name)
	if len(file) < sha256.Size {
		t.Fatalf("%s: no snapshot", name)
	}

	path := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(path, file[:len(file)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}

	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close() //nolint:errcheck

	if err := db.View(func(tx *bolt.Tx) error {
		cluster = string(tx.Bucket([]byte("cluster")).Get([]byte("clusterVersion")))
		storage = string(tx.Bucket([]byte("meta")).Get([]byte("storageVersion")))

		return nil
	}); err != nil {
		t.Fatal(err)
	}

	return cluster, storage
}

// A cluster whose every member runs etcd 3.7 (Talos 1.14) has moved its
// storage to 3.7.0.
func TestEtcdStatusStorageVersion37(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := startWith(t, sim.Options{Machines: []sim.MachineSpec{
		{Name: "cp-1", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
		{Name: "cp-2", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
	}})
	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	joined(t, f, 2)

	for _, name := range []string{"cp-1", "cp-2"} {
		if st := etcdStatus(t, admin(t, f.Machine(name).Addr())); st.ProtocolVersion != "3.7.1" || st.StorageVersion != "3.7.0" {
			t.Errorf("%s: etcd %s, storage %s; want 3.7.1, 3.7.0", name, st.ProtocolVersion, st.StorageVersion)
		}
	}

	// its snapshot's meta and cluster buckets say 3.7.0 too (etcd's
	// schema.UnsafeSetStorageVersion and MustSaveClusterVersionToBackend
	// store the cluster version's major.minor), as etcdutl restores it
	if cluster, storage := snapshotVersions(t, f, "cp-2"); cluster != "3.7.0" || storage != "3.7.0" {
		t.Errorf("snapshot of an etcd 3.7 cluster: clusterVersion %q, storageVersion %q; want 3.7.0", cluster, storage)
	}
}
