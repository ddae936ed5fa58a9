//go:build unix

package lock_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
