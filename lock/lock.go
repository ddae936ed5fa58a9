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
	"os"
	"path/filepath"
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
	return fmt.Sprintf("%q (pid %d on %s, since %s, %s ago)", h.Command, h.PID, h.Host, h.Since.Format(time.RFC3339), time.Since(h.Since).Round(time.Second))
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
// be written (an inventory mounted from a ConfigMap), in the user's
// runtime or temporary directory, keyed by the cluster's name.
func Path(inventoryPath, cluster string) string {
	name := ".devata-" + cluster + ".lock"
	dir := filepath.Dir(inventoryPath)
	if writable(dir) {
		return filepath.Join(dir, name)
	}
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	return filepath.Join(base, name)
}

func writable(dir string) bool {
	return syscall.Access(dir, 2 /* W_OK */) == nil
}

// Acquire takes the lock at path for me. If another process holds it,
// Acquire waits up to wait (0: not at all), polling, and then returns a
// *HeldError naming the holder.
func Acquire(ctx context.Context, path string, me Holder, wait time.Duration) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the cluster's lock %s: %w (devata takes it before it writes to any machine)", path, err)
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
