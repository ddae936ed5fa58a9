package reconcile_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/quick"

	"devata.dev/devata/inventory"
	"devata.dev/devata/reconcile"
)

// Every machine is owned by exactly one shard, control planes by shard 0,
// for any fleet and any shard count.
func TestShardsAreDisjointAndCoverTheFleet(t *testing.T) {
	prop := func(seed uint64, count uint8) bool {
		n := int(count%16) + 1
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		shards := make([]reconcile.Shard, n)
		for i := range shards {
			s, err := reconcile.ParseShard(fmt.Sprintf("%d/%d", i, n))
			if err != nil {
				t.Fatal(err)
			}
			shards[i] = s
		}
		for range 200 {
			m := &inventory.Machine{Name: randomName(r), Role: inventory.RoleWorker}
			if r.IntN(4) == 0 {
				m.Role = inventory.RoleControlPlane
			}
			owners := 0
			for i, s := range shards {
				if s.Owns(m) {
					owners++
					if m.IsControlPlane() && i != 0 {
						t.Errorf("control plane %s owned by shard %d", m.Name, i)
						return false
					}
				}
			}
			if owners != 1 {
				t.Errorf("%s (%s) owned by %d of %d shards", m.Name, m.Role, owners, n)
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 200}); err != nil {
		t.Error(err)
	}
}

// The hash spreads workers over the shards and is stable (FNV-1a of the name).
func TestShardOfIsStableAndSpreads(t *testing.T) {
	if got := reconcile.ShardOf("worker-1", false, 4); got != reconcile.ShardOf("worker-1", false, 4) {
		t.Fatal("unstable")
	}
	counts := make([]int, 4)
	for i := range 4000 {
		counts[reconcile.ShardOf(fmt.Sprintf("node-%04d", i), false, 4)]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Errorf("shard %d owns %d of 4000 workers", i, c)
		}
	}
}

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want reconcile.Shard
		bad  bool
	}{
		{in: "", want: reconcile.Shard{Index: 0, Count: 1}},
		{in: "0/1", want: reconcile.Shard{Index: 0, Count: 1}},
		{in: "2/3", want: reconcile.Shard{Index: 2, Count: 3}},
		{in: "3/3", bad: true},
		{in: "-1/3", bad: true},
		{in: "1/0", bad: true},
		{in: "1", bad: true},
		{in: "a/b", bad: true},
	} {
		got, err := reconcile.ParseShard(tc.in)
		if (err != nil) != tc.bad || !tc.bad && got != tc.want {
			t.Errorf("ParseShard(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func randomName(r *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-"
	b := make([]byte, 1+r.IntN(20))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}
