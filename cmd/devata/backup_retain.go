package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"devata.dev/devata/backup"
	"devata.dev/devata/backup/store"
	"devata.dev/devata/inventory"
)

// backupVerifyLong is the help text of backup verify.
const backupVerifyLong = `backup verify proves that an etcd snapshot devata backup etcd wrote restores,
before the day it must. It reads FILE and FILE.json (or, with --latest DIR, the
newest snapshot of the inventory's cluster in DIR) and:

(FILE may be an object's URL, s3://BUCKET/PREFIX/NAME or file:///DIR/NAME,
and DIR a destination's, s3://BUCKET/PREFIX/: the snapshot is then downloaded
in step 1, and the proof recorded by rewriting the sidecar object.)


  1. copies FILE into a private temporary directory (0700, in --work-dir),
     checking its size and sha256 against FILE.json;
  2. checks the copy as backup etcd does: etcd's appended sha256, a bbolt
     page graph that is a tree inside the file, then bbolt's revision and
     members, which must be FILE.json's, and the members control planes of
     the inventory's cluster;
  3. restores it with etcd's own restore code (etcdutl snapshot restore,
     etcd 3.7.1, as Talos' recovery calls it: one member) and starts that
     etcd, embedded in devata, on random loopback ports;
  4. reads from it: the revision must be FILE.json's, it must serve its one
     member, and Kubernetes' own keys must be there (namespaces, kube-system
     among them, nodes, and kube-system objects). Only key counts are read:
     no value, no Secret, leaves the restored etcd.

An encrypted snapshot (backup etcd --encrypt-to) is decrypted in step 1 with
--age-identity FILE (DEVATA_AGE_IDENTITY, age-identity in the settings file,
else SOPS_AGE_KEY_FILE): what is read must be FILE.json's size and sha256
and its clear text the sidecar's plaintextSize and plaintextSha256; a
ciphertext that does not decrypt is recorded as failed. Without an identity
that opens it, it is refused (exit 2, naming its recipients; nothing is
recorded).

The etcd is stopped and the directory removed afterwards, on failure and on
Ctrl-C too. The result is recorded in FILE.json as "verified" (time, result,
how, etcd version, revision, counts, duration, and why it failed); no other
field of FILE.json changes. The work directory needs room for about twice
the snapshot.

No machine is asked anything: it needs the inventory (for the cluster's
name and control planes), not a talosconfig or the secrets bundle.

--prom-file FILE records the proof in the Prometheus textfile backup etcd
--prom-file writes (devata_backup_last_verified_timestamp_seconds and
devata_backup_verified_revision), keeping the series it did not touch.

Exit 0 the snapshot restores, 2 it does not (why, and what to do, on stderr;
recorded as failed) or it could not be checked (nothing recorded), 64 for a
usage error.`

func (a *app) newBackupVerifyCommand() *cobra.Command {
	var flags struct {
		latest   string
		workDir  string
		output   string
		promFile string
	}
	cmd := &cobra.Command{
		Use:   "verify FILE|URL | verify --latest DIR|URL",
		Short: "Prove a snapshot restores: restore it into a real etcd on loopback and read it back; records the proof in FILE.json",
		Long:  backupVerifyLong,
		Example: `  devata backup verify /backups/etcd-homelab-20261204T040500.123456789Z.db
  devata backup verify --latest /backups/
  devata backup verify --latest s3://backups/homelab/`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case flags.latest == "" && len(args) != 1:
				return usageError(errors.New("backup verify needs a snapshot FILE, or --latest DIR"))
			case flags.latest != "" && len(args) != 0:
				return usageError(errors.New("backup verify takes a FILE or --latest DIR, not both"))
			}
			return checkFormat(flags.output, "text", "json")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path := flags.latest
			if len(args) == 1 {
				path = args[0]
			}
			o := &backup.Outcome{}
			err := a.backupVerify(cmd.Context(), nil, path, flags.latest != "", flags.workDir, flags.output, o)
			if !o.VerifyTried {
				o = nil // nothing was tried: the inventory did not load
			}
			return a.writeBackupMetrics(cmd.Context(), flags.promFile, path, o, err)
		},
	}
	cmd.Flags().StringVar(&flags.latest, "latest", "", "verify the newest snapshot of the inventory's cluster in this directory or at this URL (s3://BUCKET/PREFIX/)")
	cmd.Flags().StringVar(&flags.workDir, "work-dir", "", "where the temporary copy and the restored etcd go (default: the system's temporary directory); needs about twice the snapshot's size")
	cmd.Flags().StringVarP(&flags.output, "output", "o", "text", "text or json (the proof, as recorded in FILE.json's verified)")
	cmd.Flags().StringVar(&flags.promFile, "prom-file", "", promFileUsage)
	return cmd
}

