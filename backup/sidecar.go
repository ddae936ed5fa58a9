package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"devata.dev/devata/internal/outfile"
)

// Sidecar is FILE.json: what a restore needs to know about FILE.
// Nothing secret goes in it.
type Sidecar struct {
	Cluster      string    `json:"cluster"`
	Time         time.Time `json:"time"`
	ControlPlane string    `json:"controlPlane"`
	Endpoint     string    `json:"endpoint"`
	// NoQuorum says etcd had no quorum when the snapshot was taken: no
	// member had a leader, so it is ControlPlane's local copy, which holds
	// what that member had received (the last writes the cluster committed
	// may be missing), and Members are the members that copy holds, since
	// no member list answers without a leader. Absent when etcd had quorum.
	NoQuorum bool `json:"noQuorum,omitempty"`
	// EtcdRevision is the newest revision in the snapshot; absent when it
	// could not be read.
	EtcdRevision int64    `json:"etcdRevision,omitempty"`
	Members      []string `json:"members"`
	// Snapshot is FILE's name; Size and SHA256 are FILE's own, what
	// sha256sum prints (etcd's hash of the database is FILE's last 32 bytes;
	// of an encrypted FILE, Encryption has the clear text's).
	Snapshot string `json:"snapshot"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
	// Encryption says how FILE is encrypted at rest (age, the recipients'
	// public keys, the clear text's size and sha256); absent when FILE is
	// in clear.
	Encryption *Encryption `json:"encryption,omitempty"`
	// TalosVersion is what ControlPlane reports; absent when the
	// talosconfig's role may not ask (os:etcd:backup alone).
	TalosVersion string `json:"talosVersion,omitempty"`
	// KubernetesVersion is the inventory's cluster.kubernetesVersion.
	KubernetesVersion string `json:"kubernetesVersion"`
	Inventory         string `json:"inventory"`
	InventorySHA256   string `json:"inventorySha256"`
	// InventoryCommit is the Git commit of the inventory's work tree;
	// InventoryModified says the inventory file itself is not that
	// commit's (edited, untracked, or not in Git: provenance.Info's
	// InventoryModified), and WorkTreeModified that the work tree holds
	// changes the commit does not, anywhere (a patch beside the inventory,
	// a file not yet added: provenance.Info's Dirty). All three are absent
	// when the inventory is not in Git or git is not installed.
	InventoryCommit   string `json:"inventoryCommit,omitempty"`
	InventoryModified bool   `json:"inventoryModified,omitempty"`
	WorkTreeModified  bool   `json:"workTreeModified,omitempty"`
	// Verified is the last proof of restore (backup verify); absent until
	// one ran. Writing it changes no other field: Size and SHA256 stay the
	// snapshot's.
	Verified *Proof `json:"verified,omitempty"`
}

// OutPath is where a snapshot goes: out itself, or, when out names a
// directory (it ends in a slash or is one), a file in it named after the
// cluster and the time to the nanosecond,
// etcd-CLUSTER-20261204T040500.123456789Z.db, so that a schedule keeps
// every snapshot and two runs in the same second get two names (issue 34).
// The width is fixed (trailing zeros kept), so that the names sort as the
// times do.
func OutPath(out, cluster string, t time.Time) string {
	if NamesDirectory(out) {
		return filepath.Join(out, "etcd-"+cluster+"-"+t.UTC().Format(NameTimeLayout)+".db")
	}
	return out
}

// NameTimeLayout is the time in the names OutPath gives (time.Format's
// layout): UTC to the nanosecond, fixed width. Names of devata before
// issue 34 end at the second (20060102T150405Z); both are devata's
// (SnapshotName).
const NameTimeLayout = "20060102T150405.000000000Z"

// SnapshotName says whether name is one OutPath gives
// (etcd-CLUSTER-TIME.db, in the layout of today or the one before it), and
// the cluster and time it carries.
func SnapshotName(name string) (cluster string, t time.Time, ok bool) {
	rest, ok := strings.CutPrefix(name, "etcd-")
	if !ok {
		return "", time.Time{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".db")
	i := strings.LastIndex(rest, "-")
	if !ok || i < 1 {
		return "", time.Time{}, false
	}
	cluster, stamp := rest[:i], rest[i+1:]
	for _, layout := range []string{NameTimeLayout, "20060102T150405Z"} {
		if t, err := time.Parse(layout, stamp); err == nil && len(stamp) == len(layout) {
			return cluster, t, true
		}
	}
	return "", time.Time{}, false
}

// PrepareOut makes sure -o out can be written before anything is asked of
// a machine: a directory named with a trailing slash is created (0700, its
// parents too) when missing, as a schedule's first run finds a fresh
// volume; a file's directory must exist and be a directory.
func PrepareOut(out string) error {
	dir, isDir := filepath.Dir(out), NamesDirectory(out)
	if isDir {
		dir = filepath.Clean(out)
	}
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return fmt.Errorf("-o %s: %s is not a directory: name a file in an existing directory, or a directory", out, dir)
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("-o %s: %w", out, err)
	case isDir:
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("-o %s: create the directory: %w", out, err)
		}
		return nil
	}
	return fmt.Errorf("-o %s: the directory %s does not exist: create it (mkdir -p %s), or end -o with a slash to have devata create it", out, dir, dir)
}

// NamesDirectory reports whether -o out names a directory to write into
// (it ends in a slash or is one) rather than the snapshot file itself.
func NamesDirectory(out string) bool {
	st, err := os.Stat(out)
	return (err == nil && st.IsDir()) || strings.HasSuffix(out, string(filepath.Separator))
}

// writeSidecar writes path (0600) whole or not at all, replacing only a
// regular file (internal/outfile).
func writeSidecar(path string, meta Sidecar) error {
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return outfile.Write(path, 0o600, false, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// syncDir makes a rename in dir durable; best effort, as not every file
// system syncs directories.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
