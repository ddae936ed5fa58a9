package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
)

var (
	errStalled  = errors.New("the stream stalled")
	errTooLarge = errors.New("the stream is larger than any etcd snapshot")
)

// streamWriteError is a failed write to the snapshot file, told apart from
// the stream's own failures.
type streamWriteError struct{ err error }

func (e *streamWriteError) Error() string { return e.err.Error() }
func (e *streamWriteError) Unwrap() error { return e.err }

// streamWatch passes the stream to the file, cancels it when no byte came
// for idle (a snapshot of several GiB outlasts any per-call timeout, a
// stalled one should not last forever) or when more than max bytes came
// (a stream that never ends would fill the disk), and reports progress.
type streamWatch struct {
	w        io.Writer
	idle     time.Duration
	max      int64
	cancel   context.CancelCauseFunc
	machine  string
	progress func(n int64)

	mu    sync.Mutex
	n     int64
	timer *time.Timer
}

func (s *streamWatch) start() {
	s.timer = time.AfterFunc(s.idle, func() {
		s.cancel(fmt.Errorf("%w: no data from %s for %s", errStalled, s.machine, s.idle))
	})
}

func (s *streamWatch) stop() { s.timer.Stop() }

func (s *streamWatch) Write(p []byte) (int, error) {
	s.timer.Reset(s.idle)
	n, err := s.w.Write(p)
	s.mu.Lock()
	s.n += int64(n)
	total := s.n
	s.mu.Unlock()
	if s.max > 0 && total > s.max {
		s.cancel(fmt.Errorf("%w: more than %s from %s", errTooLarge, humanize.IBytes(uint64(s.max)), s.machine)) //nolint:gosec // positive
	}
	if s.progress != nil {
		s.progress(total)
	}
	if err != nil {
		return n, &streamWriteError{err}
	}
	return n, nil
}

// byteProgress prints a line at most every so often.
type byteProgress struct {
	w       io.Writer
	machine string
	every   time.Duration
	now     func() time.Time
	start   time.Time
	last    time.Time
}

func (p *byteProgress) update(n int64) {
	now := p.now()
	if p.start.IsZero() {
		p.start, p.last = now, now
		return
	}
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	rate := float64(n) / now.Sub(p.start).Seconds()
	fmt.Fprintf(p.w, "etcd snapshot from %s: %s received (%s/s)\n", p.machine, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(rate))) //nolint:gosec // sizes are never negative
}
