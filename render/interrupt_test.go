package render_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/testctx"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// Ctrl-C stops rendering between machines (issue 15, probe 6): nothing
// rendered comes back, and the error says how far it got.
func TestRenderValidatedContextStopsWhenInterrupted(t *testing.T) {
	const n = 2000 // a second or more of rendering on two cores
	inv := fleet(t, n)
	_, bundle := loadFixture(t)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{name: "cancelled before", ctx: cancelled},
		// each worker looks before each machine: cancelled some 100 machines in
		{name: "cancelled mid-way", ctx: testctx.CancelAfter(100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type answer struct {
				out []*render.Rendered
				err error
			}
			done := make(chan answer, 1)
			go func() {
				out, err := render.ValidatedContext(tc.ctx, inv, bundle)
				done <- answer{out, err}
			}()
			var a answer
			select {
			case a = <-done:
			case <-time.After(60 * time.Second): // generous: it stops within a machine's render
				t.Fatal("ValidatedContext did not stop when its context was cancelled")
			}
			var ie *inventory.InterruptedError
			if !errors.As(a.err, &ie) || !errors.Is(a.err, context.Canceled) {
				t.Fatalf("want an *inventory.InterruptedError wrapping context.Canceled, got %T: %v", a.err, a.err)
			}
			if ie.Total != n || ie.Done >= n || tc.ctx != cancelled && ie.Done == 0 {
				t.Errorf("stopped after %d of %d machines, want some but fewer than all %d", ie.Done, ie.Total, n)
			}
			if !strings.HasPrefix(a.err.Error(), "interrupted: rendering and validating stopped after ") {
				t.Errorf("error %q does not say it was interrupted", a.err)
			}
			if a.out != nil {
				t.Errorf("an interrupted render returned %d configs", len(a.out))
			}
		})
	}
}
