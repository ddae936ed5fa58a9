package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"devata.dev/devata/backup"
	"devata.dev/devata/bootstrap"
	"devata.dev/devata/inventory"
	"devata.dev/devata/snapshot"
)

// ageHeader begins every binary age file (age-encryption.org/v1), as
// backup etcd --encrypt-to writes snapshots.
const ageHeader = "age-encryption.org/v1\n"

// recoverSnapshot is --recover-from's local path, the one entry point
// for a snapshot file on this machine (a URL's pair is fetched into a
// private directory first and handed here): path is the snapshot and side
// its sidecar (nil: path+".json" is read; none is a snapshot talosctl
// took). Before any machine is asked anything, an encrypted snapshot is
// decrypted into a private directory (0700, in $TMPDIR) with the age
// identities every command reads (--age-identity), its stored bytes and
// its clear text each held to the sidecar; then the clear snapshot is
// verified (etcd's hash, the page graph, the revision and members) and
// checked to be of the inventory's cluster (unless foreign). It sets
// opts.Recover (the file the sequence sends), RecoverFrom (path, as
// messages name it) and RecoverEncrypted; cleanup removes the decrypted
// copy and must run once the sequence is done, also on an error.
func (a *app) recoverSnapshot(ctx context.Context, opts *bootstrap.Options, path string, side *backup.Sidecar, foreign bool) (cleanup func(), err error) {
	cleanup = func() {}
	refuse := func(err error) (func(), error) {
		cleanup()
		return func() {}, exitWith(exitTrouble, fmt.Errorf("--recover-from %s: %w; nothing was sent to any machine", path, err))
	}
	if side == nil {
		if side, err = backup.ReadSidecar(path); err != nil {
			return refuse(err)
		}
	}
	plain := path
	if side != nil && side.Encryption != nil {
		dir, err := os.MkdirTemp("", "devata-recover-") // 0700: the clear text holds every Secret
		if err != nil {
			return refuse(fmt.Errorf("a private directory for the decrypted snapshot: %w; set TMPDIR to a directory with room for it", err))
		}
		cleanup = func() { os.RemoveAll(dir) }
		if plain, err = backup.DecryptSnapshot(ctx, path, side, a.snapshotKeys(), dir); err != nil {
			return refuse(err)
		}
	} else if encryptedFile(path) {
		return refuse(fmt.Errorf("it is age-encrypted but has no sidecar saying so (%s): put the sidecar backup etcd wrote beside it, or decrypt it yourself into a private place (age -d -i IDENTITY_FILE -o FILE.db %s) and pass that", backup.SidecarPath(path), path))
	}
	snap, err := snapshot.Verify(ctx, plain)
	if err != nil {
		return refuse(err)
	}
	if err := a.checkSnapshotOf(snap, side, path, foreign); err != nil {
		return refuse(err)
	}
	opts.Recover, opts.RecoverFrom, opts.RecoverEncrypted = snap, path, plain != path
	if side != nil {
		opts.RecoverTalos = side.TalosVersion // a fallback for a machine that cannot say what it boots
	}
	return cleanup, nil
}

// encryptedFile says the file at path begins as an age file does; one
// that cannot be read is left to snapshot.Verify to report.
func encryptedFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, len(ageHeader))
	n, _ := io.ReadFull(f, head)
	return bytes.Equal(head[:n], []byte(ageHeader))
}

// checkSnapshotOf refuses a snapshot of another cluster (its sidecar, its
// members), unless foreign; a refused or missing sidecar never stops a
// snapshot talosctl took, which has none. path names the snapshot as given.
func (a *app) checkSnapshotOf(snap *snapshot.File, side *backup.Sidecar, path string, foreign bool) error {
	inv, err := inventory.Load(a.settings.Inventory)
	if err != nil {
		return nil //nolint:nilerr // the sequence reports the inventory's own errors
	}
	if side == nil {
		fmt.Fprintf(a.streams.Err, "note: %s has no sidecar (%s): its cluster is judged by its etcd members only\n", path, backup.SidecarPath(path))
	}
	err = backup.CheckSnapshotOf(inv, snap, side)
	if err != nil && foreign {
		fmt.Fprintf(a.streams.Err, "warning: --foreign-snapshot: %v\n", err)
		return nil
	}
	return err
}
