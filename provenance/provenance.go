// Package provenance says where an inventory came from: the sha256 of the
// file and, when it sits in a Git work tree, the commit checked out and
// whether the tree holds changes that commit does not. Reports and backups
// carry it so that what they describe can be traced to a commit. It reads
// Git through the git binary and is a leaf; loading and validating an
// inventory is inventory's room.
package provenance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// MaxFileSize bounds the file Of hashes. It is inventory.MaxFileSize, which
// this leaf cannot import; a test keeps the two equal.
const MaxFileSize = 4 << 20

// Timeout bounds all of Of's git calls together: provenance is worth a
// line in a report, not a stalled run.
const Timeout = 10 * time.Second

var errTimeout = fmt.Errorf("git took longer than %s", Timeout)

// Info is an inventory's provenance. The zero Info says nothing (no
// provenance was asked for); Of always fills InventorySHA256, and the Git
// fields only when the inventory is in a work tree with a commit checked out.
type Info struct {
	// Commit is the full hash of the work tree's HEAD.
	Commit string `json:"commit,omitempty"`
	// Dirty says the work tree holds changes that Commit does not: a
	// tracked file changed, staged or deleted, an untracked file that is
	// not ignored, or an inventory file that is not in Git at all (untracked
	// or ignored). The whole tree counts, not the inventory alone, because
	// its patches are files beside it.
	Dirty bool `json:"dirty,omitempty"`
	// InventoryModified says the inventory file itself is not Commit's:
	// changed (staged or not), untracked, ignored or not in Git. Dirt
	// elsewhere in the tree (a patch, an unrelated file) leaves it false.
	// Reports carry Dirty; the backup sidecar carries both.
	InventoryModified bool `json:"-"`
	// RepoPath is the inventory file's path from the top of the work tree,
	// slash-separated: `git show COMMIT:REPOPATH` prints the committed file,
	// whose sha256 can be compared with InventorySHA256.
	RepoPath string `json:"repoPath,omitempty"`
	// InventorySHA256 is the hex sha256 of the inventory file's bytes, what
	// sha256sum prints.
	InventorySHA256 string `json:"inventorySha256,omitempty"`
}

// IsZero reports whether i says nothing.
func (i Info) IsZero() bool { return i == Info{} }

// InGit reports whether i names a commit.
func (i Info) InGit() bool { return i.Commit != "" }

// ShortCommit is the commit's first 12 hex digits, for people; "" outside Git.
func (i Info) ShortCommit() string { return short(i.Commit) }

// ShortSHA256 is the inventory hash's first 12 hex digits, for people.
func (i Info) ShortSHA256() string { return short(i.InventorySHA256) }

