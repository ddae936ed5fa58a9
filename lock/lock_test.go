//go:build unix

package lock_test

import (
	"errors"
	"os"
	"path/filepath"
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
		first.Release()
	}()
	start := time.Now()
	second, err := lock.Acquire(t.Context(), path, lock.Me("devata apply --machines cp-3"), 10*time.Second)
	if err != nil {
		t.Fatalf("waiting writer: %v", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("the waiter got the lock after %s, before the first released it", waited)
	}
	defer second.Release()

	// a waiter that runs out of time is refused, naming the new holder
	_, err = lock.Acquire(t.Context(), path, lock.Me("devata reconcile --once"), 300*time.Millisecond)
	if !errors.As(err, &held) || held.Holder.Command != "devata apply --machines cp-3" {
		t.Errorf("timed-out waiter: %v", err)
	}
}

func TestPathIsNextToTheInventoryWhenWritable(t *testing.T) {
	dir := t.TempDir()
	if got := lock.Path(filepath.Join(dir, "inventory.yaml"), "lab"); got != filepath.Join(dir, ".devata-lab.lock") {
		t.Errorf("lock path = %s", got)
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 { // root writes anywhere
		if got := lock.Path(filepath.Join(ro, "inventory.yaml"), "lab"); filepath.Dir(got) == ro || filepath.Base(got) != ".devata-lab.lock" {
			t.Errorf("lock path for a read-only inventory dir = %s", got)
		}
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
