package talosapi

import (
	"crypto/sha256"
	"slices"
	"testing"
)

// TestSecretChangesTellsMovedFromChanged: a secret whose value sits
// unchanged at a new path has moved, not changed; one whose value differs,
// appears or goes has changed; a value held twice moves once per path.
func TestSecretChangesTellsMovedFromChanged(t *testing.T) {
	h := func(s string) [32]byte { return sha256.Sum256([]byte(s)) }
	active := map[string][32]byte{
		"machine.token":       h("t1"),
		"cluster.secret":      h("s1"),
		"cluster.aescbc":      h("k1"),
		"cluster.ca.key":      h("ca"),
		"cluster.etcd.ca.key": h("ca"),
		"machine.gone":        h("g1"),
		"cluster.rotated":     h("r1"),
	}
	desired := map[string][32]byte{
		"machine.token":              h("t1"), // same
		"KubeAPIServerConfig.secret": h("s1"), // moved
		"cluster.aescbc":             h("k2"), // rotated in place
		"ClusterCA.key":              h("ca"), // moved (one of the two holders)
		"cluster.etcd.ca.key":        h("ca"), // same
		"cluster.rotated2":           h("r2"), // new path, new value: changed
	}
	changed, moved := secretChanges(active, desired)
	if want := []string{"cluster.aescbc", "cluster.rotated", "cluster.rotated2", "machine.gone"}; !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	if want := []string{"cluster.ca.key → ClusterCA.key", "cluster.secret → KubeAPIServerConfig.secret"}; !slices.Equal(moved, want) {
		t.Errorf("moved %q, want %q", moved, want)
	}
	d := ConfigDiff{Text: "x", MovedSecrets: moved}
	if got, want := d.Summary(), "+0 -0 lines, 2 secrets moved unchanged (cluster.ca.key → ClusterCA.key, cluster.secret → KubeAPIServerConfig.secret)"; got != want {
		t.Errorf("Summary %q, want %q", got, want)
	}
}
