package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/drift"
)

// A clean pass over a thousand machines prints a few progress lines, not a
// thousand; every machine that is not in sync gets its own line (issue 17).
func TestProgressLinesScale(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(0, 0)
	p := &progressLine{w: &buf, total: 1000, every: 2 * time.Second, now: func() time.Time { return clock }}
	for i := range 1000 {
		clock = clock.Add(10 * time.Millisecond) // 10 s in all
		status := drift.StatusInSync
		if i == 500 {
			status = drift.StatusDrifted
		}
		p.done(fmt.Sprintf("worker-%04d", i), []drift.Result{{Status: status}})
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) > 8 {
		t.Errorf("%d progress lines for 1,000 machines, want a handful:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(buf.String(), "[501/1000] worker-0500          Drifted") {
		t.Errorf("the drifted machine has no line of its own:\n%s", buf.String())
	}
	if last := lines[len(lines)-1]; last != "[1000/1000] 999 in sync, 1 drifted, 0 unknown" {
		t.Errorf("last line %q, want the final count", last)
	}
}
