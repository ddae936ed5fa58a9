package backup

import (
	"strings"
	"testing"

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
