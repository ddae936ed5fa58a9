// Package backup takes off a cluster what no inventory can render again:
// etcd's snapshot, streamed from a healthy control plane (or, when etcd has
// no quorum, from a member that still runs), verified, renamed into place
// and described by a JSON sidecar. It only reads machines, through no more
// than the os:etcd:backup role may call, and takes no lock; the command
// renders what it did.
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/outfile"
	"devata.dev/devata/inventory"
	"devata.dev/devata/provenance"
	"devata.dev/devata/snapshot"
	"devata.dev/devata/talosapi"
)

// Options say where Etcd writes and how it tells what it does.
type Options struct {
	Inventory *inventory.Inventory
	Dialer    *talosapi.Dialer
	// Out is the snapshot file; its sidecar is Out+".json" (SidecarPath).
	Out string
	// Force replaces Out and its sidecar if they exist.
	Force bool
	// Timeout bounds one Talos API call, and how long a snapshot's stream
	// may go without a byte.
	Timeout time.Duration
	// Warn tells what does not stop the backup: etcd not wholly healthy.
	Warn func(format string, args ...any)
	// Say tells, a line each, why a control plane was passed over and
	// which one is tried next.
	Say func(format string, args ...any)
	// Progress, when not nil (a terminal), gets a line every two seconds
	// saying how much of a snapshot has arrived.
	Progress io.Writer
	// Log takes what is worth a log line only (nil: nowhere).
	Log *slog.Logger
	// EncryptTo, when not empty, encrypts the snapshot to these age
	// recipients: it streams into a private directory (0700, in $TMPDIR),
	// is verified there in clear, then is encrypted into Out.tmp as it is
	// read and the clear copy removed; the sidecar records the recipients
	// and both sizes and hashes (Encryption).
	EncryptTo []age.Recipient
}

// Result is a snapshot written and verified at Path.
type Result struct {
	Path        string
	SidecarPath string
	// Sidecar is what SidecarPath holds, unless Etcd's error says it is not
	// written.
	Sidecar Sidecar
}

// localError is a failure on this side (the file system), which no other
// control plane fixes.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// SidecarPath is where the sidecar of the snapshot at out goes.
func SidecarPath(out string) string { return out + ".json" }

// CheckVacant fails when out or its sidecar exists: an etcd backup is not
// replaced without Force. Etcd checks it too; a command asks first to refuse
// before it loads anything.
func CheckVacant(out string) error {
	switch kind, err := outfile.Check(out); {
	case err != nil:
		return err // a link or a device: refused with --force too
	case kind == outfile.Through:
		return nil // written through (a pipe, the output), replacing nothing
	}
	for _, p := range []string{out, SidecarPath(out)} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists: not replacing an etcd backup; pass --force, or write to another -o", p)
		}
	}
	return nil
}

// warnEtcdHealth says what is wrong with etcd before the snapshot is taken
// from one of sources: without quorum, what the snapshot may lack.
func (o *Options) warnEtcdHealth(view gate.EtcdView, sources []string) {
	switch {
	case view.NoQuorum():
		why := view.NoQuorumReason()
		details := slices.DeleteFunc(slices.Clone(view.Problems), func(p string) bool { return p == why })
		o.warn("%s; backing up from a member that still runs (%s): its snapshot is its local copy, which holds what it had received and may lack the last writes the cluster committed; the sidecar records noQuorum (%s)",
			why, strings.Join(sources, ", "), strings.Join(details, "; "))
	case len(view.Problems) > 0:
		why := view.Problems
		if len(view.Down) > 0 {
			why = append([]string{"down: " + strings.Join(view.Down, ", ")}, why...)
		}
		o.warn("etcd is not wholly healthy (%s); backing up from a healthy member", strings.Join(why, "; "))
	}
}

