package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testctx"
)

// Ctrl-C stops devata validate on an inventory of any size (issue 15,
// probe 6: 539,832 machines ignored SIGINT and SIGTERM for 11.5 minutes):
// it exits 2, says it was interrupted, and prints no verdict.
func TestValidateStopsWhenInterrupted(t *testing.T) {
	const workers = 3000
	path := simtest.LargeInventory(t, workers, "")

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{name: "cancelled before", ctx: cancelled, want: "error: interrupted: "},
		// Load looks at ctx a few dozen times decoding and once per machine
		// validating, rendering once per machine: 5,500 looks stop the render
		// some 2,400 machines in
		{name: "cancelled while rendering", ctx: testctx.CancelAfter(5500), want: "error: interrupted: rendering and validating stopped after "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			var out, errb bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- run(tc.ctx, []string{"validate", "-i", path}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
			}()
			var code int
			select {
			case code = <-done:
			case <-time.After(2 * time.Minute): // generous: it stops within a machine
				t.Fatal("devata validate did not stop when its context was cancelled")
			}
			if code != exitTrouble {
				t.Errorf("exit %d, want %d (interrupted is trouble, not an invalid inventory)", code, exitTrouble)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, errb.String())
			}
			if strings.Contains(out.String(), "is valid") || strings.Contains(out.String(), "w-1 ") || strings.Contains(errb.String(), "is invalid") {
				t.Errorf("an interrupted validate gave a verdict or a partial table:\nstdout:\n%.500s\nstderr:\n%.500s", out.String(), errb.String())
			}
		})
	}
}

// Every command that opens a session (drift, apply) stops the same way
// while it loads and renders, before it dials any machine.
func TestSessionStopsWhenInterrupted(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	before := sf.Sim.Machine("cp-1").Calls("Version")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{{"drift"}, {"apply", "--yes"}} {
		t.Setenv("XDG_CONFIG_HOME", t.TempDir())
		var out, errb bytes.Buffer
		code := run(cancelled, append(args, "--config", sf.settings), Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
		if code != exitTrouble || !strings.Contains(errb.String(), "interrupted") || !strings.Contains(errb.String(), "nothing was sent to any machine") {
			t.Errorf("%v with a cancelled context: exit %d\n%s", args, code, errb.String())
		}
	}
	if n := sf.Sim.Machine("cp-1").Calls("Version") - before; n != 0 {
		t.Errorf("an interrupted session still dialled cp-1 (%d Version calls)", n)
	}
}
