package backup

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/gate"
)

// The sidecar is written 0600, whole, over an older one, with the field
// names a restore reads; nothing is left beside it.
func TestWriteSidecar(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etcd.db.json")
	if err := os.WriteFile(path, []byte("older"), 0o644); err != nil {
		t.Fatal(err)
	}
	meta := Sidecar{
		Cluster: "homelab", Time: time.Unix(0, 0).UTC(), ControlPlane: "cp-1", Endpoint: "10.0.0.11:50000",
		Members: []string{"cp-1"}, Snapshot: "etcd.db", Size: 1056, SHA256: "ab", TalosVersion: "v1.11.0",
		KubernetesVersion: "v1.34.1", Inventory: "/inv.yaml", InventorySHA256: "cd",
	}
	if err := writeSidecar(path, meta); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, mode %v; want 0600", path, err, st.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	for _, k := range []string{"cluster", "time", "controlPlane", "endpoint", "members", "snapshot", "size", "sha256", "talosVersion", "kubernetesVersion", "inventory", "inventorySha256"} {
		if _, ok := got[k]; !ok {
			t.Errorf("sidecar lacks %q:\n%s", k, raw)
		}
	}
	if _, ok := got["etcdRevision"]; ok {
		t.Errorf("an unknown revision is written:\n%s", raw)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("beside the sidecar: %v", entries)
	}
}

// A backup is taken from the healthy members while some are down, from a
// member that still runs when etcd has no quorum, and not from an etcd
// never bootstrapped, split, or with no healthy member.
func TestSources(t *testing.T) {
	for _, tc := range []struct {
		name string
		view gate.EtcdView
		want string // the sources, or a part of the error
	}{
		{"healthy", gate.EtcdView{Members: []string{"cp-1", "cp-2"}, Healthy: []string{"cp-1", "cp-2"}}, "cp-1 cp-2"},
		{"one down", gate.EtcdView{Members: []string{"cp-1", "cp-2"}, Healthy: []string{"cp-2"}, Down: []string{"cp-1"}}, "cp-2"},
		{"not bootstrapped", gate.EtcdView{NotBootstrapped: []string{"cp-1"}}, "run devata bootstrap"},
		{"split", gate.EtcdView{Problems: []string{"cp-1 and cp-2 disagree"}}, "do not agree on etcd's members"},
		{"none healthy", gate.EtcdView{Members: []string{"cp-1"}}, "no etcd member is healthy"},
		{"no quorum", gate.EtcdView{NoLeader: []string{"cp-3"}, Down: []string{"cp-1", "cp-2"}}, "cp-3"},
	} {
		got, err := sourcesOf(tc.view)
		if err != nil {
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
			continue
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, s, tc.want)
		}
	}
}
