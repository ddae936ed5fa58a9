package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02T15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// entries are snapshots of cluster homelab at the given times, newest
// first as List gives them.
func entries(times ...string) []Entry {
	var out []Entry
	for _, s := range times {
		out = append(out, Entry{Name: s, Sidecar: Sidecar{Cluster: "homelab", Time: at(s)}})
	}
	slices.SortFunc(out, func(a, b Entry) int { return b.Sidecar.Time.Compare(a.Sidecar.Time) })
	return out
}

// The policy as restic's forget applies it (ApplyPolicy): each rule keeps
// the newest snapshot of each of its N newest periods, a rule with counts
// left keeps the oldest snapshot too, and a snapshot any rule keeps stays.
func TestPlan(t *testing.T) {
	// two a day at 04:00 and 16:00 from Monday 2026-11-02 to Saturday 2026-12-05
	var twiceDaily []string
	for d := at("2026-11-02T00:00"); !d.After(at("2026-12-05T00:00")); d = d.AddDate(0, 0, 1) {
		twiceDaily = append(twiceDaily, d.Add(4*time.Hour).Format("2006-01-02T15:04"), d.Add(16*time.Hour).Format("2006-01-02T15:04"))
	}
	for _, c := range []struct {
		name  string
		times []string
		p     Policy
		keep  map[string]string // kept name -> its reasons
	}{
		{"last 2", []string{"2026-12-05T04:00", "2026-12-04T04:00", "2026-12-03T04:00"}, Policy{Last: 2},
			map[string]string{"2026-12-05T04:00": "last", "2026-12-04T04:00": "last"}},
		{"last more than there are", []string{"2026-12-05T04:00", "2026-12-04T04:00"}, Policy{Last: 5},
			map[string]string{"2026-12-05T04:00": "last", "2026-12-04T04:00": "last"}},
		{"daily keeps each day's newest", []string{"2026-12-05T16:00", "2026-12-05T04:00", "2026-12-04T16:00", "2026-12-04T04:00", "2026-12-03T04:00"}, Policy{Daily: 2},
			map[string]string{"2026-12-05T16:00": "daily 2026-12-05", "2026-12-04T16:00": "daily 2026-12-04"}},
		{"daily with counts left keeps the oldest too", []string{"2026-12-05T16:00", "2026-12-05T04:00"}, Policy{Daily: 3},
			map[string]string{"2026-12-05T16:00": "daily 2026-12-05", "2026-12-05T04:00": "oldest daily 2026-12-05"}},
		{"days without a snapshot are not counted", []string{"2026-12-05T04:00", "2026-11-20T04:00", "2026-11-01T04:00"}, Policy{Daily: 2},
			map[string]string{"2026-12-05T04:00": "daily 2026-12-05", "2026-11-20T04:00": "daily 2026-11-20"}},
		{"weekly is the ISO week", []string{"2026-12-06T04:00", "2026-12-05T04:00", "2026-11-30T04:00", "2026-11-29T04:00", "2026-11-28T04:00"}, Policy{Weekly: 2},
			map[string]string{"2026-12-06T04:00": "weekly 2026-W49", "2026-11-29T04:00": "weekly 2026-W48"}},
		{"monthly", []string{"2026-12-05T04:00", "2026-12-01T04:00", "2026-11-30T04:00", "2026-11-01T04:00", "2026-10-31T04:00"}, Policy{Monthly: 2},
			map[string]string{"2026-12-05T04:00": "monthly 2026-12", "2026-11-30T04:00": "monthly 2026-11"}},
		{"rules together, reasons of each", twiceDaily, Policy{Last: 1, Daily: 3, Weekly: 2, Monthly: 2},
			map[string]string{
				"2026-12-05T16:00": "last, daily 2026-12-05, weekly 2026-W49, monthly 2026-12",
				"2026-12-04T16:00": "daily 2026-12-04",
				"2026-12-03T16:00": "daily 2026-12-03",
				"2026-11-29T16:00": "weekly 2026-W48",
				"2026-11-30T16:00": "monthly 2026-11",
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]string{}
			for _, d := range Plan(entries(c.times...), c.p) {
				if d.Keep {
					got[d.Name] = strings.Join(d.Why, ", ")
				} else if !slices.Equal(d.Why, []string{"no rule keeps it"}) {
					t.Errorf("%s deleted for %v", d.Name, d.Why)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.keep) {
				t.Errorf("kept\n%v\nwant\n%v", got, c.keep)
			}
		})
	}
}

// Each cluster's snapshots are a group of their own, and the newest
// snapshot whose restore was proven is kept whatever the policy.
func TestPlanGroupsAndProof(t *testing.T) {
	es := entries("2026-12-05T04:00", "2026-12-04T04:00", "2026-12-03T04:00", "2026-12-02T04:00")
	es[2].Sidecar.Verified = &Proof{Result: ResultRestored}
	es[3].Sidecar.Verified = &Proof{Result: ResultRestored}
	es[1].Sidecar.Verified = &Proof{Result: ResultFailed}
	other := Entry{Name: "staging", Sidecar: Sidecar{Cluster: "staging", Time: at("2026-12-01T04:00")}}
	es = append(es, other)
	got := map[string]string{}
	for _, d := range Plan(es, Policy{Last: 1}) {
		if d.Keep {
			got[d.Name] = strings.Join(d.Why, ", ")
		}
	}
	want := map[string]string{"2026-12-05T04:00": "last", "2026-12-03T04:00": NewestProven, "staging": "last"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kept %v, want %v", got, want)
	}
}

