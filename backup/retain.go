package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Policy is a grandfather-father-son retention policy, restic forget's
// --keep-last/--keep-daily/--keep-weekly/--keep-monthly, with restic's
// semantics (ApplyPolicy in restic's internal/data/snapshot_policy.go):
// newest first, each rule keeps the newest snapshot of each of its N most
// recent periods that hold one (Last: each snapshot is its own period),
// and a rule with counts left when the oldest snapshot is reached keeps
// that one too ("oldest"); a snapshot any rule keeps is kept. Periods are
// UTC days, ISO weeks and months (restic uses the local time zone; a
// schedule's snapshots are named in UTC). The policy applies to each
// cluster's snapshots on its own, as restic groups by host.
type Policy struct {
	Last, Daily, Weekly, Monthly int
}

// ErrEmptyPolicy is returned for a policy that keeps nothing: prune never
// deletes every snapshot.
var ErrEmptyPolicy = errors.New("no --keep-last, --keep-daily, --keep-weekly or --keep-monthly given: prune deletes nothing without a policy that keeps something")

// Check refuses a negative count or an empty policy.
func (p Policy) Check() error {
	for _, r := range []struct {
		flag string
		n    int
	}{{"--keep-last", p.Last}, {"--keep-daily", p.Daily}, {"--keep-weekly", p.Weekly}, {"--keep-monthly", p.Monthly}} {
		if r.n < 0 {
			return fmt.Errorf("%s %d: give a count of 0 or more", r.flag, r.n)
		}
	}
	if p == (Policy{}) {
		return ErrEmptyPolicy
	}
	return nil
}

func (p Policy) String() string {
	var parts []string
	for _, r := range []struct {
		n    int
		what string
	}{{p.Last, "last"}, {p.Daily, "daily"}, {p.Weekly, "weekly"}, {p.Monthly, "monthly"}} {
		if r.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", r.n, r.what))
		}
	}
	return "keep " + strings.Join(parts, ", ")
}

// Decision is what prune does with one snapshot pair, and why.
type Decision struct {
	Entry
	Keep bool
	// Why are the rules that keep it ("last", "daily 2026-12-05", …), or
	// why it goes.
	Why []string
}

// NewestProven is the reason the newest snapshot whose restore was proven
// is kept whatever the policy: it is the one a rebuild would reach for.
const NewestProven = "newest proven restore"

// Plan applies p to entries (newest first, as List gives them), each
// cluster on its own, and keeps besides each cluster's newest snapshot
// whose restore was proven (backup verify). The decisions are in entries'
// order.
func Plan(entries []Entry, p Policy) []Decision {
	type bucket struct {
		count int
		key   func(t time.Time, nr int) string
		last  string
		why   string
	}
	byCluster := map[string][]int{}
	var order []string
	for i, e := range entries {
		c := e.Sidecar.Cluster
		if _, ok := byCluster[c]; !ok {
			order = append(order, c)
		}
		byCluster[c] = append(byCluster[c], i)
	}
	out := make([]Decision, len(entries))
	for _, c := range order {
		idx := byCluster[c]
		buckets := []*bucket{
			{p.Last, func(_ time.Time, nr int) string { return fmt.Sprint(nr) }, "", "last"},
			{p.Daily, func(t time.Time, _ int) string { return t.UTC().Format("2006-01-02") }, "", "daily"},
			{p.Weekly, func(t time.Time, _ int) string {
				y, w := t.UTC().ISOWeek()
				return fmt.Sprintf("%d-W%02d", y, w)
			}, "", "weekly"},
			{p.Monthly, func(t time.Time, _ int) string { return t.UTC().Format("2006-01") }, "", "monthly"},
		}
		proven := false
		for nr, i := range idx {
			e := entries[i]
			d := Decision{Entry: e}
			oldest := nr == len(idx)-1
			for _, b := range buckets {
				if b.count <= 0 {
					continue
				}
				key := b.key(e.Sidecar.Time, nr)
				if key == b.last && !oldest {
					continue
				}
				why := b.why
				if b.why != "last" {
					why += " " + key
				}
				if key == b.last {
					why = "oldest " + why
				}
				d.Keep, b.last = true, key
				b.count--
				d.Why = append(d.Why, why)
			}
			if v := e.Sidecar.Verified; !proven && v != nil && v.Result == ResultRestored {
				proven = true
				if !d.Keep {
					d.Keep = true
					d.Why = append(d.Why, NewestProven)
				}
			}
			if !d.Keep {
				d.Why = []string{"no rule keeps it"}
			}
			out[i] = d
		}
	}
	return out
}

// PruneResult is what Prune decided and did.
type PruneResult struct {
	Decisions []Decision
	// Deleted are the snapshot pairs removed (with --yes).
	Deleted []string
	// Failed are the pairs that could not be removed, with why.
	Failed map[string]error
}

// Prune applies p to the snapshot pairs in the directory dir; with
// delete it removes each pair that no rule keeps, the snapshot then its
// sidecar, and goes on past a pair it could not remove. Without delete it
// only decides (a dry run). Nothing that is not a devata snapshot pair
// (List) is ever removed.
func Prune(ctx context.Context, dir string, p Policy, delete bool) (*PruneResult, *Catalog, error) {
	return pruneStore(ctx, dirStore{dir}, p, delete)
}

func pruneStore(ctx context.Context, st store, p Policy, delete bool) (*PruneResult, *Catalog, error) {
	if err := p.Check(); err != nil {
		return nil, nil, err
	}
	cat, err := listStore(ctx, st)
	if err != nil {
		return nil, nil, err
	}
	res := &PruneResult{Decisions: Plan(cat.Entries, p), Failed: map[string]error{}}
	if !delete {
		return res, cat, nil
	}
	for _, d := range res.Decisions {
		if d.Keep {
			continue
		}
		if err := ctx.Err(); err != nil {
			res.Failed[d.Name] = err
			continue
		}
		if err := st.Delete(ctx, d.Name); err != nil {
			res.Failed[d.Name] = err
			continue
		}
		if err := st.Delete(ctx, SidecarPath(d.Name)); err != nil {
			res.Failed[d.Name] = fmt.Errorf("the snapshot is removed, its sidecar is not: %w", err)
			continue
		}
		res.Deleted = append(res.Deleted, d.Name)
	}
	return res, cat, nil
}
