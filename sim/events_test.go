package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"devata.dev/devata/internal/simtest"
)

// MachineService.Events as machined serves it (v1alpha1_server.go Events):
// the tail the request asks for, then what happens; through apid's
// one-to-many routing every node's boot sequence STOP arrives, as Talos'
// API suites wait for (base/api.go WaitForSequenceDone); and the tails of
// EventsSuite/TestEventsWatch.
func TestEventsTailAndWatch(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	ctx := context.Background()
	c, err := f.Dialer.Client(ctx, f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck

	receive := func(ctx context.Context, opts ...client.EventsOptionFunc) []client.Event {
		t.Helper()
		var got []client.Event
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := c.EventsWatch(ctx, func(ch <-chan client.Event) {
			defer cancel()
			timer := time.NewTimer(500 * time.Millisecond)
			defer timer.Stop()
			for {
				select {
				case ev, ok := <-ch:
					if !ok {
						return
					}
					got = append(got, ev)
				case <-timer.C:
					return
				}
			}
		}, opts...)
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		return got
	}

	// services report healthy a couple of seconds into the boot
	time.Sleep(2500 * time.Millisecond)
	one := client.WithNode(ctx, f.Sim.Machine("cp-1").Addr())
	all := receive(one, client.WithTailEvents(-1))
	if len(all) <= 20 {
		t.Fatalf("%d events of a booted control plane, want more than 20 (EventsSuite)", len(all))
	}
	if got := receive(one); len(got) != 0 {
		t.Errorf("no tail: %d events, want 0", len(got))
	}
	if got := receive(one, client.WithTailEvents(5)); len(got) != 5 {
		t.Errorf("tail 5: %d events", len(got))
	}
	id := all[len(all)-15].ID
	if got := receive(one, client.WithTailID(id)); len(got) < 14 {
		t.Errorf("since the 15th newest: %d events, want at least 14", len(got))
	}
	if all[0].ID >= all[len(all)-1].ID {
		t.Errorf("event IDs not ordered as the events: %s … %s", all[0].ID, all[len(all)-1].ID)
	}

	// one-to-many: every node's boot STOP
	var nodes []string
	for _, name := range []string{"cp-1", "cp-2", "worker-1"} {
		nodes = append(nodes, f.Sim.Machine(name).Addr())
	}
	done := map[string]bool{}
	for _, ev := range receive(client.WithNodes(ctx, nodes...), client.WithTailEvents(-1)) {
		if s, ok := ev.Payload.(*machine.SequenceEvent); ok && s.GetSequence() == "boot" && s.GetAction() == machine.SequenceEvent_STOP {
			done[ev.Node] = true
		}
	}
	for _, n := range nodes {
		if !done[n] {
			t.Errorf("no boot STOP from %s through nodes (got %v)", n, done)
		}
	}
}
