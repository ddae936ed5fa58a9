package backup

import (
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/snapshot"
)

// A snapshot is the backup of what runs only when its voting members are
// the members the control planes agree on; names read from the snapshot
// reach a terminal escaped.
func TestSameMembers(t *testing.T) {
	f := &snapshot.File{Members: []snapshot.Member{{ID: 1, Name: "cp-1"}, {ID: 2, Name: "cp-2"}, {ID: 3, Name: "cp-3"}, {ID: 4, Name: "cp-4", IsLearner: true}}}
	if err := sameMembers(f, []string{"cp-3", "cp-1", "cp-2"}); err != nil {
		t.Errorf("the cluster's own snapshot: %v", err)
	}
	err := sameMembers(f, []string{"cp-1", "cp-2", "cp-3", "cp-4"})
	if err == nil || !strings.Contains(err.Error(), "it holds 3 members (cp-1, cp-2, cp-3) where etcd reports 4 (cp-1, cp-2, cp-3, cp-4)") {
		t.Errorf("a snapshot taken before cp-4 joined: %v", err)
	}
	hostile := &snapshot.File{Members: []snapshot.Member{{ID: 1, Name: "cp-1\x1b]0;pwned\x07\nfake line"}}}
	if err := sameMembers(hostile, []string{"cp-1"}); err == nil || strings.ContainsAny(err.Error(), "\x1b\x07\n") {
		t.Errorf("a member name with control characters: %q", err)
	}
}

// Without quorum no member list tells etcd's members: a snapshot is taken
// as the member's own copy only when it holds that member and every member
// it holds is a control plane of the inventory.
func TestOwnCopy(t *testing.T) {
	inv, err := inventory.Load(filepath.Join("..", "examples", "homelab", "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f := &snapshot.File{Members: []snapshot.Member{{ID: 1, Name: "cp-1"}, {ID: 2, Name: "cp-2"}, {ID: 3, Name: "cp-3"}, {ID: 4, Name: "cp-9", IsLearner: true}}}
	if err := ownCopy(f, "cp-2", inv); err != nil {
		t.Errorf("cp-2's own copy: %v", err)
	}
	for _, tc := range []struct {
		name string
		f    *snapshot.File
		from string
		want string
	}{
		{"another member's", &snapshot.File{Members: []snapshot.Member{{ID: 1, Name: "cp-1"}}}, "cp-2", "it holds 1 member (cp-1), not cp-2, which streamed it"},
		{"another cluster's", &snapshot.File{Members: []snapshot.Member{{ID: 1, Name: "cp-2"}, {ID: 2, Name: "stg-cp-1"}}}, "cp-2", "its members stg-cp-1 are not control planes of the inventory (cp-1, cp-2, cp-3)"},
	} {
		if err := ownCopy(tc.f, tc.from, inv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