// checkFormat refuses an -o the command does not print.
func checkFormat(got string, formats ...string) error {
	for _, f := range formats {
		if got == f {
			return nil
		}
	}
	return usageError(fmt.Errorf("-o %s: give %s", got, strings.Join(formats, " or ")))
}

func (a *app) loadInventoryFor(ctx context.Context, what string) (*inventory.Inventory, error) {
	inv, err := inventory.LoadContext(ctx, a.settings.Inventory)
	if err != nil {
		fmt.Fprintln(a.streams.Err, err)
		return nil, exitWith(exitTrouble, fmt.Errorf("%s is invalid: %s; run devata validate", a.settings.Inventory, what))
	}
	a.printWarnings(inv)
	return inv, nil
}

// backupVerify verifies path (with latest: the newest snapshot of inv's
// cluster in the directory path) against inv, loaded when nil, and records
// in o (when not nil) that it tried and, when the snapshot restores, when
// and what revision.
func (a *app) backupVerify(ctx context.Context, inv *inventory.Inventory, path string, latest bool, workDir, format string, o *backup.Outcome) error {
	if inv == nil {
		var err error
		if inv, err = a.loadInventoryFor(ctx, "nothing was verified"); err != nil {
			return err
		}
	}
	if o != nil {
		o.Cluster, o.VerifyTried = inv.Cluster.Name, true
	}
	dest, name := "", "" // an object at a URL: its destination and name
	if backup.IsURL(path) && !latest {
		dest, name = store.Split(path)
		if name == "" {
			return usageError(fmt.Errorf("%s names a destination, not a snapshot: give the snapshot's URL, or --latest %s", path, path))
		}
	}
	if latest {
		cat, err := backup.ListDest(ctx, path, a.storeOptions())
		if err != nil {
			return exitWith(exitTrouble, err)
		}
		e := cat.Latest(inv.Cluster.Name)
		if e == nil {
			return exitWith(exitTrouble, fmt.Errorf("%s holds no snapshot of %s that devata backup etcd wrote (devata backup list %s shows what is there): take one with devata backup etcd --to %s", path, inv.Cluster.Name, path, path))
		}
		if backup.IsURL(path) {
			dest, name = path, e.Name
		}
		base := cat.Store
		if backup.IsURL(base) {
			base, _, _ = strings.Cut(base, "?") // a URL's query is the destination's, not the object's
		}
		path = strings.TrimSuffix(base, "/") + "/" + e.Name
	}
	vo := backup.VerifyOptions{Inventory: inv, WorkDir: workDir, Log: a.log, Keys: a.snapshotKeys()}
	var proof *backup.Proof
	var err error
	if name != "" {
		proof, err = backup.VerifyDest(ctx, dest, name, a.storeOptions(), vo)
	} else {
		proof, err = backup.Verify(ctx, path, vo)
	}
	if proof == nil {
		return exitWith(exitTrouble, err)
	}
	if format == "json" {
		enc := json.NewEncoder(a.streams.Out)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(proof); jerr != nil {
			return exitWith(exitTrouble, jerr)
		}
	}
	if err != nil {
		if errors.Is(err, backup.ErrNotRestorable) {
			err = fmt.Errorf("%w\ndo not rely on %s: take a new snapshot with devata backup etcd and verify it; keep the older snapshots until one is proven (devata backup list shows which are)", err, path)
		}
		return exitWith(exitTrouble, err)
	}
	if o != nil {
		o.VerifiedAt, o.Revision = proof.Time, proof.Revision
	}
	if format == "text" {
		fmt.Fprintf(a.streams.Out, "%s restores: etcd %s served revision %d (the sidecar's), its restored member, %d keys: %d namespaces (kube-system among them), %d nodes, %d kube-system objects; the snapshot holds %d %s; %.1fs\n",
			path, proof.EtcdVersion, proof.Revision, proof.Keys, proof.Namespaces, proof.Nodes, proof.KubeSystem, proof.Members, plural(proof.Members, "member", "members"), proof.DurationSeconds)
		fmt.Fprintf(a.streams.Out, "proof recorded in %s\n", backup.SidecarPath(path))
	}
	return nil
}

