package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testctx"
	"devata.dev/devata/inventory"
)

// Ctrl-C stops Load of an inventory of any size (issue 15, probe 6: a
// 539,832-machine validate ignored SIGINT and SIGTERM): decoding and
// validation look at the context, and the error says it was interrupted,
// not that the inventory is invalid.
func TestLoadContextStopsWhenInterrupted(t *testing.T) {
	large := simtest.LargeInventory(t, 20000, "patches/worker.yaml")
	small, err := examples.WriteHomelab(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		path string
		ctx  context.Context
		want string
	}{
		// the decoder looks at ctx every so many nodes
		{name: "large, cancelled before", path: large, ctx: cancelled, want: "interrupted: decoding " + large + " stopped: context canceled"},
		// too few nodes for the decoder to look: validation stops at its first machine
		{name: "small, cancelled before", path: small, ctx: cancelled, want: "interrupted: validating " + small + " stopped after 0 of 5 machines: context canceled"},
		// a few hundred looks are the decoder's; the rest stop validation mid-way
		{name: "large, cancelled mid-way", path: large, ctx: testctx.CancelAfter(1000), want: "interrupted: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				inv, err := inventory.LoadContext(tc.ctx, tc.path)
				if inv != nil {
					err = fmt.Errorf("returned an inventory (%d machines) and %v", len(inv.Machines), err)
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second): // generous: it stops within milliseconds
				t.Fatal("LoadContext did not stop when its context was cancelled")
			}
			var ie *inventory.InterruptedError
			if !errors.As(err, &ie) || !errors.Is(err, context.Canceled) {
				t.Fatalf("want an *InterruptedError wrapping context.Canceled, got %T: %v", err, err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %q does not start with %q", err, tc.want)
			}
			if ie.Total > 0 && ie.Done >= ie.Total {
				t.Errorf("stopped after %d of %d machines: that is not stopping", ie.Done, ie.Total)
			}
			if len(inventory.FieldErrors(err)) > 0 {
				t.Errorf("an interrupted load reports field errors: %v", err)
			}
		})
	}

	// a context that is never done changes nothing
	inv, err := inventory.LoadContext(context.Background(), large)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Machines) != 20001 {
		t.Errorf("loaded %d machines, want 20001", len(inv.Machines))
	}
}
