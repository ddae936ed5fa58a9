package backup

import (
	"bytes"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
)

// A snapshot is the backup of what runs only when its members are the
// members the control planes agree on.
func TestSameMembers(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	data, _ := f.Sim.EtcdSnapshotFile("cp-1")
	if data == nil {
		t.Fatal("no snapshot from cp-1")
	}
	r, size := bytes.NewReader(data), int64(len(data))
	if err := sameMembers(r, size, []string{"cp-3", "cp-1", "cp-2"}); err != nil {
		t.Errorf("the cluster's own snapshot: %v", err)
	}
	err := sameMembers(r, size, []string{"cp-1", "cp-2", "cp-3", "cp-4"})
	if err == nil || !strings.Contains(err.Error(), "it holds 3 members (cp-1, cp-2, cp-3) where etcd reports 4 (cp-1, cp-2, cp-3, cp-4)") {
		t.Errorf("a snapshot taken before cp-4 joined: %v", err)
	}
	if err := sameMembers(bytes.NewReader(data[:8192]), 8192, []string{"cp-1"}); err == nil || !strings.Contains(err.Error(), "does not read") {
		t.Errorf("a cut snapshot: %v", err)
	}
}
