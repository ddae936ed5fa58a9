package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"devata.dev/devata/backup"
	"devata.dev/devata/backup/store"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/talosapi"

	"devata.dev/devata/internal/outfile"
	"devata.dev/devata/internal/termsafe"
)

func (a *app) newBackupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up what no inventory can render again: etcd",
		Long: `backup takes off the cluster what no inventory can render again: etcd's
snapshot (backup etcd). It only reads, and a talosconfig with the
os:etcd:backup role is enough (os:operator and os:admin work too; os:reader
may not take snapshots): talosctl config new --roles os:etcd:backup FILE makes
one. It backs up when etcd has no quorum too, from a member that still runs.

backup verify proves a snapshot restores (into a real etcd, on loopback);
backup list shows the snapshots in a directory with their last proof;
backup prune deletes those a grandfather-father-son policy does not keep.
backup etcd --to DIR/ --verify --prune --keep-… does all three in one
scheduled run. Each takes a directory, or a URL: s3://BUCKET/PREFIX/ (any
S3-compatible service, configured as the aws CLI is: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL_S3, AWS_PROFILE, or the
settings file's s3 section) or file:///DIR/. docs/backup.md and
docs/backup-storage.md tell the whole of it.`,
	}
	cmd.AddCommand(a.newBackupEtcdCommand(), a.newBackupVerifyCommand(), a.newBackupListCommand(), a.newBackupPruneCommand())
	return cmd
}

