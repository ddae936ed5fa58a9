package talosapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

func fleetOf(n int) []*inventory.Machine {
	out := make([]*inventory.Machine, n)
	for i := range out {
		out[i] = &inventory.Machine{Name: fmt.Sprintf("m-%02d", i)}
	}
	return out
}

func TestForEachBoundsConcurrencyAndKeepsGoing(t *testing.T) {
	var inFlight, peak, done atomic.Int32
	err := talosapi.ForEach(context.Background(), fleetOf(20), 4, time.Second, func(ctx context.Context, m *inventory.Machine) error {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		inFlight.Add(-1)
		done.Add(1)
		if m.Name == "m-03" || m.Name == "m-17" {
			return errors.New("boom")
		}
		return nil
	})
	if peak.Load() > 4 {
		t.Errorf("peak concurrency %d, want ≤ 4", peak.Load())
	}
	if done.Load() != 20 {
		t.Errorf("%d machines ran, want all 20 despite failures", done.Load())
	}
	var me *multierror.Error
	if !errors.As(err, &me) || len(me.Errors) != 2 {
		t.Fatalf("want 2 aggregated errors, got %v", err)
	}
	if !strings.HasPrefix(me.Errors[0].Error(), "m-03: ") || !strings.HasPrefix(me.Errors[1].Error(), "m-17: ") {
		t.Errorf("errors not named and ordered by machine: %v", me.Errors)
	}
}

func TestForEachTimeoutIsPerMachine(t *testing.T) {
	err := talosapi.ForEach(context.Background(), fleetOf(3), 3, 20*time.Millisecond, func(ctx context.Context, m *inventory.Machine) error {
		if m.Name == "m-01" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "m-01") {
		t.Errorf("want m-01's deadline error, got %v", err)
	}
}

func TestForEachStopsStartingWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var started atomic.Int32
	err := talosapi.ForEach(ctx, fleetOf(10), 1, time.Second, func(ctx context.Context, m *inventory.Machine) error {
		if started.Add(1) == 2 {
			cancel()
		}
		return nil
	})
	if started.Load() > 3 {
		t.Errorf("%d machines started after cancel", started.Load())
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("not-started machines not reported: %v", err)
	}
}