// Line is the inventory at path as people read it: "inventory: PATH @
// COMMIT (dirty), sha256:HASH", or "inventory: PATH, sha256:HASH (no Git
// commit)" outside Git; "" when i says nothing.
func (i Info) Line(path string) string {
	if i.IsZero() {
		return ""
	}
	if path == "" {
		path = i.RepoPath
	}
	if path == "" {
		path = "(unnamed)"
	}
	if !i.InGit() {
		return fmt.Sprintf("inventory: %s, sha256:%s (no Git commit)", path, i.ShortSHA256())
	}
	dirty := ""
	if i.Dirty {
		dirty = " (dirty)"
	}
	return fmt.Sprintf("inventory: %s @ %s%s, sha256:%s", path, i.ShortCommit(), dirty, i.ShortSHA256())
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Of hashes the inventory file (a regular file of at most
// MaxFileSize bytes) and asks git about the work tree it is in.
//
// Without Git (no git binary, as in devata's container image; not in a work
// tree; a repository without a commit yet) the Git fields are empty and the
// error is nil. An error says what could not be learnt: the file could not
// be hashed (then Info is zero), or git is there but did not answer (a
// timeout, a repository git refuses for its owner); then Info still holds
// InventorySHA256, so a caller may warn and go on with it. Errors never
// quote the file's content.
//
// The file is hashed as it is when Of runs: hash it right after loading it.
func Of(ctx context.Context, file string) (Info, error) {
	sum, err := hashFile(file)
	if err != nil {
		return Info{}, err
	}
	info := Info{InventorySHA256: sum}
	git, err := exec.LookPath("git")
	if err != nil {
		return info, nil //nolint:nilerr // no git binary is no Git, not a failure
	}
	ctx, cancel := context.WithTimeoutCause(ctx, Timeout, errTimeout)
	defer cancel()
	g, err := askGit(ctx, git, file)
	if err != nil {
		return info, fmt.Errorf("inventory provenance: %w", err)
	}
	g.InventorySHA256 = sum
	return g, nil
}

// hashFile is the sha256 of the regular file, read as
// inventory.ReadFile reads: anything but a regular file is refused before
// it is opened, so that a FIFO cannot hang it nor a device feed it forever.
func hashFile(file string) (string, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return "", fmt.Errorf("hash inventory: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("hash inventory: %s is not a regular file", file)
	}
	if fi.Size() > MaxFileSize {
		return "", fmt.Errorf("hash inventory: %s is %d bytes, more than the %d MiB devata reads", file, fi.Size(), MaxFileSize>>20)
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("hash inventory: %w", err)
	}
	defer f.Close()
	if now, err := f.Stat(); err != nil || !now.Mode().IsRegular() || !os.SameFile(fi, now) {
		return "", fmt.Errorf("hash inventory: %s changed while it was opened: try again", file)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return "", fmt.Errorf("hash inventory: read %s: %w", file, err)
	}
	if n > MaxFileSize {
		return "", fmt.Errorf("hash inventory: %s grew past the %d MiB devata reads while it was read", file, MaxFileSize>>20)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// askGit reads the commit, the dirt and the inventory's path in the tree
// from git, run in the inventory's directory. A zero Info and no error mean
// no Git.
func askGit(ctx context.Context, git, file string) (Info, error) {
	dir, base := filepath.Split(file)
	if dir == "" {
		dir = "."
	}
	out, stderr, err := run(ctx, git, dir, "rev-parse", "--is-inside-work-tree", "--show-prefix")
	if err != nil {
		if strings.Contains(stderr, "not a git repository") {
			return Info{}, nil
		}
		return Info{}, gitError("rev-parse", dir, stderr, err)
	}
	inside, prefix, _ := strings.Cut(string(out), "\n")
	if inside != "true" {
		return Info{}, nil // in a .git directory or a bare repository: no work tree
	}
	info := Info{RepoPath: path.Join(filepath.ToSlash(strings.TrimSuffix(prefix, "\n")), base)}

	// --branch puts the commit in a header before any entry; --untracked-files
	// overrides a status.showUntrackedFiles=no in the user's config.
	out, stderr, err = run(ctx, git, dir, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=normal")
	if err != nil {
		return Info{}, gitError("status", dir, stderr, err)
	}
	for rec := range bytes.SplitSeq(out, []byte{0}) {
		switch {
		case len(rec) == 0:
		case bytes.HasPrefix(rec, []byte("# branch.oid ")):
			info.Commit = string(bytes.TrimPrefix(rec, []byte("# branch.oid ")))
		case rec[0] == '?' && isLockFile(string(rec[1:])):
			// devata's own lock (lock.Path): every write leaves it next
			// to the inventory, and it is no change to what was deployed
		case rec[0] != '#':
			info.Dirty = true
			if statusPath(rec) == info.RepoPath {
				info.InventoryModified = true
			}
		}
	}
	if !isHash(info.Commit) {
		return Info{}, nil // "(initial)": no commit yet, nothing to name
	}

	// status does not list an ignored file, and the inventory may be one.
	out, stderr, err = run(ctx, git, dir, "ls-files", "-z", "--", base)
	if err != nil {
		return Info{}, gitError("ls-files", dir, stderr, err)
	}
	if len(out) == 0 {
		info.Dirty = true
		info.InventoryModified = true
	}
	return info, nil
}

// statusPath is the path, from the top of the work tree, that one record
// of git status --porcelain=v2 -z names: after 8 fields for a changed
// entry ("1"), 9 for a renamed or copied one ("2", whose original path is
// the next record), 10 for an unmerged one ("u"), after "? " for an
// untracked and "! " for an ignored one (git-status(1), porcelain format
// version 2). Porcelain paths are always relative to the top, whatever the
// directory git runs in. "" for a record of another shape.
func statusPath(rec []byte) string {
	fields := map[byte]int{'1': 8, '2': 9, 'u': 10, '?': 1, '!': 1}
	n, ok := fields[rec[0]]
	if !ok {
		return ""
	}
	parts := bytes.SplitN(rec, []byte{' '}, n+1)
	if len(parts) != n+1 {
		return ""
	}
	return string(parts[n])
}

// isLockFile says whether an untracked path is the cluster lock devata's
// writers keep next to the inventory (lock.Path: .devata-<cluster>.lock).
// Reported as dirt, every report after the first write named the tree
// dirty (issue 33).
func isLockFile(p string) bool {
	base := path.Base(strings.TrimSpace(p))
	return strings.HasPrefix(base, ".devata-") && strings.HasSuffix(base, ".lock")
}

func isHash(s string) bool {
	if len(s) != 40 && len(s) != 64 { // SHA-1 and SHA-256 repositories
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// maxOutput bounds what is kept of a git call's stdout (the status header
// comes first, so the rest only adds entries) and of its stderr.
const maxOutput = 64 << 10

// run runs git -C dir args with no shell and an environment that cannot
// point it at another repository: a git hook running devata sets GIT_DIR
// and GIT_INDEX_FILE, relative to the hook's directory. LC_ALL=C keeps the
// messages in English, --literal-pathspecs keeps a name with * in it a
// name, and --no-optional-locks keeps status from writing the index under
// someone's feet. Nothing the repository configures runs: no fsmonitor
// hook (core.fsmonitor, which status would start), no hooks, no external
// diff; the -c settings reach the git processes status starts in
// submodules too (GIT_CONFIG_PARAMETERS).
func run(ctx context.Context, git, dir string, args ...string) (stdout []byte, stderr string, err error) {
	cmd := exec.CommandContext(ctx, git, append([]string{
		"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external=",
		"--no-optional-locks", "--literal-pathspecs", "-C", dir,
	}, args...)...)
	cmd.Env = append(cleanEnv(os.Environ()), "LC_ALL=C")
	cmd.WaitDelay = time.Second
	var out, errOut capped
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		err = context.Cause(ctx) // killed: say why, not "signal: killed"
	}
	return out.b, errOut.String(), err
}

// repoEnv are the variables `git rev-parse --local-env-vars` lists, minus
// the config ones (the user's -c settings still hold): git itself clears
// them when it enters another repository.
var repoEnv = []string{
	"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE",
	"GIT_GRAFT_FILE", "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
	"GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
}

func cleanEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(repoEnv, name) && name != "LC_ALL" {
			out = append(out, kv)
		}
	}
	return out
}

// gitError says which git call failed in dir and git's first line about it.
func gitError(what, dir, stderr string, err error) error {
	line, _, _ := strings.Cut(strings.TrimSpace(stderr), "\n")
	line = strings.ToValidUTF8(line, "\uFFFD")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	if line == "" {
		return fmt.Errorf("git %s in %s: %w", what, dir, err)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("git %s in %s: %s", what, dir, line)
	}
	return fmt.Errorf("git %s in %s: %w: %s", what, dir, err, line)
}

// capped keeps the first maxOutput bytes written to it and drops the rest,
// so a huge status cannot fill memory.
type capped struct{ b []byte }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (c *capped) String() string { return string(c.b) }
