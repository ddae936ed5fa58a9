package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

func (a *app) newBackupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up what no inventory can render again: etcd",
	}
	cmd.AddCommand(a.newBackupEtcdCommand())
	return cmd
}

func (a *app) newBackupEtcdCommand() *cobra.Command {
	var flags struct {
		output string
		force  bool
	}
	cmd := &cobra.Command{
		Use:   "etcd -o FILE",
		Short: "Write a verified etcd snapshot from a healthy control plane (0600) and FILE.json",
		Long: `backup etcd asks every control plane for its view of etcd, then streams a
snapshot (Talos' EtcdSnapshot, what talosctl etcd snapshot saves) from a healthy
member whose view the others share, into FILE.tmp (mode 0600). It is verified
as etcdutl's restore checks it (a multiple of 512 bytes plus the sha256 etcd
appends, and that hash) before FILE.tmp is renamed to FILE. A stream that broke
off, arrived corrupt or stalled for --timeout is thrown away and the next
healthy control plane is tried. FILE.json (0600) records the cluster, the time,
the control plane, etcd's revision and members, FILE's size and sha256, the
Talos version (as that control plane reports it), the Kubernetes version (as
the inventory declares it) and the inventory's path and sha256. Neither file
is replaced without --force.

It only reads: no machine is changed and no cluster lock is taken, so it may
run next to apply or reconcile. It needs no secrets bundle, but the
talosconfig's role must be os:admin, os:operator or os:etcd:backup
(os:reader may not take snapshots).

The snapshot holds every Kubernetes object, Secrets included (encrypted with
the secretbox key from the secrets bundle): keep it as carefully as the
bundle, and keep the bundle, which a restore needs. Restore with
talosctl bootstrap --recover-from=FILE (docs/runbook.md).

Exit 0 written and verified, 2 not (nothing is left at FILE), 64 for a usage
error.`,
		Example: `  devata backup etcd -o backups/etcd-$(date +%F).db`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if flags.output == "" {
				return usageError(errors.New("backup etcd needs -o FILE: where to write the snapshot"))
			}
			return a.backupEtcd(cmd.Context(), flags.output, flags.force)
		},
	}
	cmd.Flags().StringVarP(&flags.output, "output", "o", "", "snapshot file to write (FILE.json is written next to it)")
	cmd.Flags().BoolVar(&flags.force, "force", false, "replace FILE and FILE.json if they exist")
	return cmd
}

// backupSidecar is FILE.json: what a restore needs to know about FILE.
// Nothing secret goes in it.
type backupSidecar struct {
	Cluster      string    `json:"cluster"`
	Time         time.Time `json:"time"`
	ControlPlane string    `json:"controlPlane"`
	Endpoint     string    `json:"endpoint"`
	// EtcdRevision is the newest revision in the snapshot; absent when it
	// could not be read.
	EtcdRevision int64    `json:"etcdRevision,omitempty"`
	Members      []string `json:"members"`
	// Snapshot is FILE's name; Size and SHA256 are FILE's own, what
	// sha256sum prints (etcd's hash of the database is FILE's last 32 bytes).
	Snapshot     string `json:"snapshot"`
	Size         int64  `json:"size"`
	SHA256       string `json:"sha256"`
	TalosVersion string `json:"talosVersion"`
	// KubernetesVersion is the inventory's cluster.kubernetesVersion.
	KubernetesVersion string `json:"kubernetesVersion"`
	Inventory         string `json:"inventory"`
	InventorySHA256   string `json:"inventorySha256"`
}

// localError is a failure on this side (the file system), which no other
// control plane fixes.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

