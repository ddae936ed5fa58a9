package simtest

import (
	"bytes"
	"strings"
	"sync"
)

// Output is a buffer that a command writes while a test reads it, and that
// runs Then once, the first time what was written contains On (an empty On
// never fires): the way tests interrupt a command at a given step.
type Output struct {
	On    string
	Then  func()
	mu    sync.Mutex
	buf   bytes.Buffer
	fired bool
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if !o.fired && o.On != "" && o.Then != nil && strings.Contains(o.buf.String(), o.On) {
		o.fired = true
		o.Then()
	}
	return len(p), nil
}

// String is everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Fired reports whether Then has run.
func (o *Output) Fired() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fired
}
