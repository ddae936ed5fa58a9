package demo

import (
	"fmt"
	"io"
	"time"

	"devata.dev/devata/plan"
)

// step prints one step of the demo: its title when it starts (plan.StepLine,
// after a blank line) and, indented, what it came to and how long it took.
type step struct {
	out   io.Writer
	start time.Time
}

func startStep(out io.Writer, format string, args ...any) step {
	s := step{out: out, start: time.Now()}
	fmt.Fprintf(out, "\n%s\n", plan.StepLine("", fmt.Sprintf(format, args...)))
	return s
}

// done prints the step's outcome with the time since it started.
func (s step) done(format string, args ...any) {
	fmt.Fprintf(s.out, "    %s (%s)\n", fmt.Sprintf(format, args...), time.Since(s.start).Round(time.Millisecond))
}
