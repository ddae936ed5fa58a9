package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"devata.dev/devata/backup"
	"devata.dev/devata/backup/store"
)

// defaultOrphanGrace is how old a snapshot without its sidecar must be
// before prune deletes it: a backup uploads the snapshot first and its
// sidecar last, so a younger one may be an upload in progress; a day is
// longer than any backup takes and shorter than a daily schedule's
// retention.
const defaultOrphanGrace = 24 * time.Hour

// prunedOrphan is prune's decision on a snapshot without its sidecar.
type prunedOrphan struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
	// Delete says it is older than the grace; Deleted that it went (with
	// --yes); Error why it could not.
	Delete  bool   `json:"delete"`
	Deleted bool   `json:"deleted,omitempty"`
	Error   string `json:"error,omitempty"`
}

// pruneOrphans decides on (and with yes deletes) the snapshots at dest
// that have no sidecar (store.Orphans): only names devata gives
// (etcd-CLUSTER-TIME.db, backup.SnapshotName), which only an interrupted
// backup leaves, and only once older than grace. Anything else without a
// sidecar, a sidecar without a snapshot included, is left alone, as list
// says. A failed deletion is recorded and the rest go on.
func (a *app) pruneOrphans(ctx context.Context, dest string, grace time.Duration, yes bool) ([]prunedOrphan, error) {
	st, err := store.Open(ctx, dest, a.storeOptions())
	if err != nil {
		return nil, err
	}
	defer st.Close()
	objs, err := store.Orphans(ctx, st)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []prunedOrphan
	for _, o := range objs {
		if strings.HasSuffix(o.Name, store.SidecarSuffix) {
			continue
		}
		if _, _, ok := backup.SnapshotName(o.Name); !ok {
			continue
		}
		p := prunedOrphan{Name: o.Name, Size: o.Size, ModTime: o.ModTime, Delete: now.Sub(o.ModTime) > grace}
		if p.Delete && yes {
			if err := st.Delete(ctx, o.Name); err != nil {
				p.Error = err.Error()
			} else {
				p.Deleted = true
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func printOrphans(w io.Writer, orphans []prunedOrphan, grace time.Duration, yes bool) {
	for _, o := range orphans {
		verb, why := "keep  ", fmt.Sprintf("no sidecar, but younger than --orphan-grace %s: a backup may be uploading it", grace)
		if o.Delete {
			verb, why = "delete", fmt.Sprintf("no sidecar and older than --orphan-grace %s: what an interrupted backup left; nothing restores or lists it", grace)
			switch {
			case o.Deleted:
				verb = "deleted"
			case o.Error != "":
				verb = "FAILED"
			}
		}
		fmt.Fprintf(w, "%s %s  %s (%s)\n", verb, o.Name, o.ModTime.UTC().Format(time.RFC3339), why)
	}
	if n := countDelete(orphans); n > 0 && !yes {
		fmt.Fprintf(w, "dry run: %d %s without a sidecar would be deleted; rerun with --yes to delete\n", n, plural(n, "snapshot", "snapshots"))
	}
}

func countDelete(orphans []prunedOrphan) (n int) {
	for _, o := range orphans {
		if o.Delete {
			n++
		}
	}
	return n
}
