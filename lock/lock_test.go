//go:build unix

package lock_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"devata.dev/devata/lock"
)

func TestASecondWriterIsRefusedWithTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".devata-lab.lock")
	first, err := lock.Acquire(t.Context(), path, lock.Me("devata apply --machines cp-2"), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lock.Acquire(t.Context(), path, lock.Me("devata apply --machines cp-3"), 0)
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Holder.Command != "devata apply --machines cp-2" || held.Holder.PID != os.Getpid() {
		t.Fatalf("second writer: %v, want HeldError naming the first", err)
	}
	for _, w := range []string{"devata apply --machines cp-2", "pid", "--wait-lock"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal lacks %q: %v", w, err)
		}
	}

	// --wait-lock: the waiter gets it once the first lets go
	go func() {
		time.Sleep(300 * time.Millisecond)
		if err := first.Release(); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	second, err := lock.Acquire(t.Context(), path, lock.Me("devata apply --machines cp-3"), 10*time.Second)
	if err != nil {
		t.Fatalf("waiting writer: %v", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("the waiter got the lock after %s, before the first released it", waited)
	}
	defer func() {
		if err := second.Release(); err != nil {
			t.Error(err)
		}
	}()

	// a waiter that runs out of time is refused, naming the new holder
	_, err = lock.Acquire(t.Context(), path, lock.Me("devata reconcile --once"), 300*time.Millisecond)
	if !errors.As(err, &held) || held.Holder.Command != "devata apply --machines cp-3" {
		t.Errorf("timed-out waiter: %v", err)
	}
}

func TestPathIsNextToTheInventoryWhenWritable(t *testing.T) {
	dir := t.TempDir()
	if got, err := lock.Path(filepath.Join(dir, "inventory.yaml"), "lab"); err != nil || got != filepath.Join(dir, ".devata-lab.lock") {
		t.Errorf("lock path = %s, %v", got, err)
	}
}

// An inventory in a directory devata cannot write (a ConfigMap) keeps
// its lock in this user's private directory: $XDG_RUNTIME_DIR when it is
// one, else a 0700 devata-<uid> in the temporary directory, never a
// shared predictable path that another user could hold or make a link.
func TestPathForAReadOnlyInventoryIsPrivate(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Log("as root most directories are writable: /proc/self is not, even for root")
	}
	inv := filepath.Join("/proc/self", "inventory.yaml") // no one may create files in /proc/self
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	xdg := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	if got, err := lock.Path(inv, "lab"); err != nil || got != filepath.Join(xdg, ".devata-lab.lock") {
		t.Errorf("with a private XDG_RUNTIME_DIR: %s, %v", got, err)
	}

	// an XDG_RUNTIME_DIR others may enter is not used
	if err := os.Chmod(xdg, 0o777); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(tmp, "devata-"+strconv.Itoa(os.Geteuid()))
	got, err := lock.Path(inv, "lab")
	if err != nil || got != filepath.Join(own, ".devata-lab.lock") {
		t.Fatalf("with a shared XDG_RUNTIME_DIR: %s, %v; want the lock in %s", got, err, own)
	}
	if fi, err := os.Lstat(own); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("devata's private directory: %v, %v; want a 0700 directory", fi.Mode(), err)
	}

	// a directory of that name someone else could enter (or a link) is refused
	t.Setenv("XDG_RUNTIME_DIR", "")
	if err := os.Chmod(own, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Path(inv, "lab"); err == nil || !strings.Contains(err.Error(), "others may enter it") || !strings.Contains(err.Error(), "XDG_RUNTIME_DIR") {
		t.Errorf("a world-writable devata-<uid>: %v", err)
	}
	if err := os.Remove(own); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), own); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Path(inv, "lab"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("devata-<uid> a symbolic link: %v", err)
	}
}

