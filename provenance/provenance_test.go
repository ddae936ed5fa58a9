package provenance_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/provenance"
)

const content = "apiVersion: devata.dev/v1alpha1\nkind: Inventory\n"

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// gitBinary is git, or a failed test: these tests need it and CI has it;
// skipping would hide that the Git half was never run.
func gitBinary(t *testing.T) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is not installed (%v): provenance's tests need it; install git", err)
	}
	return git
}

// isolate keeps git from finding a repository above the test's temporary
// directory, wherever TMPDIR is.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", dir)
	return dir
}

// repo is a work tree at dir with the inventory at rel committed, and a
// function running git in it.
type repo struct {
	dir, inv string
	git      func(args ...string) string
}

func newRepo(t *testing.T, rel string) repo {
	t.Helper()
	git := gitBinary(t)
	dir := filepath.Join(isolate(t), "cluster")
	r := repo{dir: dir, inv: filepath.Join(dir, rel)}
	r.git = func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(context.Background(), git, append([]string{"-C", dir,
			"-c", "user.name=devata test", "-c", "user.email=test@devata.invalid", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main",
		}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	r.write(t, rel, content)
	r.write(t, "patches/common.yaml", "machine: {}\n")
	r.git("init", "-q")
	r.git("add", ".")
	r.git("commit", "-q", "-m", "inventory")
	return r
}

func (r repo) write(t *testing.T, rel, s string) {
	t.Helper()
	p := filepath.Join(r.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func of(t *testing.T, path string) provenance.Info {
	t.Helper()
	info, err := provenance.Of(t.Context(), path)
	if err != nil {
		t.Fatalf("Of(%s): %v", path, err)
	}
	return info
}

// A committed, clean inventory: the commit is HEAD's, the tree is clean,
// and the path is the one `git show COMMIT:PATH` takes.
func TestOfCommitted(t *testing.T) {
	for _, rel := range []string{"inventory.yaml", "clusters/lab/inventory.yaml"} {
		t.Run(rel, func(t *testing.T) {
			r := newRepo(t, rel)
			got := of(t, r.inv)
			want := provenance.Info{Commit: r.git("rev-parse", "HEAD"), RepoPath: rel, InventorySHA256: sum(content)}
			if got != want {
				t.Errorf("Of = %+v, want %+v", got, want)
			}
			if shown := r.git("show", got.Commit+":"+got.RepoPath); shown+"\n" != content {
				t.Errorf("git show %s:%s = %q, want the inventory", got.Commit, got.RepoPath, shown)
			}
			if len(want.Commit) != 40 || got.ShortCommit() != want.Commit[:12] || !got.InGit() {
				t.Errorf("commit %q, short %q, InGit %t", want.Commit, got.ShortCommit(), got.InGit())
			}
			// A relative path from inside the tree gives the same answer.
			t.Chdir(filepath.Dir(r.inv))
			if rel := of(t, filepath.Base(r.inv)); rel != want {
				t.Errorf("Of(relative path) = %+v, want %+v", rel, want)
			}
		})
	}
}

// Anything in the tree that the commit does not hold makes it dirty: the
// inventory edited, a patch edited, a file added, the inventory not in Git.
// Only what touches the inventory file itself makes it InventoryModified
// (issue 33: a backup's sidecar said inventoryModified for an unchanged
// inventory in a dirty tree).
func TestOfDirty(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rel       string // the inventory's path in the tree, "inventory.yaml" when empty
		change    func(t *testing.T, r repo)
		inventory bool // InventoryModified
	}{
		{"inventory edited", "", func(t *testing.T, r repo) { r.write(t, "inventory.yaml", content+"# edited\n") }, true},
		{"inventory in a directory with spaces edited", "lab clusters/inv.yaml", func(t *testing.T, r repo) {
			r.write(t, "lab clusters/inv.yaml", content+"# edited\n")
		}, true},
		{"another inventory beside it edited", "lab/inventory.yaml", func(t *testing.T, r repo) {
			r.write(t, "lab/inventory.yaml.bak", content)
			r.write(t, "inventory.yaml", content)
		}, false},
		{"inventory edited and staged", "", func(t *testing.T, r repo) {
			r.write(t, "inventory.yaml", content+"# edited\n")
			r.git("add", "inventory.yaml")
		}, true},
		{"inventory renamed to it", "", func(t *testing.T, r repo) {
			r.git("mv", "inventory.yaml", "old.yaml")
			r.git("commit", "-q", "-m", "move")
			r.git("mv", "old.yaml", "inventory.yaml")
		}, true},
		{"patch edited", "", func(t *testing.T, r repo) { r.write(t, "patches/common.yaml", "machine: {env: {}}\n") }, false},
		{"patch deleted", "", func(t *testing.T, r repo) {
			if err := os.Remove(filepath.Join(r.dir, "patches/common.yaml")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"untracked patch", "", func(t *testing.T, r repo) { r.write(t, "patches/cp-1.yaml", "machine: {}\n") }, false},
		{"untracked inventory", "", func(t *testing.T, r repo) {
			r.git("rm", "-q", "--cached", "inventory.yaml")
			r.git("commit", "-q", "-m", "untrack the inventory")
		}, true},
		{"ignored inventory", "", func(t *testing.T, r repo) {
			r.write(t, ".gitignore", "inventory.yaml\n")
			r.git("rm", "-q", "--cached", "inventory.yaml")
			r.git("add", ".gitignore")
			r.git("commit", "-q", "-m", "ignore the inventory")
		}, true},
		{"untracked files hidden by config", "", func(t *testing.T, r repo) {
			r.git("config", "status.showUntrackedFiles", "no")
			r.write(t, "patches/cp-1.yaml", "machine: {}\n")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel := tc.rel
			if rel == "" {
				rel = "inventory.yaml"
			}
			r := newRepo(t, rel)
			tc.change(t, r)
			got := of(t, r.inv)
			if !got.Dirty || got.Commit != r.git("rev-parse", "HEAD") {
				t.Errorf("Of = %+v, want dirty at HEAD", got)
			}
			if got.InventoryModified != tc.inventory {
				t.Errorf("InventoryModified = %t, want %t (%+v)", got.InventoryModified, tc.inventory, got)
			}
			data, err := os.ReadFile(r.inv)
			if err != nil {
				t.Fatal(err)
			}
			if got.InventorySHA256 != sum(string(data)) {
				t.Errorf("sha256 %s is not the file's", got.InventorySHA256)
			}
		})
	}
}

// An ignored file (the secrets bundle, kept out of Git on purpose) is not dirt.
func TestOfIgnoredFileIsClean(t *testing.T) {
	r := newRepo(t, "inventory.yaml")
	r.write(t, ".gitignore", "secrets.yaml\n")
	r.git("add", ".gitignore")
	r.git("commit", "-q", "-m", "ignore the bundle")
	r.write(t, "secrets.yaml", "cluster: {}\n")
	if got := of(t, r.inv); got.Dirty {
		t.Errorf("an ignored secrets.yaml makes the tree dirty: %+v", got)
	}
}

// Without Git there is the hash and nothing else, and no error: outside a
// work tree, in a repository with no commit yet, and without a git binary.
func TestOfWithoutGit(t *testing.T) {
	gitBinary(t) // the cases below must be told apart from a missing git
	write := func(t *testing.T, dir string) string {
		p := filepath.Join(dir, "inventory.yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := provenance.Info{InventorySHA256: sum(content)}
	t.Run("outside a work tree", func(t *testing.T) {
		if got := of(t, write(t, isolate(t))); got != want {
			t.Errorf("Of = %+v, want %+v", got, want)
		}
	})
	t.Run("no commit yet", func(t *testing.T) {
		dir := isolate(t)
		if out, err := exec.Command("git", "-C", dir, "-c", "init.defaultBranch=main", "init", "-q").CombinedOutput(); err != nil {
			t.Fatalf("git init: %v\n%s", err, out)
		}
		if got := of(t, write(t, dir)); got != want {
			t.Errorf("Of = %+v, want %+v", got, want)
		}
	})
	t.Run("no git binary", func(t *testing.T) {
		r := newRepo(t, "inventory.yaml")
		t.Setenv("PATH", t.TempDir())
		if got := of(t, r.inv); got != want {
			t.Errorf("Of = %+v, want %+v", got, want)
		}
	})
}

// A git hook runs with GIT_DIR and GIT_INDEX_FILE set for its own
// repository; the inventory's tree is still the one asked.
func TestOfIgnoresTheCallersRepository(t *testing.T) {
	other := newRepo(t, "other.yaml")
	r := newRepo(t, "inventory.yaml")
	want := r.git("rev-parse", "HEAD")
	t.Setenv("GIT_DIR", filepath.Join(other.dir, ".git"))
	t.Setenv("GIT_INDEX_FILE", filepath.Join(other.dir, ".git", "index"))
	t.Setenv("GIT_WORK_TREE", other.dir)
	if got := of(t, r.inv); got.Commit != want || got.Dirty || got.RepoPath != "inventory.yaml" {
		t.Errorf("Of = %+v, want the inventory's own commit %s, clean", got, want)
	}
}

// A git that fails or hangs is an error that names the call, and the hash
// is still there; a hung one is given up on.
func TestOfGitTrouble(t *testing.T) {
	r := newRepo(t, "inventory.yaml")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	t.Setenv("PATH", bin)
	fake := func(script string) {
		if err := os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\n"+script+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	fake("echo \"fatal: detected dubious ownership in repository at '$4'\" >&2; exit 128")
	got, err := provenance.Of(t.Context(), r.inv)
	if err == nil || !strings.Contains(err.Error(), "git rev-parse in "+r.dir) || !strings.Contains(err.Error(), "dubious ownership") {
		t.Errorf("Of = %v, want an error naming git rev-parse, the directory and git's reason", err)
	}
	if got != (provenance.Info{InventorySHA256: sum(content)}) {
		t.Errorf("with an error Of = %+v, want the hash alone", got)
	}

	fake("exec " + sleep + " 60")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	got, err = provenance.Of(ctx, r.inv)
	if err == nil || got.InventorySHA256 == "" || got.Commit != "" {
		t.Errorf("a hung git: Of = %+v, %v; want the hash and an error", got, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("a hung git held Of for %s", waited)
	}
}

// Only a regular file of at most MaxFileSize bytes is hashed, and an error
// never quotes it.
func TestOfRefuses(t *testing.T) {
	dir := isolate(t)
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("token: s3cr3t\n", provenance.MaxFileSize/14+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{dir, "is not a regular file"},
		{filepath.Join(dir, "missing.yaml"), "no such file"},
		{big, "more than the 4 MiB devata reads"},
	} {
		got, err := provenance.Of(t.Context(), tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Of(%s) = %v, want an error saying %q and no content", tc.path, err, tc.want)
		}
		if !got.IsZero() {
			t.Errorf("Of(%s) = %+v with an error, want zero", tc.path, got)
		}
	}
}

// provenance repeats inventory's bound because a leaf cannot import it.
func TestMaxFileSizeIsInventorys(t *testing.T) {
	if provenance.MaxFileSize != inventory.MaxFileSize {
		t.Errorf("provenance.MaxFileSize %d, inventory.MaxFileSize %d: keep them equal", provenance.MaxFileSize, inventory.MaxFileSize)
	}
}

// Probe 10 of issue 31: `git status` for provenance ran the repository's
// core.fsmonitor hook. Nothing the repository configures runs now.
func TestOfRunsNothingTheRepositoryConfigures(t *testing.T) {
	r := newRepo(t, "inventory.yaml")
	marker := filepath.Join(t.TempDir(), "ran")
	hook := filepath.Join(t.TempDir(), "fsmonitor.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	r.git("config", "core.fsmonitor", hook)
	if err := os.WriteFile(r.inv, []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := of(t, r.inv); !got.Dirty || got.Commit == "" {
		t.Errorf("Of = %+v, want the commit and the tree dirty", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("provenance ran the repository's core.fsmonitor hook")
	}
}

// devata's lock file next to the inventory (lock.Path) is not dirt: before,
// every report after the first write said the tree was dirty (issue 33).
// Another untracked file beside it still is.
func TestOfLockFileIsClean(t *testing.T) {
	r := newRepo(t, "inventory.yaml")
	r.write(t, ".devata-homelab.lock", "pid 1\n")
	if got := of(t, r.inv); got.Dirty {
		t.Errorf("the lock file makes the tree dirty: %+v", got)
	}
	r.write(t, ".devata-homelab.lock.bak", "pid 1\n")
	if got := of(t, r.inv); !got.Dirty {
		t.Errorf("an untracked .devata-homelab.lock.bak: %+v, want dirty", got)
	}
}
