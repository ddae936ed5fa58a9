package target_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/inventory"
)

type key struct{}

// A family's read is made once per machine: the second check that asks
// gets the first one's value; another machine reads its own.
func TestOnceReadsOncePerMachine(t *testing.T) {
	reads := 0
	read := func() int { reads++; return reads }
	a := &target.Target{Machine: &inventory.Machine{Name: "a"}}
	b := &target.Target{Machine: &inventory.Machine{Name: "b"}}
	if got := target.Once(a, key{}, read); got != 1 {
		t.Fatalf("first read: %d", got)
	}
	if got := target.Once(a, key{}, read); got != 1 {
		t.Errorf("second ask on the same machine read again: %d", got)
	}
	if got := target.Once(b, key{}, read); got != 2 {
		t.Errorf("another machine shared the first one's read: %d", got)
	}
	target.Set(b, key{}, 7)
	if got := target.Once(b, key{}, read); got != 7 {
		t.Errorf("Set value not returned: %d", got)
	}
}

// A pass's shared read is made once for every machine, concurrently
// asking; a read that says not to keep it is made again by the next.
func TestSharedReadsOncePerPass(t *testing.T) {
	pass := target.NewPass()
	var reads atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tg := (&target.Target{Machine: &inventory.Machine{}}).In(pass)
			target.Shared(context.Background(), tg, key{}, func(context.Context) (int32, bool) { return reads.Add(1), true })
		}()
	}
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads for one pass, want 1", n)
	}

	other := target.NewPass()
	n := 0
	read := func(context.Context) (int, bool) { n++; return n, n > 1 }
	tg := (&target.Target{}).In(other)
	if got := target.Shared(context.Background(), tg, key{}, read); got != 1 {
		t.Fatalf("first read: %d", got)
	}
	if got := target.Shared(context.Background(), tg, key{}, read); got != 2 {
		t.Errorf("a read not kept was not made again: %d", got)
	}
	if got := target.Shared(context.Background(), tg, key{}, read); got != 2 {
		t.Errorf("a kept read was made again: %d", got)
	}
	if got := target.Shared(context.Background(), &target.Target{}, key{}, read); got != 3 {
		t.Errorf("outside a pass a read is made every time: %d", got)
	}
}