// snapshotKeys open encrypted snapshots with the identities every command
// reads (ageIdentities: --age-identity, DEVATA_AGE_IDENTITY, the settings
// file's age-identity, else sops' SOPS_AGE_KEY, SOPS_AGE_KEY_FILE and
// keys.txt), read only when a snapshot is encrypted.
func (a *app) snapshotKeys() backup.Keys {
	return a.ageIdentities().Load
}

func (a *app) newBackupListCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list DIR|URL",
		Short: "List the snapshots in DIR or at s3://BUCKET/PREFIX/, newest first: time, cluster, revision, size, and the last proof of restore",
		Long: `backup list shows the etcd snapshots devata backup etcd --to DIR/ wrote into
DIR, newest first: the time, the cluster, etcd's revision, the size, and
whether it is encrypted at rest (age, and to how many recipients), and the
last proof of restore (backup verify): restored or failed, when, and with
which etcd. Only snapshot pairs are listed (a snapshot and its sidecar
FILE.json that names it and gives its size); anything else in DIR, a link
included, is named on stderr and left alone. Only sidecars are read.
DIR may be a URL, s3://BUCKET/PREFIX/ or file:///DIR/ (backup etcd --help
says how S3 is configured).

-o json prints {"dir", "snapshots": [...], "skipped": [...]} (docs/backup.md
has its schema).

Exit 0 listed, 2 DIR could not be read, 64 for a usage error.`,
		Example: `  devata backup list /backups/
  devata backup list /backups/ -o json | jq -r '.snapshots[0].name'
  devata backup list s3://backups/homelab/`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(errors.New("backup list needs the directory DIR"))
			}
			return checkFormat(output, "table", "json")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := backup.ListDest(cmd.Context(), args[0], a.storeOptions())
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			if output == "json" {
				return a.printJSON(listJSON(cat, nil))
			}
			a.printSkipped(cat)
			w := tabwriter.NewWriter(a.streams.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TIME\tCLUSTER\tREVISION\tSIZE\tENCRYPTED\tVERIFIED\tSNAPSHOT")
			for _, e := range cat.Entries {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Sidecar.Time.UTC().Format(time.RFC3339), e.Sidecar.Cluster, revision(e.Sidecar.EtcdRevision),
					humanize.IBytes(uint64(e.Sidecar.Size)), encryptedText(e.Sidecar.Encryption), verifiedText(e.Sidecar.Verified), e.Name) //nolint:gosec // sizes are not negative
			}
			if err := w.Flush(); err != nil {
				return exitWith(exitTrouble, err)
			}
			if len(cat.Entries) == 0 {
				fmt.Fprintf(a.streams.Err, "%s holds no snapshot devata backup etcd wrote\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func revision(r int64) string {
	if r == 0 {
		return "unknown"
	}
	return fmt.Sprint(r)
}

// encryptedText is list's ENCRYPTED column: "age (N)", N recipients, or "no".
func encryptedText(e *backup.Encryption) string {
	if e == nil {
		return "no"
	}
	return fmt.Sprintf("%s (%d %s)", e.Format, len(e.Recipients), plural(len(e.Recipients), "recipient", "recipients"))
}

func verifiedText(p *backup.Proof) string {
	if p == nil {
		return "never"
	}
	return fmt.Sprintf("%s %s (etcd %s)", p.Result, p.Time.UTC().Format(time.RFC3339), p.EtcdVersion)
}

// printSkipped names what is not a snapshot pair; orphans that prune
// decided on are printed with its decisions instead.
func (a *app) printSkipped(cat *backup.Catalog, orphans ...[]prunedOrphan) {
	decided := map[string]bool{}
	for _, list := range orphans {
		for _, o := range list {
			decided[o.Name] = true
		}
	}
	for _, s := range cat.Skipped {
		if !decided[s.Name] {
			fmt.Fprintf(a.streams.Err, "note: %s: %s; left alone\n", s.Name, s.Why)
		}
	}
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.streams.Out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitWith(exitTrouble, err)
	}
	return nil
}

