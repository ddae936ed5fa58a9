package bootstrap

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// A control plane whose etcd runs without a leader (no quorum) holds data:
// it is never read as "no data", and since it cannot say whose cluster it
// is, a fleet where no member lists members is unclear, never bootstrapped,
// and says why and what to do. Beside members that do list them, it does
// not make the verdict foreign.
func TestEtcdVerdictWithoutQuorum(t *testing.T) {
	inv, err := inventory.Load(filepath.Join("..", "examples", "homelab", "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	noLeader := &talosapi.Observation{
		EtcdErr:   fmt.Errorf("%w: etcd member list: etcdserver: no leader (Unknown)", talosapi.ErrEtcdNoLeader),
		EtcdLocal: &talosapi.EtcdMemberStatus{MemberID: 7, Errors: []string{"etcdserver: no leader"}},
	}
	fact := etcdFactOf(noLeader)
	if !fact.HasData || !fact.NoLeader || fact.None || fact.Err != nil || !strings.Contains(fact.Seen, "no leader, so no quorum") {
		t.Fatalf("fact of a member without a leader: %+v; want data, no leader, clear", fact)
	}
	listing := etcdFact{HasData: true, Members: []string{"cp-1", "cp-2", "cp-3"}, Seen: "EtcdMemberList answers: members [cp-1 cp-2 cp-3]"}
	down := etcdFact{Err: fmt.Errorf("talos api: not reachable"), Seen: "did not answer: talos api: not reachable"}
	for _, tc := range []struct {
		name  string
		facts map[string]etcdFact
		want  verdict
		says  string
	}{
		{"none leads", map[string]etcdFact{"cp-1": fact, "cp-2": fact, "cp-3": fact}, etcdUnclear,
			"etcd exists on cp-1, cp-2, cp-3 but has no leader, so no quorum, and no member list answers: nothing is bootstrapped over its data; bring back the control planes that are down"},
		{"two down", map[string]etcdFact{"cp-1": fact, "cp-2": down, "cp-3": down}, etcdUnclear,
			"etcd exists on cp-1 but has no leader, so no quorum, and no member list answers: nothing is bootstrapped over its data; bring back the control planes that are down (etcd elects a leader once more than half of its members run), then run again; these did not answer clearly: cp-2: did not answer"},
		{"one without a leader for a moment", map[string]etcdFact{"cp-1": fact, "cp-2": listing, "cp-3": listing}, etcdOurs,
			"etcd exists: cp-2, cp-3 report members [cp-1 cp-2 cp-3]"},
	} {
		st := &fleetState{obs: map[string]*talosapi.Observation{}, etcd: tc.facts}
		for name := range tc.facts {
			st.obs[name] = &talosapi.Observation{}
		}
		got, why := etcdVerdict(inv, st)
		if got != tc.want || !strings.Contains(why, tc.says) {
			t.Errorf("%s: verdict %d %q; want %d saying %q", tc.name, got, why, tc.want, tc.says)
		}
	}
}
