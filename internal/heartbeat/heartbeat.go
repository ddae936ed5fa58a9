// Package heartbeat says, at a steady interval, that a wait still waits: what
// for, for how long so far, of how long at most, and what the latest look saw.
// It owns the ticker and the line only; each wait (gate, reconcile,
// bootstrap) decides what it waits for and prints through its own
// progress printer. It imports nothing of devata's.
package heartbeat

import (
	"fmt"
	"sync"
	"time"
)

// Every is the interval of a Beat whose caller chose none (an interval ≤ 0).
// Tests lower it (to ~50ms) before any wait starts; nothing else changes it.
var Every = 15 * time.Second

// Beat is the heartbeat of one wait. Its methods may be called from any
// goroutine, and on a nil Beat, which prints nothing.
type Beat struct {
	say   func(format string, args ...any)
	every time.Duration
	bound time.Duration
	start time.Time

	mu         sync.Mutex
	what, last string

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Start begins the heartbeat of a wait of at most bound (0: not shown) for
// what, e.g. "cp-2 to come back on its desired config". Every interval (Every
// when every ≤ 0) until Stop, say gets one line, indented four spaces like
// the other progress lines under a step:
//
//	waiting for cp-2 to come back on its desired config: 45s of 10m0s (last: stage booting)
//
// The first line comes one interval after Start: a wait that ends sooner
// prints none. A nil say returns a nil Beat.
func Start(say func(format string, args ...any), every, bound time.Duration, what string) *Beat {
	if say == nil {
		return nil
	}
	if every <= 0 {
		every = Every
	}
	b := &Beat{say: say, every: every, bound: bound, start: time.Now(), what: what,
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *Beat) run() {
	defer close(b.done)
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.say("    %s", b.Line())
		}
	}
}

// Saw records what the wait's latest look saw: the line's "last".
func (b *Beat) Saw(last string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.last = last
	b.mu.Unlock()
}

// For changes what the wait waits for, when that turns out to be another
// thing than Start said (etcd's quorum rather than its health).
func (b *Beat) For(what string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.what = what
	b.mu.Unlock()
}

// Line is the line the next beat prints, without its indent.
func (b *Beat) Line() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	what, last := b.what, b.last
	b.mu.Unlock()
	// Whole seconds at the usual interval; finer when a test beats faster.
	unit := time.Second
	if b.every < time.Second {
		unit = time.Millisecond
	}
	line := fmt.Sprintf("waiting for %s: %s", what, time.Since(b.start).Round(unit))
	if b.bound > 0 {
		line += " of " + b.bound.String()
	} else {
		line += " so far"
	}
	if last != "" {
		line += " (last: " + last + ")"
	}
	return line
}

// Stop ends the heartbeat; no line is printed once it returns. It may be
// called more than once.
func (b *Beat) Stop() {
	if b == nil {
		return
	}
	b.once.Do(func() { close(b.stop) })
	<-b.done
}
