package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"devata.dev/devata/backup"
	"devata.dev/devata/backup/store"
	"devata.dev/devata/bootstrap"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/snapshot"
)

// recoverLatest is the name that, after a destination's URL, picks its
// newest snapshot of the inventory's cluster (backup verify --latest's).
const recoverLatest = "latest"

// maxRecoverSidecar bounds a sidecar fetched for a recovery: backup etcd
// writes about a kilobyte.
const maxRecoverSidecar = 1 << 20

// recoverURL is a snapshot --recover-from names by URL, resolved through
// the sidecars at its destination: nothing of the snapshot is read.
type recoverURL struct {
	dest  string // the destination as given, its query included (the store's settings)
	entry backup.Entry
	// source is what plan shows and bootstrap says.
	source *plan.RecoverSource
}

// resolveRecoverURL finds the snapshot raw names: DEST/latest, the newest
// snapshot of inv's cluster there (as backup verify --latest picks it), or
// DEST/NAME. Only sidecars are read (backup.ListDest): a snapshot without
// one, or whose sidecar does not describe it, is not offered.
func (a *app) resolveRecoverURL(ctx context.Context, inv *inventory.Inventory, raw string) (*recoverURL, error) {
	dest, name := store.Split(raw)
	if name == "" {
		return nil, usageError(fmt.Errorf("--recover-from %s names a destination, not a snapshot: end it with /%s (the newest snapshot of cluster %s there) or a snapshot's name (devata backup list %s shows them)", redactURL(raw), recoverLatest, inv.Cluster.Name, redactURL(raw)))
	}
	cat, err := backup.ListDest(ctx, dest, a.storeOptions())
	if err != nil {
		return nil, err
	}
	var e *backup.Entry
	if name == recoverLatest {
		if e = cat.Latest(inv.Cluster.Name); e == nil {
			return nil, fmt.Errorf("%s holds no snapshot of %s that devata backup etcd wrote (devata backup list %s shows what is there)", cat.Store, inv.Cluster.Name, cat.Store)
		}
	} else {
		for i := range cat.Entries {
			if cat.Entries[i].Name == name {
				e = &cat.Entries[i]
			}
		}
		for _, s := range cat.Skipped {
			if e == nil && (s.Name == name || s.Name == backup.SidecarPath(name)) {
				return nil, fmt.Errorf("%s at %s is not a snapshot devata can restore: %s; devata backup list %s shows the ones it can", name, cat.Store, s.Why, cat.Store)
			}
		}
		if e == nil {
			return nil, fmt.Errorf("%s holds no snapshot %s (devata backup list %s shows what is there)", cat.Store, name, cat.Store)
		}
	}
	base, _, _ := strings.Cut(cat.Store, "?") // the query is the destination's, not the object's
	r := &recoverURL{dest: dest, entry: *e}
	r.source = recoverSourceOf(strings.TrimSuffix(base, "/")+"/"+e.Name, e.Sidecar)
	return r, nil
}

func recoverSourceOf(url string, s backup.Sidecar) *plan.RecoverSource {
	src := &plan.RecoverSource{URL: url, Cluster: s.Cluster, Time: s.Time, Revision: s.EtcdRevision, Members: s.Members, Size: s.Size, SHA256: s.SHA256}
	if p := s.Verified; p != nil {
		src.Verified = &plan.RecoverProof{Time: p.Time, Result: p.Result, EtcdVersion: p.EtcdVersion, Revision: p.Revision, Error: p.Error}
	}
	return src
}

// redactURL is a URL as devata shows it: no credentials, no query.
func redactURL(raw string) string {
	base, _, _ := strings.Cut(raw, "?")
	if i := strings.Index(base, "@"); i >= 0 && strings.Contains(base[:i], "://") {
		base = base[:strings.Index(base, "://")+3] + base[i+1:]
	}
	return base
}

// planRecoverURL is plan --recover-from URL: the snapshot as its sidecar
// describes it, held to the inventory (cluster, members) as bootstrap
// holds the snapshot itself; nothing of the snapshot is fetched. The
// sidecar holds member names, not IDs.
func (a *app) planRecoverURL(ctx context.Context, inv *inventory.Inventory, raw string, foreign bool) (*snapshot.File, *plan.RecoverSource, error) {
	r, err := a.resolveRecoverURL(ctx, inv, raw)
	if err != nil {
		return nil, nil, err
	}
	side := r.entry.Sidecar
	f := &snapshot.File{Path: r.source.URL, Size: side.Size, SHA256: side.SHA256, Revision: side.EtcdRevision}
	for _, m := range side.Members {
		f.Members = append(f.Members, snapshot.Member{Name: m})
	}
	if err := a.foreignCheck(backup.CheckSnapshotOf(inv, f, &side), foreign); err != nil {
		return nil, nil, err
	}
	return f, r.source, nil
}