// Etcd asks every control plane for its view of etcd, streams a snapshot
// from a healthy member into Out, verified, and writes its sidecar. A
// stream that broke off, arrived corrupt or stalled is thrown away and the
// next healthy member is tried; a failure on this side stops at once.
// Nothing is left at Out unless the Result is not nil: it is not nil, with
// an error, when the snapshot is written and verified but its sidecar is
// not.
func Etcd(ctx context.Context, o Options) (*Result, error) {
	if !o.Force {
		if err := CheckVacant(o.Out); err != nil {
			return nil, err
		}
	}
	outKind, err := outfile.Check(o.Out) // a link or a device is refused, --force or not
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	inv, d := o.Inventory, o.Dialer
	var prov provenance.Info
	prov, err = provenance.Of(ctx, inv.Path)
	switch {
	case prov.InventorySHA256 == "":
		return nil, err // the inventory could not be hashed
	case err != nil:
		// the sha256 is there; a restore can still match the inventory by it
		o.warn("%v; the sidecar names no commit", err)
	}

	// the etcd calls alone: a talosconfig with os:etcd:backup may make
	// them and no others (Talos' services/machined.go rules)
	view := gate.ObserveEtcdOnly(ctx, inv, d, o.Timeout)
	sources, err := sourcesOf(view)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was written", err)
	}
	noQuorum := view.NoQuorum()
	o.warnEtcdHealth(view, sources)

	for i, name := range sources {
		m := inv.Machine(name)
		if m == nil {
			continue // a member the inventory does not list: ObserveEtcd warned
		}
		info, file, stored, err := o.snapshotTo(ctx, m, view.Members)
		var local *localError
		switch {
		case err == nil:
		case errors.As(err, &local) || ctx.Err() != nil:
			return nil, fmt.Errorf("%w; nothing was written to %s", err, o.Out)
		case errors.Is(err, talosapi.ErrSnapshotNotAuthorized):
			// every control plane refuses the role alike
			return nil, fmt.Errorf("%w; nothing was written to %s", err, o.Out)
		default:
			next := ""
			if i+1 < len(sources) {
				next = "; trying " + sources[i+1]
			}
			o.say("%v%s", err, next)
			continue
		}
		abs, _ := filepath.Abs(inv.Path) //nolint:errcheck // the path was just read: Abs only fails without a working directory
		members := view.Members
		if noQuorum {
			members = slices.Sorted(slices.Values(file.Voters())) // no member list answers without a leader
		}
		res := &Result{Path: o.Out, SidecarPath: SidecarPath(o.Out), Sidecar: Sidecar{
			Cluster: inv.Cluster.Name, Time: time.Now().UTC().Truncate(time.Second),
			ControlPlane: m.Name, Endpoint: d.Endpoint(m), NoQuorum: noQuorum,
			EtcdRevision: file.Revision, Members: members,
			Snapshot: filepath.Base(o.Out), Size: info.Size, SHA256: info.SHA256,
			TalosVersion: info.TalosVersion, KubernetesVersion: inv.Cluster.KubernetesVersion,
			Inventory: abs, InventorySHA256: prov.InventorySHA256,
			InventoryCommit: prov.Commit, InventoryModified: prov.InventoryModified, WorkTreeModified: prov.Dirty,
		}}
		if len(o.EncryptTo) > 0 {
			res.Sidecar.Size, res.Sidecar.SHA256 = stored.size, stored.sha256
			res.Sidecar.Encryption = &Encryption{Format: EncryptionAge, Recipients: recipientNames(o.EncryptTo), PlaintextSize: info.Size, PlaintextSHA256: info.SHA256}
		}
		if outKind == outfile.Through {
			res.SidecarPath = "" // a pipe or the process' output has no file beside it
			return res, nil
		}
		if err := writeSidecar(res.SidecarPath, res.Sidecar); err != nil {
			_ = os.Remove(res.SidecarPath) // an older one describes another snapshot
			return res, fmt.Errorf("%s is written and verified, but its sidecar is not: %w", o.Out, err)
		}
		return res, nil
	}
	return nil, fmt.Errorf("no verified etcd snapshot from %s (why is above); nothing was written to %s", strings.Join(sources, ", "), o.Out)
}

