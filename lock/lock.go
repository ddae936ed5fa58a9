//go:build unix

// Package lock makes devata the only writer to a cluster from one host:
// every command that writes to machines takes the cluster's lock before it
// plans and holds it until its last write. The lock is an flock(2) on a
// file next to the inventory; the kernel drops it when the holder's process
// ends, however it ends, so a lock is never stale. The file holds who took
// it, so a refused writer can say who holds it and since when. Across hosts
// the cluster's Lease does the same (lease.go): the coordination.k8s.io Lease
// that reconcile --leader-elect campaigns for.
package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Holder describes the process that holds a lock.
type Holder struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "another devata process (it wrote no details)"
	}
	return fmt.Sprintf("%q (pid %d on %s, since %s, %s ago)", h.Command, h.PID, printable(h.Host), h.Since.Format(time.RFC3339), time.Since(h.Since).Round(time.Second))
}

// printable is s, or s quoted where it holds what a terminal would act
// on: the lock file is text that reaches one.
func printable(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// HeldError is returned when another process holds the lock.
type HeldError struct {
	Path   string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("another writer holds the cluster's lock %s: %s; wait for it to finish, or pass --wait-lock DURATION to wait (the lock is released when that process ends, so it is never stale)", e.Path, e.Holder)
}

// Lock is a held lock.
type Lock struct {
	f    *os.File
	Path string
}

// Path is where the lock for the inventory at inventoryPath and the named
// cluster lives: next to the inventory, or, where that directory cannot
// be written (an inventory mounted from a ConfigMap), in this user's
// private runtime directory (privateDir), keyed by the cluster's name.
// Never a shared, predictable path: a lock in /tmp could be held by
// another user to block every writer, or made a link to the victim's files.
func Path(inventoryPath, cluster string) (string, error) {
	name := ".devata-" + cluster + ".lock"
	dir := filepath.Dir(inventoryPath)
	if writable(dir) {
		return filepath.Join(dir, name), nil
	}
	private, err := privateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(private, name), nil
}

func writable(dir string) bool {
	return syscall.Access(dir, 2 /* W_OK */) == nil
}

// privateDir is a directory only this user can enter: $XDG_RUNTIME_DIR
// when it is one (systemd makes it 0700 for each login), else
// devata-<uid> in the temporary directory, created 0700 and checked, so
// that a directory another user made there first is refused, not used.
func privateDir() (string, error) {
	if xdg := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(xdg) && private(xdg) == nil {
		return xdg, nil
	}
	dir := filepath.Join(os.TempDir(), "devata-"+strconv.Itoa(os.Geteuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create a private directory for the cluster's lock: %w (the inventory's directory is read-only, so the lock lives there; set XDG_RUNTIME_DIR to a directory of yours with mode 0700)", err)
	}
	if err := private(dir); err != nil {
		return "", fmt.Errorf("the cluster's lock cannot live in %s: %w; the inventory's directory is read-only, so devata keeps its lock there: remove %s if you did not make it, or set XDG_RUNTIME_DIR to a directory of yours with mode 0700", dir, err, dir)
	}
	return dir, nil
}

// private says why dir is not a directory of this user's that no one
// else may enter, or nil. It follows no link.
func private(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("it is not a directory (%s)", fileType(fi))
	case !ok:
		return errors.New("its owner cannot be read")
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("it belongs to another user (uid %d)", st.Uid)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("others may enter it (mode %s, want 0700)", fi.Mode().Perm())
	}
	return nil
}

// maxLockContent bounds what a lock file may hold: a Holder's details.
const maxLockContent = 4096