// backupEtcdLong is the help text of backup etcd.
const backupEtcdLong = `backup etcd asks every control plane for its view of etcd, then streams a
snapshot (Talos' EtcdSnapshot, what talosctl etcd snapshot saves) from a healthy
member whose view the others share, into FILE.tmp (mode 0600). It is verified
as etcdutl's restore checks it (a multiple of 512 bytes plus the sha256 etcd
appends, and that hash) before FILE.tmp is renamed to FILE. A stream that broke
off, arrived corrupt or stalled for --timeout is thrown away and the next
healthy control plane is tried. FILE.json (0600) records the cluster, the time,
the control plane, etcd's revision and members, FILE's size and sha256, the
Talos version (as that control plane reports it, when the role may ask), the
Kubernetes version (as the inventory declares it), the inventory's path and
sha256 and, when the inventory is in a Git work tree, its commit and whether
the file differs from it. Neither file is replaced without --force. --to DIR/
names the file etcd-CLUSTER-TIME.db in DIR, so a schedule keeps every
snapshot.

--to s3://BUCKET/PREFIX/ (or file:///DIR/) writes off the machine: the
snapshot is written and verified into a private temporary directory (0700,
in $TMPDIR) exactly as above, then uploaded as PREFIX/etcd-CLUSTER-TIME.db
(or the NAME given after the last slash) with its sidecar: the snapshot
first, the sidecar last (with the size and sha256 of what was uploaded), so
that list, verify --latest and prune see a snapshot only once both are
there. The temporary copy is removed whatever happens. The destination is
reached before any machine is asked: an endpoint that is down, wrong
credentials or a missing bucket stop the run (exit 2) with nothing written.
S3 is configured as the aws CLI is (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION, AWS_ENDPOINT_URL_S3, AWS_PROFILE, ~/.aws/config), or by the
settings file's s3 section (region, endpoint, profile, path-style);
credentials never go in the URL (docs/backup-storage.md).

When etcd has no quorum (more than half of its members down, so no member
has a leader and no member list answers), the snapshot is still taken from a
member that runs, since Talos streams the local member's database: the
command warns, says so with the member it came from, and FILE.json records
"noQuorum": true. That copy holds what the member had received and may lack
the last writes the cluster committed.

It only reads: no machine is changed and no cluster lock is taken, so it may
run next to apply or reconcile. It needs no secrets bundle. The talosconfig's
role must be os:etcd:backup, os:operator or os:admin (os:reader may not take
snapshots), and os:etcd:backup alone is enough: etcd is read only through
EtcdMemberList, EtcdStatus and EtcdSnapshot, the calls that role may make; the
etcd service and the Talos version are asked only of a role that may read
them. talosctl config new --roles os:etcd:backup FILE (with an os:admin
talosconfig) makes one.

The snapshot holds every Kubernetes object, Secrets included (encrypted with
the secretbox key from the secrets bundle): keep it as carefully as the
bundle, and keep the bundle, which a restore needs. Restore with
talosctl bootstrap --recover-from=FILE (docs/runbook.md).

--encrypt-to RECIPIENT (an age public key, age1…, or an SSH public key,
ssh-ed25519 or ssh-rsa, as age -r takes them; repeatable) encrypts the
snapshot at rest: it streams into a private temporary directory (0700, in
$TMPDIR), is verified there in clear exactly as above, then is encrypted
with age as it is read into FILE.tmp (renamed to FILE, or uploaded), and the
clear copy is removed whatever happens. FILE is what age -e writes (age -d
-i IDENTITY_FILE opens it). FILE.json stays in clear, readable without the
key: its size and sha256 are FILE's (the ciphertext), and "encryption" names
the format (age), the recipients' public keys and the clear text's size and
sha256. Every read (backup verify, bootstrap --recover-from) decrypts with
--age-identity FILE (DEVATA_AGE_IDENTITY, age-identity in the settings file,
else SOPS_AGE_KEY_FILE, as the encrypted secrets bundle is read; an age
identity file, or an unencrypted OpenSSH private key such as
~/.ssh/id_ed25519, as age -i takes them), and a missing or wrong identity
is refused naming the recipients. --encrypt-to-file FILE (repeatable) reads
recipients from a file as age -R does: one public key a line, # comments;
an SSH key of another type is refused, not skipped. Without --encrypt-to and
--encrypt-to-file, the recipients of the setting backup.encrypt-to (the
settings file's backup section, or DEVATA_BACKUP_ENCRYPT_TO, separated by
commas or line ends, age keys by spaces too: an SSH key takes a comma or
line of its own) are taken: a scheduled run encrypts without a flag; the
flags replace them.
--encrypt-to-bundle-recipients adds the recipients the inventory's
sops-encrypted secrets bundle lists (an age-encrypted bundle records none).

--verify then proves the new snapshot restores, as backup verify does
(restored into a real etcd on loopback; the proof goes into FILE.json).
--prune with --to DIR/ (or URL/) then deletes, as backup prune --yes does, the snapshots
in DIR the --keep-* policy does not keep: only after the new snapshot was
written and verified (and, with --verify, proven), so a failed run deletes
nothing. See backup prune --help for the policy.

--prom-file FILE records the run in a Prometheus textfile (node_exporter's
textfile collector): devata_backup_last_success_timestamp_seconds and
devata_backup_size_bytes, and with --verify
devata_backup_last_verified_timestamp_seconds and
devata_backup_verified_revision, labelled cluster and destination. The file
is shared with backup verify --prom-file: each run rewrites only what it
tried and keeps the rest, so a failed run keeps the last success's time
(docs/runbook.md#in-the-cluster-the-backup-and-verify-cronjobs-metrics-and-alerts).

Exit 0 written and verified (and proven, and pruned, when asked), 2 not
(nothing is left at FILE when the write failed; a snapshot that fails
--verify stays, recorded as failed, and nothing is pruned), 64 for a usage
error.`

