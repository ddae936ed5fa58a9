package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	objstore "devata.dev/devata/backup/store"
)

// IsURL reports whether dest names a destination by URL (s3://bucket/prefix/,
// file:///dir/), which backup/store opens, rather than a local path.
func IsURL(dest string) bool { return strings.Contains(dest, "://") }

// objStore is a backup/store Store seen as list, verify and prune see a
// store: a bucket and prefix, or a directory named by a file:// URL.
type objStore struct{ s objstore.Store }

func (o objStore) String() string { return o.s.String() }

func (o objStore) List(ctx context.Context) ([]object, error) {
	objs, err := o.s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]object, 0, len(objs))
	for _, ob := range objs {
		out = append(out, object{Name: ob.Name, Size: ob.Size, ModTime: ob.ModTime})
	}
	return out, nil
}

// Get: a missing object is also os.ErrNotExist, as a missing file is.
func (o objStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := o.s.Get(ctx, name)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%w (%w)", err, os.ErrNotExist)
	}
	return rc, err
}

func (o objStore) Put(ctx context.Context, name string, r io.Reader) error {
	_, err := o.s.Put(ctx, name, r)
	return err
}

// Delete: an object already gone is no error, as in dirStore.
func (o objStore) Delete(ctx context.Context, name string) error {
	if err := o.s.Delete(ctx, name); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	return nil
}

// openDest opens dest: a local directory as dirStore (as before), a URL
// through backup/objstore. close releases it.
func openDest(ctx context.Context, dest string, so objstore.Options) (st store, closeFn func(), err error) {
	if !IsURL(dest) {
		return dirStore{dest}, func() {}, nil
	}
	s, err := objstore.Open(ctx, dest, so)
	if err != nil {
		return nil, nil, err
	}
	return objStore{s}, func() { s.Close() }, nil
}

// objectURL is name inside the destination st names.
func objectURL(st fmt.Stringer, name string) string {
	s := st.String()
	if IsURL(s) {
		// the name goes on the path, before a query (s3://b/p/?region=x)
		base, query, hasQuery := strings.Cut(s, "?")
		u := strings.TrimSuffix(base, "/") + "/" + name
		if hasQuery {
			u += "?" + query
		}
		return u
	}
	return filepath.Join(s, name)
}

// ListDest is List for a directory or a URL (s3://bucket/prefix/, file:///dir/).
func ListDest(ctx context.Context, dest string, so objstore.Options) (*Catalog, error) {
	st, done, err := openDest(ctx, dest, so)
	if err != nil {
		return nil, err
	}
	defer done()
	return listStore(ctx, st)
}

// PruneDest is Prune for a directory or a URL.
func PruneDest(ctx context.Context, dest string, so objstore.Options, p Policy, delete bool) (*PruneResult, *Catalog, error) {
	st, done, err := openDest(ctx, dest, so)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	return pruneStore(ctx, st, p, delete)
}

// VerifyDest is Verify for the snapshot name in a directory or at a URL:
// the snapshot is downloaded into the private work directory (size and
// sha256 checked against its sidecar) and the proof is recorded by
// rewriting the sidecar object.
func VerifyDest(ctx context.Context, dest, name string, so objstore.Options, o VerifyOptions) (*Proof, error) {
	st, done, err := openDest(ctx, dest, so)
	if err != nil {
		return nil, err
	}
	defer done()
	return verifyIn(ctx, st, name, o)
}

// Upload stores the snapshot at local (written and verified by Etcd, with
// its sidecar beside it) under name at dest, through objstore.PutSnapshot:
// the snapshot first, its sidecar last, so that the pair counts only once
// both are there. The sidecar's size and sha256 are those of what was
// uploaded, which must be what Etcd verified. It returns the snapshot's
// URL and the sidecar as uploaded.
func Upload(ctx context.Context, s objstore.Store, local, name string) (string, *Sidecar, error) {
	raw, err := os.ReadFile(SidecarPath(local))
	if err != nil {
		return "", nil, err
	}
	var side Sidecar
	if err := json.Unmarshal(raw, &side); err != nil {
		return "", nil, fmt.Errorf("%s: %w", SidecarPath(local), err)
	}
	f, err := os.Open(local)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	side.Snapshot = name
	_, err = objstore.PutSnapshot(ctx, s, name, f, func(w objstore.Written) ([]byte, error) {
		if w.Size != side.Size || w.SHA256 != side.SHA256 {
			return nil, fmt.Errorf("uploaded %d bytes with sha256 %s, but the verified snapshot was %d bytes with sha256 %s: the local copy changed; take the backup again", w.Size, w.SHA256, side.Size, side.SHA256)
		}
		side.Size, side.SHA256 = w.Size, w.SHA256
		data, err := json.MarshalIndent(side, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(data, '\n'), nil
	})
	if err != nil {
		return "", nil, err
	}
	return objectURL(s, name), &side, nil
}