// listedSnapshot is one snapshot of backup list -o json (docs/backup.md).
type listedSnapshot struct {
	Name     string    `json:"name"`
	Time     time.Time `json:"time"`
	Cluster  string    `json:"cluster"`
	Revision int64     `json:"revision,omitempty"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	Members  []string  `json:"members"`
	NoQuorum bool      `json:"noQuorum,omitempty"`
	// Encrypted says the snapshot is encrypted at rest; Encryption how
	// (the sidecar's: age, the recipients, the clear text's size and sha256).
	Encrypted  bool               `json:"encrypted"`
	Encryption *backup.Encryption `json:"encryption,omitempty"`
	Verified   *backup.Proof      `json:"verified"`
	// Keep and Why are prune's decision (prune -o json only).
	Keep *bool    `json:"keep,omitempty"`
	Why  []string `json:"why,omitempty"`
}

type listed struct {
	Dir       string           `json:"dir"`
	Snapshots []listedSnapshot `json:"snapshots"`
	Skipped   []backup.Skipped `json:"skipped"`
	// Orphans are prune's decisions on snapshots without a sidecar (prune
	// -o json only).
	Orphans []prunedOrphan `json:"orphans,omitempty"`
}

func listJSON(cat *backup.Catalog, decisions []backup.Decision) listed {
	out := listed{Dir: cat.Store, Snapshots: []listedSnapshot{}, Skipped: cat.Skipped}
	if out.Skipped == nil {
		out.Skipped = []backup.Skipped{}
	}
	for i, e := range cat.Entries {
		s := e.Sidecar
		l := listedSnapshot{Name: e.Name, Time: s.Time, Cluster: s.Cluster, Revision: s.EtcdRevision, Size: s.Size, SHA256: s.SHA256,
			Members: s.Members, NoQuorum: s.NoQuorum, Encrypted: s.Encryption != nil, Encryption: s.Encryption, Verified: s.Verified}
		if decisions != nil {
			keep := decisions[i].Keep
			l.Keep, l.Why = &keep, decisions[i].Why
		}
		out.Snapshots = append(out.Snapshots, l)
	}
	return out
}

// policyFlags are prune's --keep-* flags, on backup prune and backup etcd.
type policyFlags struct{ p backup.Policy }

func (f *policyFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.p.Last, "keep-last", 0, "keep the N newest snapshots")
	fs.IntVar(&f.p.Daily, "keep-daily", 0, "keep the newest snapshot of each of the N newest days (UTC) that have one")
	fs.IntVar(&f.p.Weekly, "keep-weekly", 0, "keep the newest snapshot of each of the N newest ISO weeks that have one")
	fs.IntVar(&f.p.Monthly, "keep-monthly", 0, "keep the newest snapshot of each of the N newest months that have one")
}

const pruneRules = `The policy is restic forget's (--keep-last, --keep-daily, --keep-weekly,
--keep-monthly, with restic's semantics): newest first, each rule keeps the
newest snapshot of each of its N newest periods that hold a snapshot (days
and months in UTC, ISO weeks; --keep-last: the N newest), and a rule with
counts left when it reaches the oldest snapshot keeps that one too. A
snapshot any rule keeps is kept; so is each cluster's newest snapshot whose
restore backup verify proved. Each cluster's snapshots are pruned on their
own. A snapshot goes with its sidecar (the snapshot first); nothing that is
not a snapshot pair (backup list) is removed, no link is followed, and a
policy that keeps nothing is refused.`

func (a *app) newBackupPruneCommand() *cobra.Command {
	var flags struct {
		policy      policyFlags
		yes         bool
		output      string
		orphanGrace time.Duration
	}
	cmd := &cobra.Command{
		Use:   "prune DIR|URL --keep-last N --keep-daily N --keep-weekly N --keep-monthly N [--yes]",
		Short: "Delete the snapshots in DIR that a grandfather-father-son policy does not keep; a dry run without --yes",
		Long: `backup prune decides, for each etcd snapshot in DIR (those backup list shows),
whether the policy keeps it and why, and prints it. DIR may be a URL,
s3://BUCKET/PREFIX/ or file:///DIR/; on S3 each snapshot is deleted with
its sidecar object. Without --yes that is
all (a dry run); with --yes it deletes each snapshot no rule keeps, with its
sidecar, and goes on past one it could not delete.

` + pruneRules + `

A snapshot without its sidecar (what a backup interrupted between its two
uploads leaves; list and latest never pick it) is deleted too, with --yes,
once it is older than --orphan-grace (default 24h: a younger one may be an
upload in progress), and only when devata named it (etcd-CLUSTER-TIME.db);
the dry run shows each. Anything else without a sidecar is left alone.

Exit 0 decided (and, with --yes, deleted), 2 DIR could not be read or a
snapshot could not be deleted, 64 for a usage error (no --keep-*).`,
		Example: `  devata backup prune /backups/ --keep-last 3 --keep-daily 7 --keep-weekly 4 --keep-monthly 6
  devata backup prune /backups/ --keep-daily 7 --yes`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(errors.New("backup prune needs the directory DIR"))
			}
			if err := flags.policy.p.Check(); err != nil {
				return usageError(err)
			}
			return checkFormat(flags.output, "text", "json")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if flags.orphanGrace < 0 {
				return usageError(fmt.Errorf("--orphan-grace %s: give a duration of zero or more", flags.orphanGrace))
			}
			return a.backupPruneGrace(cmd.Context(), args[0], flags.policy.p, flags.yes, flags.output, flags.orphanGrace)
		},
	}
	flags.policy.register(cmd.Flags())
	cmd.Flags().DurationVar(&flags.orphanGrace, "orphan-grace", defaultOrphanGrace, "also delete a snapshot devata named (etcd-CLUSTER-TIME.db) that has no sidecar once it is older than this: what an interrupted backup leaves; a younger one may be an upload in progress")
	cmd.Flags().BoolVar(&flags.yes, "yes", false, "delete; without it prune only says what it would delete")
	cmd.Flags().StringVarP(&flags.output, "output", "o", "text", "text or json (backup list's JSON with each snapshot's keep and why)")
	return cmd
}

func (a *app) backupPrune(ctx context.Context, dir string, p backup.Policy, yes bool, format string) error {
	return a.backupPruneGrace(ctx, dir, p, yes, format, defaultOrphanGrace)
}

// backupPruneGrace is backup prune with the grace an orphan (a snapshot
// without its sidecar) is given before it is deleted too.
func (a *app) backupPruneGrace(ctx context.Context, dir string, p backup.Policy, yes bool, format string, grace time.Duration) error {
	res, cat, err := backup.PruneDest(ctx, dir, a.storeOptions(), p, yes)
	if err != nil {
		return exitWith(exitTrouble, err)
	}
	orphans, oerr := a.pruneOrphans(ctx, dir, grace, yes)
	if format == "json" {
		out := listJSON(cat, res.Decisions)
		out.Orphans = orphans
		if err := a.printJSON(out); err != nil {
			return err
		}
	} else {
		a.printSkipped(cat, orphans)
		a.printDecisions(a.streams.Out, dir, p, res, yes)
		printOrphans(a.streams.Out, orphans, grace, yes)
	}
	var why []string
	for _, d := range res.Decisions {
		if err, ok := res.Failed[d.Name]; ok {
			why = append(why, fmt.Sprintf("%s: %v", d.Name, err))
		}
	}
	for _, o := range orphans {
		if o.Error != "" {
			why = append(why, fmt.Sprintf("%s: %s", o.Name, o.Error))
		}
	}
	if oerr != nil {
		why = append(why, "orphans: "+oerr.Error())
	}
	if len(why) > 0 {
		return exitWith(exitTrouble, fmt.Errorf("%d %s could not be deleted or listed (the others were deleted): %s", len(why), plural(len(why), "object", "objects"), strings.Join(why, "; ")))
	}
	return nil
}

func (a *app) printDecisions(w io.Writer, dir string, p backup.Policy, res *backup.PruneResult, yes bool) {
	fmt.Fprintf(w, "%s: %s\n", dir, p)
	drop := 0
	for _, d := range res.Decisions {
		verb := "keep  "
		if !d.Keep {
			drop++
			verb = "delete"
			if yes {
				verb = "deleted"
				if _, failed := res.Failed[d.Name]; failed {
					verb = "FAILED"
				}
			}
		}
		fmt.Fprintf(w, "%s %s  %s (%s)\n", verb, d.Name, d.Sidecar.Time.UTC().Format(time.RFC3339), strings.Join(d.Why, ", "))
	}
	switch {
	case drop == 0:
		fmt.Fprintf(w, "nothing to delete: the policy keeps all %d\n", len(res.Decisions))
	case !yes:
		fmt.Fprintf(w, "dry run: %d of %d would be deleted; rerun with --yes to delete them\n", drop, len(res.Decisions))
	default:
		fmt.Fprintf(w, "deleted %d of %d\n", len(res.Deleted), len(res.Decisions))
	}
}