// foreignCheck lets a foreign snapshot through with a warning when asked.
func (a *app) foreignCheck(err error, foreign bool) error {
	if err != nil && foreign {
		fmt.Fprintf(a.streams.Err, "warning: --foreign-snapshot: %v\n", err)
		return nil
	}
	return err
}

// fetchRecoverURL is bootstrap --recover-from URL before any machine is
// asked: the snapshot and its sidecar are fetched into a private temporary
// directory (0700), the snapshot held to the sidecar fetched with it (size
// and sha256: an object changed after its upload is refused), then handed
// to the local path (recoverSnapshot) as NAME and NAME.json, which checks
// it as it checks a file. cleanup removes the copy; the caller calls it
// whatever happens, once the sequence is done with the file.
func (a *app) fetchRecoverURL(ctx context.Context, opts *bootstrap.Options, inv *inventory.Inventory, raw string, foreign bool) (*plan.RecoverSource, func(), error) {
	none := func() {}
	r, err := a.resolveRecoverURL(ctx, inv, raw)
	if err != nil {
		return nil, none, err
	}
	st, err := store.Open(ctx, r.dest, a.storeOptions())
	if err != nil {
		return nil, none, err
	}
	defer st.Close()
	tmp, err := os.MkdirTemp("", "devata-recover-") // 0700: the copy holds every Secret
	if err != nil {
		return nil, none, fmt.Errorf("a private directory for the snapshot: %w; set TMPDIR to a directory with room for it", err)
	}
	cleanup := func() { os.RemoveAll(tmp) }
	// messages name the URL, not the private copy
	named := func(err error) error {
		return errors.New(strings.ReplaceAll(err.Error(), tmp+string(os.PathSeparator), r.source.URL[:len(r.source.URL)-len(r.entry.Name)]))
	}
	fail := func(err error) (*plan.RecoverSource, func(), error) {
		cleanup()
		var ee *exitError
		if errors.As(err, &ee) {
			return nil, none, exitWith(ee.code, named(err))
		}
		return nil, none, named(err)
	}
	name := r.entry.Name
	sidePath, _, err := store.Fetch(ctx, st, backup.SidecarPath(name), tmp, maxRecoverSidecar)
	if err != nil {
		return fail(err)
	}
	raws, err := os.ReadFile(sidePath)
	if err != nil {
		return fail(err)
	}
	// the sidecar as fetched now, which may differ from the one listed
	var side backup.Sidecar
	if err := json.Unmarshal(raws, &side); err != nil || side.Snapshot != name {
		return fail(fmt.Errorf("%s.json is not the sidecar backup etcd wrote for %s: restore another snapshot (devata backup list %s)", r.source.URL, name, st))
	}
	local, got, err := store.Fetch(ctx, st, name, tmp, snapshot.MaxSize)
	if err != nil {
		return fail(err)
	}
	if got.Size != side.Size || got.SHA256 != side.SHA256 {
		return fail(fmt.Errorf("%s is not the snapshot its sidecar describes (%d bytes, sha256 %s; the sidecar says %d bytes, sha256 %s): it changed since backup etcd wrote it; restore another (devata backup list %s)",
			r.source.URL, got.Size, got.SHA256, side.Size, side.SHA256, st))
	}
	// the local path, as for a FILE: decrypts (an encrypted snapshot),
	// verifies and sets opts.Recover
	decrypted, err := a.recoverSnapshot(ctx, opts, local, &side, foreign)
	if err != nil {
		return fail(err)
	}
	opts.RecoverFrom = r.source.URL
	src := recoverSourceOf(r.source.URL, side)
	fmt.Fprintf(a.streams.Err, "fetched %s (%d bytes, size and sha256 as its sidecar says) into a private copy, removed when bootstrap ends; last proof of restore: %s\n",
		src.URL, got.Size, verifiedText(side.Verified))
	return src, func() { decrypted(); cleanup() }, nil
}
