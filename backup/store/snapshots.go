package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// SidecarSuffix ends a snapshot's sidecar: NAME and NAME.json (package
// backup's SidecarPath).
const SidecarSuffix = ".json"

// Snapshot is a listed snapshot whose sidecar exists: the pair counts.
type Snapshot struct {
	Object
	Sidecar Object `json:"sidecar"`
}

// PutSnapshot stores a snapshot and then its sidecar, in that order, so
// that the pair becomes visible together (the package doc's rule): it
// streams snap under name, then calls sidecar with what was written (size
// and SHA-256, for the sidecar to record) and stores the bytes it returns
// under name+".json". When the sidecar cannot be made or stored, the
// snapshot is removed again (best effort: without its sidecar it counts
// for nothing anyway, and Orphans finds it).
func PutSnapshot(ctx context.Context, s Store, name string, snap io.Reader, sidecar func(Written) ([]byte, error)) (Written, error) {
	if strings.HasSuffix(name, SidecarSuffix) {
		return Written{}, fmt.Errorf("%s: %w %q: a snapshot's name must not end in %s, which names sidecars", s, ErrInvalidName, name, SidecarSuffix)
	}
	w, err := s.Put(ctx, name, snap)
	if err != nil {
		return Written{}, err
	}
	data, err := sidecar(w)
	if err == nil {
		_, err = s.Put(ctx, name+SidecarSuffix, bytes.NewReader(data))
	}
	if err != nil {
		_ = s.Delete(context.WithoutCancel(ctx), name)
		return Written{}, fmt.Errorf("%s: the sidecar of %s: %w", s, name, err)
	}
	return w, nil
}

// Snapshots lists the snapshots that count: each object NAME whose
// sidecar NAME.json is listed too, sorted by name (devata's names carry
// the time, etcd-CLUSTER-20261204T040500Z.db, so the last is the newest).
func Snapshots(ctx context.Context, s Store) ([]Snapshot, error) {
	objs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	snaps, _ := pair(objs)
	return snaps, nil
}

// Orphans lists snapshots without a sidecar: what a run interrupted
// between the two Puts leaves, which nothing picks and prune may remove.
// Sidecars without a snapshot are listed too.
func Orphans(ctx context.Context, s Store) ([]Object, error) {
	objs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	_, orphans := pair(objs)
	return orphans, nil
}

func pair(objs []Object) (snaps []Snapshot, orphans []Object) {
	byName := make(map[string]Object, len(objs))
	for _, o := range objs {
		byName[o.Name] = o
	}
	for _, o := range objs {
		if base, ok := strings.CutSuffix(o.Name, SidecarSuffix); ok {
			if _, has := byName[base]; !has {
				orphans = append(orphans, o)
			}
			continue
		}
		if sc, ok := byName[o.Name+SidecarSuffix]; ok {
			snaps = append(snaps, Snapshot{Object: o, Sidecar: sc})
		} else {
			orphans = append(orphans, o)
		}
	}
	slices.SortFunc(snaps, func(a, b Snapshot) int { return strings.Compare(a.Name, b.Name) })
	return snaps, orphans
}

// ErrNoSnapshot is Latest's error when no snapshot counts.
var ErrNoSnapshot = errors.New("no snapshot with a sidecar")

// Latest is the last snapshot that counts (Snapshots).
func Latest(ctx context.Context, s Store) (Snapshot, error) {
	snaps, err := Snapshots(ctx, s)
	if err != nil {
		return Snapshot{}, err
	}
	if len(snaps) == 0 {
		return Snapshot{}, fmt.Errorf("%s: %w: write one with devata backup etcd --to %s", s, ErrNoSnapshot, s)
	}
	return snaps[len(snaps)-1], nil
}

// DeleteSnapshot removes a snapshot's sidecar first, so that it stops
// counting at once, then the snapshot. A sidecar already gone is no error.
func DeleteSnapshot(ctx context.Context, s Store, name string) error {
	if err := s.Delete(ctx, name+SidecarSuffix); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return s.Delete(ctx, name)
}
