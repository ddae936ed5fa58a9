package backup

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Entry is a devata snapshot pair in a store: the snapshot Name and its
// sidecar, Name+".json", which names it and gives its size.
type Entry struct {
	Name    string
	Sidecar Sidecar
}

// Skipped is an object of a store that is not part of a devata snapshot
// pair, and why: list shows it, prune never touches it.
type Skipped struct {
	Name string `json:"name"`
	Why  string `json:"why"`
}

// Catalog is what a store holds: its snapshot pairs, newest first, and
// what else is there.
type Catalog struct {
	Store   string
	Entries []Entry
	Skipped []Skipped
}

// List reads the snapshot pairs in the directory dir (what backup etcd
// -o DIR/ writes): a snapshot is listed only with a sidecar that names
// it, gives its size and was written by devata (a cluster, a time and a
// sha256); everything else is Skipped. No snapshot is read, only
// sidecars.
func List(ctx context.Context, dir string) (*Catalog, error) {
	return listStore(ctx, dirStore{dir})
}

func listStore(ctx context.Context, st store) (*Catalog, error) {
	objs, err := st.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", st, err)
	}
	byName := map[string]object{}
	for _, o := range objs {
		byName[o.Name] = o
	}
	c := &Catalog{Store: st.String()}
	paired := map[string]bool{}
	for _, o := range objs {
		name, ok := strings.CutSuffix(o.Name, ".json")
		if !ok {
			continue
		}
		snap, ok := byName[name]
		if !ok {
			continue // a sidecar alone: reported below
		}
		side, why := readPairSidecar(ctx, st, o, snap)
		if why != "" {
			c.Skipped = append(c.Skipped, Skipped{Name: name, Why: why})
			continue
		}
		paired[name], paired[o.Name] = true, true
		c.Entries = append(c.Entries, Entry{Name: name, Sidecar: *side})
	}
	for _, o := range objs {
		switch {
		case paired[o.Name] || slices.ContainsFunc(c.Skipped, func(s Skipped) bool { return s.Name == o.Name }):
		case strings.HasSuffix(o.Name, ".json"):
			if _, ok := byName[strings.TrimSuffix(o.Name, ".json")]; !ok {
				c.Skipped = append(c.Skipped, Skipped{Name: o.Name, Why: "a sidecar without its snapshot"})
			}
		default:
			c.Skipped = append(c.Skipped, Skipped{Name: o.Name, Why: "no sidecar " + o.Name + ".json: not a devata snapshot"})
		}
	}
	slices.SortFunc(c.Entries, func(a, b Entry) int {
		if n := b.Sidecar.Time.Compare(a.Sidecar.Time); n != 0 {
			return n
		}
		return strings.Compare(b.Name, a.Name)
	})
	slices.SortFunc(c.Skipped, func(a, b Skipped) int { return strings.Compare(a.Name, b.Name) })
	return c, nil
}

// readPairSidecar reads side, the sidecar of snap, and says why the two
// are not a devata snapshot pair ("" when they are). Nothing of the
// sidecar is quoted.
func readPairSidecar(ctx context.Context, st store, side, snap object) (*Sidecar, string) {
	if side.Size > maxSidecar {
		return nil, fmt.Sprintf("its sidecar is %d bytes, more than any devata writes", side.Size)
	}
	rc, err := st.Get(ctx, side.Name)
	if err != nil {
		return nil, fmt.Sprintf("its sidecar could not be read: %v", err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxSidecar+1))
	if err != nil {
		return nil, fmt.Sprintf("its sidecar could not be read: %v", err)
	}
	var s Sidecar
	if err := json.Unmarshal(data, &s); err != nil || len(data) > maxSidecar {
		return nil, "its sidecar is not a devata sidecar (not its JSON)"
	}
	sum, err := hex.DecodeString(s.SHA256)
	switch {
	case s.Snapshot != snap.Name:
		return nil, "its sidecar names another snapshot"
	case s.Cluster == "" || s.Time.IsZero() || err != nil || len(sum) != 32:
		return nil, "its sidecar lacks the cluster, the time or the sha256 backup etcd writes"
	case s.Size != snap.Size:
		return nil, fmt.Sprintf("it is %d bytes where its sidecar says %d: changed or cut since it was written", snap.Size, s.Size)
	}
	return &s, ""
}

// Latest is the newest entry of cluster, nil when there is none.
func (c *Catalog) Latest(cluster string) *Entry {
	for i := range c.Entries {
		if c.Entries[i].Sidecar.Cluster == cluster {
			return &c.Entries[i]
		}
	}
	return nil
}