func TestPolicyCheck(t *testing.T) {
	if err := (Policy{}).Check(); !errors.Is(err, ErrEmptyPolicy) {
		t.Errorf("empty policy: %v", err)
	}
	if err := (Policy{Daily: -1}).Check(); err == nil || !strings.Contains(err.Error(), "--keep-daily -1") {
		t.Errorf("negative: %v", err)
	}
}

// pair writes a snapshot pair of cluster at t into dir, as backup etcd
// -o DIR/ names it.
func pair(t *testing.T, dir, cluster string, when time.Time) string {
	t.Helper()
	name := filepath.Base(OutPath(dir+"/", cluster, when))
	data := []byte("not read by list or prune " + name)
	writePair(t, dir, name, data, 7, []string{"cp-1"}, func(s *Sidecar) { s.Cluster, s.Time = cluster, when })
	return name
}

// List pairs snapshots with their sidecars and passes over everything
// else, saying why; prune dry-runs unless asked, then removes exactly
// the pairs the policy does not keep, and nothing else: not a file
// without a sidecar, not a link, not what a link points to.
func TestListAndPrune(t *testing.T) {
	dir := t.TempDir()
	var names []string
	for i := range 4 {
		names = append(names, pair(t, dir, "homelab", at("2026-12-05T04:00").AddDate(0, 0, -i)))
	}
	outside := filepath.Join(t.TempDir(), "elsewhere.db")
	pairOutside := pair(t, filepath.Dir(outside), "homelab", at("2026-11-01T04:00"))
	if err := os.Symlink(filepath.Join(filepath.Dir(outside), pairOutside), filepath.Join(dir, "linked.db")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(filepath.Dir(outside), SidecarPath(pairOutside)), filepath.Join(dir, "linked.db.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "talosctl-snapshot.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "orphan.db.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cut.db"), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeSidecar(filepath.Join(dir, "cut.db.json"), Sidecar{Cluster: "homelab", Time: at("2026-12-05T05:00"), Snapshot: "cut.db", Size: 99, SHA256: strings.Repeat("00", 32)}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "foreign.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "foreign.db.json"), []byte(`{"snapshot":"foreign.db","size":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.db"), 0o700); err != nil {
		t.Fatal(err)
	}

	cat, err := List(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, e := range cat.Entries {
		listed = append(listed, e.Name)
	}
	if !slices.Equal(listed, names) {
		t.Errorf("listed %v, want %v (newest first)", listed, names)
	}
	skipped := map[string]string{}
	for _, s := range cat.Skipped {
		skipped[s.Name] = s.Why
	}
	for name, why := range map[string]string{
		"talosctl-snapshot.db": "no sidecar",
		"orphan.db.json":       "a sidecar without its snapshot",
		"cut.db":               "it is 5 bytes where its sidecar says 99",
		"foreign.db":           "lacks the cluster, the time or the sha256",
	} {
		if !strings.Contains(skipped[name], why) {
			t.Errorf("%s skipped for %q, want %q", name, skipped[name], why)
		}
	}
	if _, ok := skipped["linked.db"]; ok || slices.Contains(listed, "linked.db") {
		t.Error("a link was listed")
	}

	if _, _, err := Prune(t.Context(), dir, Policy{}, true); !errors.Is(err, ErrEmptyPolicy) {
		t.Errorf("empty policy: %v", err)
	}
	before, _ := os.ReadDir(dir)
	res, _, err := Prune(t.Context(), dir, Policy{Last: 2}, false)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) || len(res.Deleted) != 0 {
		t.Errorf("a dry run removed something: %d -> %d entries", len(before), len(after))
	}
	res, _, err = Prune(t.Context(), dir, Policy{Last: 2}, true)
	if err != nil || len(res.Failed) != 0 {
		t.Fatalf("prune: %v %v", err, res.Failed)
	}
	if !slices.Equal(res.Deleted, names[2:]) {
		t.Errorf("deleted %v, want %v", res.Deleted, names[2:])
	}
	var left []string
	after, _ := os.ReadDir(dir)
	for _, e := range after {
		left = append(left, e.Name())
	}
	want := []string{"cut.db", "cut.db.json", "foreign.db", "foreign.db.json", "linked.db", "linked.db.json", names[1], names[1] + ".json", names[0], names[0] + ".json", "orphan.db.json", "sub.db", "talosctl-snapshot.db"}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left\n%v\nwant\n%v", left, want)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), pairOutside)); err != nil {
		t.Errorf("what a link points to: %v", err)
	}
}
