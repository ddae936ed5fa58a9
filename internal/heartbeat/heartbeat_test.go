package heartbeat_test

import (
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"devata.dev/devata/internal/heartbeat"
)

// lines collects what a Beat says and signals each line.
type lines struct {
	mu  sync.Mutex
	all []string
	got chan struct{}
}

func newLines() *lines { return &lines{got: make(chan struct{}, 100)} }

func (l *lines) say(format string, args ...any) {
	l.mu.Lock()
	l.all = append(l.all, fmt.Sprintf(format, args...))
	l.mu.Unlock()
	select {
	case l.got <- struct{}{}:
	default:
	}
}

func (l *lines) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.all...)
}

func (l *lines) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-l.got:
		case <-time.After(5 * time.Second):
			t.Fatalf("no heartbeat line within 5s; so far: %q", l.snapshot())
		}
	}
}

func TestBeatSaysWhatItWaitsForHowLongAndTheLastLook(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound time.Duration
		saw   string
		want  *regexp.Regexp
	}{
		{name: "bound and last", bound: 10 * time.Minute, saw: "stage booting, ready false",
			want: regexp.MustCompile(`^    waiting for cp-2 to come back on its desired config: \d+ms of 10m0s \(last: stage booting, ready false\)$`)},
		{name: "no bound, nothing seen yet",
			want: regexp.MustCompile(`^    waiting for cp-2 to come back on its desired config: \d+ms so far$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLines()
			b := heartbeat.Start(l.say, 20*time.Millisecond, tc.bound, "cp-2 to come back on its desired config")
			b.Saw(tc.saw)
			l.wait(t, 2)
			b.Stop()
			got := l.snapshot()
			for _, line := range got {
				if !tc.want.MatchString(line) {
					t.Errorf("line %q does not match %s", line, tc.want)
				}
			}
			// Stopped: not one line more.
			time.Sleep(80 * time.Millisecond)
			if after := l.snapshot(); len(after) != len(got) {
				t.Errorf("%d lines after Stop: %q", len(after)-len(got), after[len(got):])
			}
			b.Stop() // twice is fine
		})
	}
}

func TestForChangesWhatTheNextLineSays(t *testing.T) {
	l := newLines()
	b := heartbeat.Start(l.say, 20*time.Millisecond, time.Minute, "etcd to be healthy (gate before cp-2)")
	defer b.Stop()
	b.For("etcd to keep quorum without cp-2 (gate before cp-2)")
	b.Saw("cp-3 is down")
	l.wait(t, 1)
	if got := l.snapshot()[0]; !regexp.MustCompile(`^    waiting for etcd to keep quorum without cp-2 \(gate before cp-2\): \d+ms of 1m0s \(last: cp-3 is down\)$`).MatchString(got) {
		t.Errorf("line %q", got)
	}
}

// A wait with no printer gets a nil Beat, on which every method is a no-op.
func TestNilSayPrintsNothing(t *testing.T) {
	b := heartbeat.Start(nil, time.Millisecond, time.Second, "x")
	if b != nil {
		t.Fatalf("Start(nil, …) = %v, want nil", b)
	}
	b.Saw("y")
	b.For("z")
	if b.Line() != "" {
		t.Error("a nil Beat has a line")
	}
	b.Stop()
}

// An interval ≤ 0 is Every's; at the usual interval the elapsed time is in
// whole seconds.
func TestZeroIntervalUsesEvery(t *testing.T) {
	old := heartbeat.Every
	heartbeat.Every = 20 * time.Millisecond
	t.Cleanup(func() { heartbeat.Every = old })
	l := newLines()
	b := heartbeat.Start(l.say, 0, time.Second, "x")
	l.wait(t, 1)
	b.Stop()

	slow := heartbeat.Start(func(string, ...any) {}, time.Hour, 10*time.Minute, "cp-1 to run its desired config")
	defer slow.Stop()
	slow.Saw("no answer yet")
	if got, want := slow.Line(), "waiting for cp-1 to run its desired config: 0s of 10m0s (last: no answer yet)"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}