func (a *app) backupEtcd(ctx context.Context, out string, force bool) error {
	sidecar := out + ".json"
	if !force {
		for _, p := range []string{out, sidecar} {
			if _, err := os.Lstat(p); err == nil {
				return exitWith(exitTrouble, fmt.Errorf("%s exists: not replacing an etcd backup; pass --force, or write to another -o", p))
			}
		}
	}
	inv, err := inventory.LoadContext(ctx, a.settings.Inventory)
	if err != nil {
		fmt.Fprintln(a.streams.Err, err)
		return exitWith(exitTrouble, fmt.Errorf("%s is invalid: nothing was backed up; run devata validate", a.settings.Inventory))
	}
	invBytes, err := os.ReadFile(inv.Path)
	if err != nil {
		return exitWith(exitTrouble, fmt.Errorf("inventory: %w", err))
	}
	a.printWarnings(inv)
	tc, err := machines.LoadTalosconfig(a.settings.Talosconfig)
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	d, err := machines.NewDialer(tc, a.settings.Dial)
	if err != nil {
		return exitWith(exitTrouble, err)
	}

	view := gate.ObserveEtcd(ctx, inv, d, a.settings.Timeout)
	sources, err := backupSources(view)
	if err != nil {
		return exitWith(exitTrouble, fmt.Errorf("%w; nothing was written", err))
	}
	if len(view.Problems) > 0 {
		why := view.Problems
		if len(view.Down) > 0 {
			why = append([]string{"down: " + strings.Join(view.Down, ", ")}, why...)
		}
		fmt.Fprintf(a.streams.Err, "warning: etcd is not wholly healthy (%s); backing up from a healthy member\n", strings.Join(why, "; "))
	}

	for i, name := range sources {
		m := inv.Machine(name)
		if m == nil {
			continue // a member the inventory does not list: ObserveEtcd warned
		}
		info, rev, err := a.snapshotTo(ctx, d, m, out, force)
		var local *localError
		switch {
		case err == nil:
		case errors.As(err, &local) || ctx.Err() != nil:
			return exitWith(exitTrouble, fmt.Errorf("%w; nothing was written to %s", err, out))
		default:
			next := ""
			if i+1 < len(sources) {
				next = "; trying " + sources[i+1]
			}
			fmt.Fprintf(a.streams.Err, "%v%s\n", err, next)
			continue
		}
		abs, _ := filepath.Abs(inv.Path) //nolint:errcheck // the path was just read: Abs only fails without a working directory
		invSum := sha256.Sum256(invBytes)
		meta := backupSidecar{
			Cluster: inv.Cluster.Name, Time: time.Now().UTC().Truncate(time.Second),
			ControlPlane: m.Name, Endpoint: d.Endpoint(m),
			EtcdRevision: rev, Members: view.Members,
			Snapshot: filepath.Base(out), Size: info.Size, SHA256: info.SHA256,
			TalosVersion: info.TalosVersion, KubernetesVersion: inv.Cluster.KubernetesVersion,
			Inventory: abs, InventorySHA256: hex.EncodeToString(invSum[:]),
		}
		revision := "unknown"
		if rev > 0 {
			revision = fmt.Sprint(rev)
		}
		fmt.Fprintf(a.streams.Out, "etcd snapshot of %s from %s written to %s: %s (%d bytes), sha256 %s, etcd revision %s, members %s\n",
			inv.Cluster.Name, m.Name, out, humanize.IBytes(uint64(info.Size)), info.Size, info.SHA256, revision, strings.Join(view.Members, " ")) //nolint:gosec // a size is never negative
		if err := writeSidecar(sidecar, meta); err != nil {
			_ = os.Remove(sidecar) // an older one describes another snapshot
			return exitWith(exitTrouble, fmt.Errorf("%s is written and verified, but its sidecar is not: %w", out, err))
		}
		fmt.Fprintf(a.streams.Out, "sidecar written to %s\n", sidecar)
		return nil
	}
	return exitWith(exitTrouble, fmt.Errorf("no verified etcd snapshot from %s (why is above); nothing was written to %s", strings.Join(sources, ", "), out))
}

// backupSources are the control planes worth a snapshot, in the order to
// try them: the healthy members of an etcd whose members every answering
// control plane agrees on. A control plane that is down or unhealthy does
// not stop a backup (that is when one is wanted most); a split or an etcd
// that was never bootstrapped does.
func backupSources(v gate.EtcdView) ([]string, error) {
	switch {
	case len(v.NotBootstrapped) > 0:
		return nil, fmt.Errorf("no control plane has etcd bootstrapped (%s wait to be bootstrapped or to join): there is nothing to back up; run devata bootstrap", strings.Join(v.NotBootstrapped, ", "))
	case v.Members == nil:
		return nil, fmt.Errorf("the control planes do not agree on etcd's members, or none answered (%s): not backing up an etcd whose members are unknown; see devata drift --checks etcd", strings.Join(v.Problems, "; "))
	case len(v.Healthy) == 0:
		return nil, fmt.Errorf("no etcd member is healthy (%s): see devata drift --checks etcd", strings.Join(v.Problems, "; "))
	}
	return v.Healthy, nil
}

