package reconcile

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"devata.dev/devata/inventory"
)

// Shard is one part of a fleet split for large installations: shard Index of
// Count owns the workers whose name hashes to Index, and shard 0 owns every
// control plane too, so that control-plane rollouts (one at a time, gated on
// etcd) are never split between processes. The zero value owns everything.
type Shard struct {
	Index, Count int
}

// ParseShard reads "i/N" (0 ≤ i < N); "" is the whole fleet.
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return Shard{Index: 0, Count: 1}, nil
	}
	is, ns, ok := strings.Cut(s, "/")
	i, ierr := strconv.Atoi(is)
	n, nerr := strconv.Atoi(ns)
	if !ok || ierr != nil || nerr != nil || n < 1 || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("--shard %q: want i/N with 0 <= i < N, e.g. 0/3", s)
	}
	return Shard{Index: i, Count: n}, nil
}

// String is the "i/N" form.
func (s Shard) String() string {
	if s.Count < 1 {
		return "0/1"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Owns reports whether the shard acts on (and observes) the machine.
func (s Shard) Owns(m *inventory.Machine) bool {
	return ShardOf(m.Name, m.IsControlPlane(), s.Count) == s.Index
}

// ShardOf is the shard of count that owns a machine: 0 for a control plane,
// otherwise the 32-bit FNV-1a hash of the name modulo count. The hash depends
// on the name alone, so adding or removing another machine never moves it.
func ShardOf(name string, controlPlane bool, count int) int {
	if count <= 1 || controlPlane {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(name)) //nolint:errcheck // hash writes never fail
	return int(h.Sum32() % uint32(count))
}