// sourcesOf are the control planes worth a snapshot, in the order to try
// them: the healthy members of an etcd whose members every answering
// control plane agrees on; when etcd has no quorum, the members that still
// run (without a leader): Talos' EtcdSnapshot reads the local member only,
// and a snapshot is wanted most then. A control plane that is down or
// unhealthy does not stop a backup; a split or an etcd that was never
// bootstrapped does.
func sourcesOf(v gate.EtcdView) ([]string, error) {
	switch {
	case v.NoQuorum():
		return v.NoLeader, nil
	case len(v.NotBootstrapped) > 0:
		return nil, fmt.Errorf("no control plane has etcd bootstrapped (%s wait to be bootstrapped or to join): there is nothing to back up; run devata bootstrap", strings.Join(v.NotBootstrapped, ", "))
	case v.Members == nil:
		return nil, fmt.Errorf("the control planes do not agree on etcd's members, or none answered (%s): not backing up an etcd whose members are unknown; see devata drift --checks etcd", strings.Join(v.Problems, "; "))
	case len(v.Healthy) == 0:
		return nil, fmt.Errorf("no etcd member is healthy (%s): see devata drift --checks etcd", strings.Join(v.Problems, "; "))
	}
	return v.Healthy, nil
}

// snapshotTo streams m's snapshot to Out.tmp (0600), verifies it, reads its
// revision and members and renames it to Out. The snapshot's voting
// members must be those etcd reports (members); without a member list (no
// quorum: none answers), m must be one of them and each a control plane of
// the inventory. With EncryptTo, the snapshot streams into a private
// directory instead, is verified there in clear, and is encrypted into
// Out.tmp (stored is what that holds); the clear copy is removed whatever
// happens. Failures that are this side's are localErrors; on any failure
// Out.tmp is gone.
func (o *Options) snapshotTo(ctx context.Context, m *inventory.Machine, members []string) (talosapi.SnapshotInfo, *snapshot.File, written, error) {
	var none written
	out := o.Out
	tmp := out + ".tmp"
	_ = os.Remove(tmp) // left by an interrupted run: devata's by its name
	plain := tmp
	if len(o.EncryptTo) > 0 {
		dir, err := os.MkdirTemp("", "devata-backup-clear-") // 0700: the clear copy holds every Secret
		if err != nil {
			return talosapi.SnapshotInfo{}, nil, none, &localError{fmt.Errorf("a private directory for the snapshot before its encryption: %w; set TMPDIR to a directory with room for it", err)}
		}
		defer os.RemoveAll(dir)
		plain = filepath.Join(dir, "snapshot.db")
	}
	f, err := os.OpenFile(plain, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return talosapi.SnapshotInfo{}, nil, none, &localError{err}
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(plain)
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil { // whatever the umask
		return talosapi.SnapshotInfo{}, nil, none, &localError{err}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &streamWatch{w: f, idle: o.Timeout, max: snapshot.MaxSize, cancel: cancel, machine: m.Name, progress: o.progress(m.Name)}
	w.start()
	info, err := talosapi.EtcdSnapshot(sctx, o.Dialer, m, w)
	w.stop()
	var local *streamWriteError
	switch {
	case errors.As(err, &local):
		return info, nil, none, &localError{fmt.Errorf("write %s: %w", plain, local.err)}
	case err != nil && (errors.Is(context.Cause(sctx), errStalled) || errors.Is(context.Cause(sctx), errTooLarge)):
		return info, nil, none, fmt.Errorf("etcd snapshot from %s: %w after %d bytes", m.Name, context.Cause(sctx), w.n)
	case err != nil:
		return info, nil, none, err
	}
	if err := f.Sync(); err != nil {
		return info, nil, none, &localError{fmt.Errorf("sync %s: %w", plain, err)}
	}
	// read back from the disk, as a restore will: the shape, and through
	// bbolt the revision and the members, within snapshot's budget; a
	// stream that is no etcd database is passed over, not a stop
	file, err := snapshot.Verify(ctx, plain)
	if err != nil {
		return info, nil, none, fmt.Errorf("etcd snapshot from %s: %w", m.Name, err)
	}
	check := func() error { return sameMembers(file, members) }
	if members == nil {
		check = func() error { return ownCopy(file, m.Name, o.Inventory) }
	}
	if err := check(); err != nil {
		return info, nil, none, fmt.Errorf("etcd snapshot from %s: %w", m.Name, err)
	}
	if err := f.Close(); err != nil {
		return info, nil, none, &localError{fmt.Errorf("close %s: %w", plain, err)}
	}
	var stored written
	if plain != tmp {
		// encrypted as it is read, after it was verified in clear
		n, sum, err := encryptFile(ctx, plain, tmp, o.EncryptTo)
		if err != nil {
			return info, nil, none, &localError{err}
		}
		stored = written{n, sum}
		file.Path = out
		os.Remove(plain)
	}
	done = true
	if !o.Force {
		if _, err := os.Lstat(out); err == nil {
			os.Remove(tmp)
			return info, nil, none, &localError{fmt.Errorf("%s appeared while the snapshot streamed: not replacing it; pass --force, or write to another -o", out)}
		}
	}
	if err := placeSnapshot(tmp, out); err != nil {
		os.Remove(tmp)
		return info, nil, none, &localError{err}
	}
	return info, file, stored, nil
}

func (o *Options) warn(format string, args ...any) {
	if o.Warn != nil {
		o.Warn(format, args...)
	}
}

func (o *Options) say(format string, args ...any) {
	if o.Say != nil {
		o.Say(format, args...)
	}
}

// progress is what tells o.Progress how much of machine's snapshot arrived:
// a snapshot of several GiB takes a while.
func (o *Options) progress(machine string) func(int64) {
	if o.Progress == nil {
		return nil
	}
	return (&byteProgress{w: o.Progress, machine: machine, every: 2 * time.Second, now: time.Now}).update
}

// sameMembers checks that the snapshot's voting members (etcd's members
// bucket) are the members the control planes agree on: a snapshot of
// another cluster, or of this one before a member joined or left, is not
// the backup of what runs.
func sameMembers(f *snapshot.File, want []string) error {
	names := slices.Sorted(slices.Values(f.Voters()))
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(names, want) {
		return fmt.Errorf("it holds %d %s (%s) where etcd reports %d (%s): not a snapshot of this etcd as it runs", len(names), plural(len(names), "member", "members"), quotedList(names), len(want), strings.Join(want, ", "))
	}
	return nil
}

// ownCopy checks a snapshot taken without quorum, when no member list
// tells etcd's members: it must hold the member it came from, and its
// members must be control planes of the inventory (etcd names members
// after their hostnames, which devata sets to the machines' names).
func ownCopy(f *snapshot.File, from string, inv *inventory.Inventory) error {
	names := slices.Sorted(slices.Values(f.Voters()))
	var cps, strangers []string
	for _, m := range inv.ControlPlanes() {
		cps = append(cps, m.Name)
	}
	for _, n := range names {
		if !slices.Contains(cps, n) {
			strangers = append(strangers, n)
		}
	}
	switch {
	case !slices.Contains(names, from):
		return fmt.Errorf("it holds %d %s (%s), not %s, which streamed it: not a snapshot of this member's etcd", len(names), plural(len(names), "member", "members"), quotedList(names), from)
	case len(strangers) > 0:
		return fmt.Errorf("its members %s are not control planes of the inventory (%s): not a snapshot of this cluster's etcd", quotedList(strangers), strings.Join(cps, ", "))
	}
	return nil
}

// quotedList joins names read from a snapshot, each quoted where it holds
// what a terminal would act on.
func quotedList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		if q := strconv.Quote(n); q[1:len(q)-1] != n {
			n = q
		}
		out[i] = n
	}
	return strings.Join(out, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// placeSnapshot puts the verified snapshot at tmp in its place: renamed
// over out when out is absent or a regular file, copied through when out is
// a named pipe or the process' output (and tmp removed), refused when out
// became anything else (internal/outfile).
func placeSnapshot(tmp, out string) error {
	kind, err := outfile.Check(out)
	if err != nil {
		return err
	}
	if kind != outfile.Through {
		if err := os.Rename(tmp, out); err != nil {
			return err
		}
		syncDir(filepath.Dir(out))
		return nil
	}
	src, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer src.Close()
	err = outfile.Write(out, 0o600, false, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
	if err == nil {
		os.Remove(tmp)
	}
	return err
}
