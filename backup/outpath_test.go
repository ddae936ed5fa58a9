package backup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// -o DIR/ (or an existing directory) names the snapshot after the cluster
// and the time, so a schedule keeps every one; -o FILE is FILE.
func TestOutPath(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 4, 4, 5, 0, 0, time.FixedZone("CET", 3600))
	want := filepath.Join(dir, "etcd-homelab-20261204T030500Z.db")
	for _, out := range []string{dir, dir + "/"} {
		if got := OutPath(out, "homelab", at); got != want {
			t.Errorf("OutPath(%q) = %q, want %q", out, got, want)
		}
	}
	if got := OutPath(filepath.Join(dir, "etcd.db"), "homelab", at); got != filepath.Join(dir, "etcd.db") {
		t.Errorf("a file path is changed: %q", got)
	}
	if got := OutPath(filepath.Join(dir, "new")+"/", "homelab", at); got != filepath.Join(dir, "new", "etcd-homelab-20261204T030500Z.db") {
		t.Errorf("a directory to be made is not used as one: %q", got)
	}
}

// The sidecar names the inventory's Git commit, and whether the inventory
// differs from it, when the inventory is in a work tree and git is
// installed; nothing otherwise.
func TestGitCommit(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte("cluster: {name: lab}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if commit, _ := gitCommit(t.Context(), inv); commit != "" {
		t.Errorf("outside a work tree: commit %q", commit)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return // no git: the sidecar has no commit, which the check above proved
	}
	run := func(args ...string) string {
		cmd := exec.CommandContext(context.Background(), git, append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("init", "-q")
	run("add", "inventory.yaml")
	run("commit", "-q", "-m", "inventory")
	head := run("rev-parse", "HEAD")
	commit, modified := gitCommit(t.Context(), inv)
	if commit == "" || commit+"\n" != head || modified {
		t.Errorf("committed inventory: commit %q modified %t, want %q and false", commit, modified, head)
	}
	if err := os.WriteFile(inv, []byte("cluster: {name: lab2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, modified := gitCommit(t.Context(), inv); !modified {
		t.Error("an edited inventory is not reported as modified")
	}
}