func (a *app) newBackupEtcdCommand() *cobra.Command {
	var flags backupEtcdFlags
	cmd := &cobra.Command{
		Use:   "etcd --to FILE|DIR/|URL",
		Short: "Write a verified etcd snapshot from a healthy control plane (0600) and FILE.json; os:etcd:backup is enough",
		Long:  backupEtcdLong,
		Example: `  devata backup etcd --to backups/etcd-$(date +%F).db
  devata backup etcd --to /backups/      # /backups/etcd-homelab-20261204T040500Z.db
  devata backup etcd --to /backups/ --verify --prune --keep-daily 7 --keep-weekly 4 --keep-monthly 6
  devata backup etcd --to /backups/ --encrypt-to age1… --verify --age-identity ~/.config/devata/age.txt
  AWS_ENDPOINT_URL_S3=https://minio.example:9000 devata backup etcd --to s3://backups/homelab/ --verify --prune --keep-daily 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runBackupEtcd(cmd, &flags)

		},
	}
	cmd.Flags().StringVar(&flags.output, "to", "", "snapshot file to write (FILE.json is written next to it); a directory (or a path ending in /, created 0700 when missing) gets etcd-CLUSTER-TIME.db; s3://BUCKET/PREFIX/[NAME] or file:///DIR/[NAME] uploads it there")
	deprecatedPathOutput(cmd, a.streams.Err, &flags.output, "--to")
	cmd.Flags().BoolVar(&flags.force, "force", false, "replace FILE and FILE.json if they exist")
	cmd.Flags().StringArrayVar(&flags.encryptTo, "encrypt-to", nil, "encrypt the snapshot to this recipient: an age public key (age1…, what age-keygen -y prints) or an SSH public key (ssh-ed25519 or ssh-rsa, the line of ~/.ssh/id_ed25519.pub); repeatable; replaces the setting backup.encrypt-to, env DEVATA_BACKUP_ENCRYPT_TO: verified in clear in a private temporary directory, stored encrypted; FILE.json stays in clear and names the recipients")
	cmd.Flags().StringArrayVar(&flags.encryptToFiles, "encrypt-to-file", nil, "encrypt the snapshot to the recipients in this file, as age -R reads one (a public key a line, age1… or ssh-ed25519/ssh-rsa; # comments); repeatable, with --encrypt-to too; replaces the setting backup.encrypt-to")
	cmd.Flags().BoolVar(&flags.bundleRecipients, "encrypt-to-bundle-recipients", false, "encrypt the snapshot to the age recipients the inventory's sops-encrypted secrets bundle lists too (an age-encrypted bundle records none: use --encrypt-to)")
	cmd.Flags().BoolVar(&flags.verify, "verify", false, "then prove the snapshot restores, as backup verify does")
	cmd.Flags().BoolVar(&flags.prune, "prune", false, "then delete the snapshots in --to DIR/ (or URL/) that the --keep-* policy does not keep, as backup prune --yes does")
	flags.policy.register(cmd.Flags())
	cmd.Flags().StringVar(&flags.promFile, "prom-file", "", promFileUsage)
	return cmd
}

// backupEtcdFlags are the flags of backup etcd.
type backupEtcdFlags struct {
	output   string
	force    bool
	verify   bool
	prune    bool
	policy   policyFlags
	promFile string
	// encryptTo are recipients (age1…, ssh-ed25519, ssh-rsa) the
	// snapshot is encrypted to, and encryptToFiles files of them
	encryptTo      []string
	encryptToFiles []string
	// bundleRecipients adds the recipients of the sops-encrypted bundle
	bundleRecipients bool
}

func (a *app) runBackupEtcd(cmd *cobra.Command, f *backupEtcdFlags) error {
	if f.output == "" {
		return usageError(errors.New("backup etcd needs --to FILE|DIR/|URL: where to write the snapshot"))
	}
	keeps := f.policy.p != (backup.Policy{})
	url := backup.IsURL(f.output)
	switch {
	case url && f.prune && !strings.HasSuffix(strings.SplitN(f.output, "?", 2)[0], "/"):
		return usageError(fmt.Errorf("--prune needs --to URL/ (a prefix of snapshots, ending in a slash), not the object %s", f.output))
	case !url && f.prune && !backup.NamesDirectory(f.output):
		return usageError(fmt.Errorf("--prune needs --to DIR/ (a directory of snapshots), not the file %s", f.output))
	case !url && f.verify && writesThrough(f.output):
		return usageError(fmt.Errorf("--verify needs --to FILE or DIR/: a snapshot written through %s cannot be read back", f.output))
	case keeps && !f.prune:
		return usageError(errors.New("--keep-* say what --prune keeps: add --prune, or use devata backup prune"))
	case f.prune:
		if err := f.policy.p.Check(); err != nil {
			return usageError(err)
		}
	}
	after := afterBackup{verify: f.verify, outcome: &backup.Outcome{BackupTried: true, VerifyTried: f.verify}}
	if f.prune {
		after.prune = &f.policy.p
	}
	if cmd.Flags().Changed("encrypt-to") || cmd.Flags().Changed("encrypt-to-file") {
		if len(f.encryptTo) > 0 {
			rs, err := render.ParseAgeRecipients(f.encryptTo)
			if err != nil {
				return usageError(fmt.Errorf("--encrypt-to: %w", err))
			}
			after.encryptTo = rs
		}
		for _, f := range f.encryptToFiles {
			rs, err := readRecipientsFile(f)
			if err != nil {
				return usageError(fmt.Errorf("--encrypt-to-file: %w; nothing was backed up", err))
			}
			after.encryptTo = append(after.encryptTo, rs...)
		}
	} else if set := a.settings.Backup; len(set.EncryptTo) > 0 {
		// the setting: what deploy/'s CronJob encrypts to without a flag
		rs, err := render.ParseAgeRecipients(set.EncryptTo)
		if err != nil {
			return exitWith(exitTrouble, fmt.Errorf("%s: %w; nothing was backed up", set.EncryptToFrom, err))
		}
		after.encryptTo = rs
	}
	after.bundleRecipients = f.bundleRecipients
	err := a.backupEtcd(cmd.Context(), f.output, f.force, after)
	return a.writeBackupMetrics(cmd.Context(), f.promFile, f.output, after.outcome, err)
}

// promFileUsage is --prom-file's help on backup etcd and backup verify.
const promFileUsage = "also record the outcome in this Prometheus textfile (atomically; shared by backup etcd and backup verify, each updating only what it tried): devata_backup_last_success_timestamp_seconds, _size_bytes, _last_verified_timestamp_seconds, _verified_revision"

// writeBackupMetrics records o in promFile (when given) after a run of
// backup etcd or backup verify whose result is runErr, for the destination
// dest (--to, a snapshot, or --latest). A run that failed before it knew
// the inventory's cluster reads the inventory for its name. The run's own
// error comes first; a textfile that could not be written fails a run
// that succeeded (exit 2: the alerts would measure a stale timestamp).
func (a *app) writeBackupMetrics(ctx context.Context, promFile, dest string, o *backup.Outcome, runErr error) error {
	if promFile == "" || o == nil {
		return runErr
	}
	if o.Cluster == "" {
		inv, err := inventory.LoadContext(ctx, a.settings.Inventory)
		if err != nil {
			fmt.Fprintf(a.streams.Err, "--prom-file %s not written: the cluster's name comes from %s, which is invalid; run devata validate\n", promFile, a.settings.Inventory)
			return runErr
		}
		o.Cluster = inv.Cluster.Name
	}
	o.Destination = backup.MetricsDestination(dest)
	err := backup.WriteMetrics(promFile, *o)
	switch {
	case err == nil:
		return runErr
	case runErr != nil:
		fmt.Fprintf(a.streams.Err, "%v\n", err)
		return runErr
	}
	return exitWith(exitTrouble, fmt.Errorf("%w; the run itself succeeded", err))
}

// printSnapshotLine says what backup etcd wrote where.
func printSnapshotLine(w io.Writer, s backup.Sidecar, where string) {
	revision := "unknown"
	if s.EtcdRevision > 0 {
		revision = fmt.Sprint(s.EtcdRevision)
	}
	from := s.ControlPlane
	if s.NoQuorum {
		from += " (etcd has no quorum: this is " + s.ControlPlane + "'s local copy, taken without a leader)"
	}
	enc := ""
	if e := s.Encryption; e != nil {
		enc = fmt.Sprintf(", age-encrypted to %s (in clear %d bytes, sha256 %s)", strings.Join(e.Recipients, ", "), e.PlaintextSize, e.PlaintextSHA256)
	}
	fmt.Fprintf(w, "etcd snapshot of %s from %s written to %s: %s (%d bytes), sha256 %s%s, etcd revision %s, members %s\n",
		s.Cluster, from, where, humanize.IBytes(uint64(s.Size)), s.Size, s.SHA256, enc, revision, strings.Join(s.Members, " ")) //nolint:gosec // a size is never negative
}

// backupEtcdURL is backup etcd --to URL (s3://bucket/prefix/[NAME],
// file:///dir/[NAME]): the snapshot is written and verified into a private
// temporary directory exactly as for --to FILE, then uploaded with its
// sidecar (store.PutSnapshot: the snapshot first, the sidecar last, so the
// pair counts only once both are there); the temporary copy is removed
// whatever happens.
func (a *app) backupEtcdURL(ctx context.Context, out string, force bool, after afterBackup) error {
	dest, name := store.Split(out)
	so := a.storeOptions()
	so.CreateDir = name == "" // file:///dir/: created (0700) as --to DIR/ is
	st, err := store.Open(ctx, dest, so)
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	defer st.Close()
	// reach the destination before any machine is asked: an endpoint that
	// is down, wrong credentials and a missing bucket fail here
	objs, err := st.List(ctx)
	if err != nil {
		return exitWith(exitTrouble, fmt.Errorf("%w; nothing was backed up", err))
	}
	taken := func(name string) error {
		if force {
			return nil
		}
		for _, o := range objs {
			if o.Name == name || o.Name == backup.SidecarPath(name) {
				return fmt.Errorf("%s already holds %s: name another, or give --force to replace it", st, o.Name)
			}
		}
		return nil
	}
	if name != "" {
		if name == "." || name == ".." || strings.HasPrefix(name, ".") || strings.HasSuffix(name, backup.SidecarPath("")) {
			return exitWith(exitTrouble, fmt.Errorf("--to %s: %q is not a snapshot name (no leading dot, not ending in .json); end --to with a slash to have devata name it", out, name))
		}
		if err := taken(name); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	inv, d, err := a.openBackup(ctx, &after)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "devata-backup-") // 0700
	if err != nil {
		return exitWith(exitTrouble, fmt.Errorf("a private directory for the snapshot before its upload: %w; set TMPDIR to a directory with room for it", err))
	}
	defer os.RemoveAll(tmp)
	local := filepath.Join(tmp, name)
	if name == "" {
		local = backup.OutPath(tmp+string(filepath.Separator), inv.Cluster.Name, time.Now())
		name = filepath.Base(local)
		if err := taken(name); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	opts := backup.Options{
		Inventory: inv, Dialer: d, Out: local, Timeout: a.settings.Timeout, Log: a.log,
		Warn:      func(format string, args ...any) { fmt.Fprintf(a.streams.Err, "warning: "+format+"\n", args...) },
		Say:       func(format string, args ...any) { fmt.Fprintf(a.streams.Err, format+"\n", args...) },
		EncryptTo: after.encryptTo,
	}
	if f, ok := termsafe.FileOf(a.streams.Err); ok && term.IsTerminal(int(f.Fd())) {
		opts.Progress = f
	}
	if _, err := backup.Etcd(ctx, opts); err != nil {
		return exitWith(exitTrouble, fmt.Errorf("%s; nothing was uploaded to %s", strings.ReplaceAll(err.Error(), local, name), st))
	}
	where, side, err := backup.Upload(ctx, st, local, name)
	if err != nil {
		return exitWith(exitTrouble, fmt.Errorf("%w; no snapshot named %s counts at %s (a snapshot counts only with its sidecar): run the backup again", err, name, st))
	}
	printSnapshotLine(a.streams.Out, *side, where)
	fmt.Fprintf(a.streams.Out, "sidecar written to %s\n", backup.SidecarPath(where))
	after.succeeded(*side)
	if after.verify {
		if err := a.backupVerify(ctx, inv, where, false, "", "text", after.outcome); err != nil {
			if after.prune != nil {
				fmt.Fprintln(a.streams.Err, "nothing was pruned: the new snapshot is not proven")
			}
			return err
		}
	}
	if after.prune != nil {
		return a.backupPrune(ctx, dest, *after.prune, true, "text")
	}
	return nil
}

// storeOptions are the settings file's s3 section as backup/store takes them.
func (a *app) storeOptions() store.Options {
	s := a.settings.S3
	return store.Options{Region: s.Region, Endpoint: s.Endpoint, Profile: s.Profile, UsePathStyle: s.PathStyle}
}

// writesThrough says --to is a pipe or the process' output, not a file.
func writesThrough(out string) bool {
	kind, err := outfile.Check(out)
	return err == nil && kind == outfile.Through
}

// afterBackup is how backup etcd writes its snapshot (encryptTo), what it
// does once it is written, and what the run's --prom-file records
// (outcome, nil without).
type afterBackup struct {
	verify  bool
	prune   *backup.Policy
	outcome *backup.Outcome
	// encryptTo encrypts the snapshot at rest (--encrypt-to);
	// bundleRecipients adds the sops bundle's (recipientsFor)
	encryptTo        []age.Recipient
	bundleRecipients bool
}

// openBackup is what backup etcd needs before it asks any machine, for a
// file and a URL alike: the inventory (its warnings printed, its cluster
// recorded in after.outcome), the recipients to encrypt to (into
// after.encryptTo) and a dialer from the talosconfig.
func (a *app) openBackup(ctx context.Context, after *afterBackup) (*inventory.Inventory, *talosapi.Dialer, error) {
	inv, err := inventory.LoadContext(ctx, a.settings.Inventory)
	if err != nil {
		fmt.Fprintln(a.streams.Err, err)
		return nil, nil, exitWith(exitTrouble, fmt.Errorf("%s is invalid: nothing was backed up; run devata validate", a.settings.Inventory))
	}
	a.printWarnings(inv)
	if after.outcome != nil {
		after.outcome.Cluster = inv.Cluster.Name
	}
	if after.encryptTo, err = recipientsFor(inv, *after); err != nil {
		return nil, nil, exitWith(exitTrouble, err)
	}
	tc, err := talosapi.LoadTalosconfig(a.settings.Talosconfig)
	if err != nil {
		return nil, nil, exitWith(exitTrouble, err)
	}
	d, err := a.newDialer(tc)
	if err != nil {
		return nil, nil, exitWith(exitTrouble, err)
	}
	return inv, d, nil
}

// succeeded records the snapshot backup etcd wrote.
func (a afterBackup) succeeded(s backup.Sidecar) {
	if a.outcome != nil {
		a.outcome.BackupAt, a.outcome.Size = s.Time, s.Size
	}
}

// recipientsFor are the recipients backup etcd encrypts to: --encrypt-to's
// and, with --encrypt-to-bundle-recipients, those inv's sops-encrypted
// bundle lists (bootstrap.BundleRecipients; the bundle is not decrypted).
func recipientsFor(inv *inventory.Inventory, after afterBackup) ([]age.Recipient, error) {
	if !after.bundleRecipients {
		return after.encryptTo, nil
	}
	names, err := render.BundleRecipients(inv.SecretsPath())
	if err != nil {
		return nil, fmt.Errorf("--encrypt-to-bundle-recipients: %w; nothing was backed up", err)
	}
	rs, err := render.ParseAgeRecipients(names)
	if err != nil {
		return nil, fmt.Errorf("--encrypt-to-bundle-recipients: %s: %w; nothing was backed up", inv.SecretsPath(), err)
	}
	return append(slices.Clone(after.encryptTo), rs...), nil
}

func (a *app) backupEtcd(ctx context.Context, out string, force bool, after afterBackup) error {
	if backup.IsURL(out) {
		return a.backupEtcdURL(ctx, out, force, after)
	}
	dir := out
	if err := backup.PrepareOut(out); err != nil {
		return exitWith(exitTrouble, err)
	}
	if !force && !backup.NamesDirectory(out) { // a file named now: refuse an existing one before loading anything
		if err := backup.CheckVacant(out); err != nil {
			return exitWith(exitTrouble, err)
		}
	}
	inv, d, err := a.openBackup(ctx, &after)
	if err != nil {
		return err
	}
	out = backup.OutPath(out, inv.Cluster.Name, time.Now())
	opts := backup.Options{
		Inventory: inv, Dialer: d, Out: out, Force: force, Timeout: a.settings.Timeout, Log: a.log,
		Warn:      func(format string, args ...any) { fmt.Fprintf(a.streams.Err, "warning: "+format+"\n", args...) },
		Say:       func(format string, args ...any) { fmt.Fprintf(a.streams.Err, format+"\n", args...) },
		EncryptTo: after.encryptTo,
	}
	if f, ok := termsafe.FileOf(a.streams.Err); ok && term.IsTerminal(int(f.Fd())) {
		opts.Progress = f // progress on a terminal only
	}
	res, err := backup.Etcd(ctx, opts)
	say := a.streams.Out
	if res != nil && res.SidecarPath == "" {
		say = a.streams.Err // the snapshot went to a pipe or the output itself
	}
	if res != nil {
		printSnapshotLine(say, res.Sidecar, res.Path)
	}
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	if res.SidecarPath == "" {
		fmt.Fprintf(say, "no sidecar: %s is a pipe or the output, with no file beside it; keep the line above with the snapshot\n", res.Path)
		return nil
	}
	fmt.Fprintf(say, "sidecar written to %s\n", res.SidecarPath)
	after.succeeded(res.Sidecar)
	if after.verify {
		if err := a.backupVerify(ctx, inv, res.Path, false, "", "text", after.outcome); err != nil {
			if after.prune != nil {
				fmt.Fprintln(a.streams.Err, "nothing was pruned: the new snapshot is not proven")
			}
			return err
		}
	}
	if after.prune != nil {
		return a.backupPrune(ctx, dir, *after.prune, true, "text")
	}
	return nil
}