// The lock file is truncated and written: named by a symlink, a hard
// link, a device or someone else's file, it must not be touched. Before,
// `ln -s secrets.yaml .devata-homelab.lock; devata apply --yes` left the
// bundle at 0 bytes.
func TestTheLockCannotBeTurnedAgainstItsHolder(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "secrets.yaml")
	const content = "cluster:\n  id: keep-me\n"
	if err := os.WriteFile(bundle, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	intact := func(t *testing.T) {
		t.Helper()
		if b, err := os.ReadFile(bundle); err != nil || string(b) != content {
			t.Fatalf("the bundle was changed: %q, %v", b, err)
		}
	}
	acquire := func(path string) error {
		l, err := lock.Acquire(t.Context(), path, lock.Me("devata apply --yes"), 0)
		if err == nil {
			return l.Release()
		}
		return err
	}
	for _, c := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"symlink to the bundle", "is a symbolic link", func(p string) error { return os.Symlink(bundle, p) }},
		{"dangling symlink", "is a symbolic link", func(p string) error { return os.Symlink(filepath.Join(dir, "nothing"), p) }},
		{"hard link to the bundle", "has 2 names", func(p string) error { return os.Link(bundle, p) }},
		{"named pipe", "is a named pipe, not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"directory", "is a directory", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"a file that is not a lock", "holds something other than a devata holder", func(p string) error {
			return os.WriteFile(p, []byte("apiVersion: v1\nkind: Secret\n"), 0o600)
		}},
		{"a big file", "more than a devata lock ever does", func(p string) error {
			return os.WriteFile(p, []byte(strings.Repeat(" ", 5000)), 0o600)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".devata-lab.lock")
			if err := c.make(path); err != nil {
				t.Fatal(err)
			}
			err := acquire(path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "move that away") {
				t.Errorf("lock %s: %v, want a refusal saying %q and what to do", c.name, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "Secret") {
				t.Errorf("the refusal quotes the file: %v", err)
			}
			intact(t)
		})
	}

	// an earlier holder's details (and an empty file) are a lock: taken again
	path := filepath.Join(t.TempDir(), ".devata-lab.lock")
	if err := acquire(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"host":"h","pid":1,"command":"devata apply","since":"2026-12-04T00:00:00Z"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := acquire(path); err != nil {
		t.Errorf("a lock file holding an old holder's details: %v", err)
	}
}

// Another user's lock file is refused (root makes one owned by nobody).
func TestALockOfAnotherUserIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file another user owns") // CI runs as root
	}
	path := filepath.Join(t.TempDir(), ".devata-lab.lock")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := lock.Acquire(t.Context(), path, lock.Me("devata apply"), 0)
	if err == nil || !strings.Contains(err.Error(), "belongs to another user (uid 65534") {
		t.Errorf("another user's lock: %v", err)
	}
}

// The holder's host is quoted when a refusal prints it: the lock file
// is text that reaches a terminal.
func TestHolderEscapesControlCharacters(t *testing.T) {
	h := lock.Holder{Host: "evil\x1b]0;pwned\x07\nfake line", PID: 7, Command: "devata\x1b[2J apply", Since: time.Now()}
	if s := h.String(); strings.ContainsAny(s, "\x1b\x07\n") {
		t.Errorf("holder printed with control characters: %q", s)
	}
}

// A holder writes its details just after it takes the flock; a writer
// refused in between still names it (the fault matrix caught the race:
// "it wrote no details").
func TestARefusalInTheHoldersFirstMomentNamesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".devata-lab.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(40 * time.Millisecond) // the holder, busy between flock and writing
		_, _ = f.WriteAt([]byte(`{"host":"h","pid":4242,"command":"devata apply","since":"2026-12-04T00:00:00Z"}`+"\n"), 0)
	}()
	_, err = lock.Acquire(t.Context(), path, lock.Me("devata apply --machines cp-3"), 0)
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Holder.PID != 4242 {
		t.Fatalf("refused in the holder's first moment: %v, want the holder named (pid 4242)", err)
	}
}