// Acquire takes the lock at path for me. If another process holds it,
// Acquire waits up to wait (0: not at all), polling, and then returns a
// *HeldError naming the holder.
func Acquire(ctx context.Context, path string, me Holder, wait time.Duration) (*Lock, error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !time.Now().Before(deadline) {
			h := holderOf(f)
			f.Close()
			return nil, &HeldError{Path: path, Holder: h}
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the cluster's lock %s: %w", path, ctx.Err())
		case <-time.After(min(200*time.Millisecond, time.Until(deadline)+time.Millisecond)):
		}
	}
	if me.Since.IsZero() {
		me.Since = time.Now()
	}
	data, _ := json.Marshal(me)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(data, '\n'), 0)
	}
	return &Lock{f: f, Path: path}, nil
}

// openLockFile opens (or creates, 0600) the lock file at path, which
// devata will truncate and write its details into. So that this can
// destroy nothing, it follows no symbolic link and takes only a regular
// file of this user's, with no other name (a hard link to the secrets
// bundle would be the bundle), holding nothing but a holder's details.
// Each refusal says what is there and what to do; none quotes the file.
func openLockFile(path string) (*os.File, error) {
	refuse := func(why string) error {
		return fmt.Errorf("the cluster's lock %s %s; devata truncates its lock file and writes into it, so it takes only a regular file of its own: move that away (devata creates a new lock) and run the command again", path, why)
	}
	// a device or FIFO is refused before it is opened (opening one can block or act)
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, refuse("is " + fileType(fi) + ", not a regular file")
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, refuse("is a symbolic link")
	}
	if err != nil {
		return nil, fmt.Errorf("open the cluster's lock %s: %w (devata takes it before it writes to any machine)", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open the cluster's lock %s: %w", path, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	var why string
	switch {
	case !fi.Mode().IsRegular():
		why = "is " + fileType(fi) + ", not a regular file"
	case st == nil:
		why = "has an owner that cannot be read"
	case int(st.Uid) != os.Geteuid():
		why = fmt.Sprintf("belongs to another user (uid %d, you are uid %d)", st.Uid, os.Geteuid())
	case st.Nlink != 1:
		why = fmt.Sprintf("has %d names (hard links): another of them could be a file devata must not touch", st.Nlink)
	case fi.Size() > maxLockContent:
		why = fmt.Sprintf("holds %d bytes, more than a devata lock ever does", fi.Size())
	case fi.Size() > 0 && !isHolder(f):
		why = "holds something other than a devata holder's details"
	}
	if why != "" {
		f.Close()
		return nil, refuse(why)
	}
	return f, nil
}

// isHolder says whether f holds a Holder's details, as Acquire writes
// them (and a holder may be writing them now: a few tries).
func isHolder(f *os.File) bool {
	for i := 0; i < 20; i++ {
		buf := make([]byte, maxLockContent+1)
		n, _ := f.ReadAt(buf, 0)
		content := strings.TrimSpace(string(buf[:n]))
		var h Holder
		dec := json.NewDecoder(strings.NewReader(content))
		dec.DisallowUnknownFields()
		if content == "" || dec.Decode(&h) == nil && !dec.More() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func fileType(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsRegular():
		return "a regular file"
	}
	return "not a regular file"
}

// holderOf reads who holds the lock. A holder writes its details just
// after it takes the flock, so a refusal in between finds them empty:
// read again for a moment before saying there are none.
func holderOf(f *os.File) Holder {
	h := readHolder(f)
	for i := 0; h.PID == 0 && i < 20; i++ {
		time.Sleep(10 * time.Millisecond)
		h = readHolder(f)
	}
	return h
}

func readHolder(f *os.File) Holder {
	var h Holder
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	_ = json.Unmarshal([]byte(strings.TrimSpace(string(buf[:n]))), &h)
	return h
}

// Release gives the lock up. The file stays: removing it would let a
// waiter lock a file nobody else opens any more.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing drops the flock
	l.f = nil
	return err
}

// Me is the Holder for this process running command.
func Me(command string) Holder {
	host, _ := os.Hostname()
	return Holder{Host: host, PID: os.Getpid(), Command: command, Since: time.Now()}
}