// snapshotTo streams m's snapshot to out.tmp (0600), verifies it, reads its
// revision and renames it to out. Failures that are this side's are
// localErrors; on any failure out.tmp is gone.
func (a *app) snapshotTo(ctx context.Context, d *machines.Dialer, m *inventory.Machine, out string, force bool) (machines.SnapshotInfo, int64, error) {
	tmp := out + ".tmp"
	_ = os.Remove(tmp) // left by an interrupted run: devata's by its name
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return machines.SnapshotInfo{}, 0, &localError{err}
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil { // whatever the umask
		return machines.SnapshotInfo{}, 0, &localError{err}
	}
	c, err := d.Client(ctx, m)
	if err != nil {
		return machines.SnapshotInfo{}, 0, fmt.Errorf("etcd snapshot from %s: dial %s: %w", m.Name, d.Endpoint(m), err)
	}
	defer c.Close()

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &streamWatch{w: f, idle: a.settings.Timeout, cancel: cancel, machine: m.Name, progress: a.streamProgress(m.Name)}
	w.start()
	info, err := machines.EtcdSnapshot(sctx, c, m, w)
	w.stop()
	var local *streamWriteError
	switch {
	case errors.As(err, &local):
		return info, 0, &localError{fmt.Errorf("write %s: %w", tmp, local.err)}
	case err != nil && errors.Is(context.Cause(sctx), errStalled):
		return info, 0, fmt.Errorf("etcd snapshot from %s: %w after %d bytes", m.Name, context.Cause(sctx), w.n)
	case err != nil:
		return info, 0, err
	}
	if err := f.Sync(); err != nil {
		return info, 0, &localError{fmt.Errorf("sync %s: %w", tmp, err)}
	}
	rev, err := machines.SnapshotRevision(f, info.Size)
	if err != nil {
		a.log.Warn("etcd revision not read from the snapshot", "file", tmp, "error", err)
	}
	done = true
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return info, 0, &localError{fmt.Errorf("close %s: %w", tmp, err)}
	}
	if !force {
		if _, err := os.Lstat(out); err == nil {
			os.Remove(tmp)
			return info, 0, &localError{fmt.Errorf("%s appeared while the snapshot streamed: not replacing it; pass --force, or write to another -o", out)}
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return info, 0, &localError{err}
	}
	syncDir(filepath.Dir(out))
	return info, rev, nil
}

// writeSidecar writes path (0600) whole or not at all.
func writeSidecar(path string, meta backupSidecar) error {
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(append(data, '\n'))
	if werr == nil {
		werr = f.Chmod(0o600)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return werr
	}
	syncDir(filepath.Dir(path))
	return nil
}

// syncDir makes a rename in dir durable; best effort, as not every file
// system syncs directories.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

var errStalled = errors.New("the stream stalled")

// streamWriteError is a failed write to the snapshot file, told apart from
// the stream's own failures.
type streamWriteError struct{ err error }

func (e *streamWriteError) Error() string { return e.err.Error() }
func (e *streamWriteError) Unwrap() error { return e.err }

// streamWatch passes the stream to the file, cancels it when no byte came
// for idle (a snapshot of several GiB outlasts any per-call timeout, a
// stalled one should not last forever) and reports progress.
type streamWatch struct {
	w        io.Writer
	idle     time.Duration
	cancel   context.CancelCauseFunc
	machine  string
	progress func(n int64)

	mu    sync.Mutex
	n     int64
	timer *time.Timer
}

func (s *streamWatch) start() {
	s.timer = time.AfterFunc(s.idle, func() {
		s.cancel(fmt.Errorf("%w: no data from %s for %s", errStalled, s.machine, s.idle))
	})
}

func (s *streamWatch) stop() { s.timer.Stop() }

func (s *streamWatch) Write(p []byte) (int, error) {
	s.timer.Reset(s.idle)
	n, err := s.w.Write(p)
	s.mu.Lock()
	s.n += int64(n)
	total := s.n
	s.mu.Unlock()
	if s.progress != nil {
		s.progress(total)
	}
	if err != nil {
		return n, &streamWriteError{err}
	}
	return n, nil
}

// streamProgress prints, on a terminal only, how much of machine's snapshot
// has arrived, every two seconds: a snapshot of several GiB takes a while.
func (a *app) streamProgress(machine string) func(int64) {
	f, ok := a.streams.Err.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return (&byteProgress{w: f, machine: machine, every: 2 * time.Second, now: time.Now}).update
}

// byteProgress prints a line at most every so often.
type byteProgress struct {
	w       io.Writer
	machine string
	every   time.Duration
	now     func() time.Time
	start   time.Time
	last    time.Time
}

func (p *byteProgress) update(n int64) {
	now := p.now()
	if p.start.IsZero() {
		p.start, p.last = now, now
		return
	}
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	rate := float64(n) / now.Sub(p.start).Seconds()
	fmt.Fprintf(p.w, "etcd snapshot from %s: %s received (%s/s)\n", p.machine, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(rate))) //nolint:gosec // sizes are never negative
}
