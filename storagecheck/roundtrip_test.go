package storagecheck_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/sim"
	"devata.dev/devata/storagecheck"
)

// rounds counts round trips from the client's side: a call belongs to a new
// round trip when it starts after an earlier call finished. Calls in flight
// together on one connection are one round trip.
type rounds struct {
	mu       sync.Mutex
	done     int
	startsAt []int // calls finished when each call started
}

func (r *rounds) start() {
	r.mu.Lock()
	r.startsAt = append(r.startsAt, r.done)
	r.mu.Unlock()
}

func (r *rounds) finish() {
	r.mu.Lock()
	r.done++
	r.mu.Unlock()
}

func (r *rounds) reset() {
	r.mu.Lock()
	r.done, r.startsAt = 0, nil
	r.mu.Unlock()
}

func (r *rounds) count() (calls, roundTrips int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := slices.Clone(r.startsAt)
	slices.Sort(s)
	return len(s), len(slices.Compact(s))
}

func (r *rounds) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.start()
			defer r.finish()
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			r.start()
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				r.finish()
				return nil, err
			}
			return &countedStream{ClientStream: s, r: r}, nil
		}),
	}
}

// countedStream finishes its call when the server ends the stream.
type countedStream struct {
	grpc.ClientStream
	r    *rounds
	once sync.Once
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.once.Do(s.r.finish)
	}
	return err
}

func TestObserveIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	f := simtest.Start(t, simtest.Options{})
	sm := f.Sim.Machine("worker-1")
	// Every call waits this long on the node, so a call started after another
	// one finished cannot be mistaken for one sent together with it.
	sm.SetFaults(sim.Faults{Latency: 200 * time.Millisecond})

	m := *f.Inventory.Machine("worker-1")
	m.RawDisks = []inventory.RawDisk{{Selector: `disk.dev_path == "/dev/sdc"`, MinCount: 1}} // every read Observe can make
	var r rounds
	c, err := client.New(t.Context(), client.WithConfig(f.Talosconfig(t)), client.WithEndpoints(sm.Addr()), client.WithGRPCDialOptions(r.dialOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	lists, gets, mounts := sm.Calls("/cosi.resource.State/List"), sm.Calls("/cosi.resource.State/Get"), sm.Calls("Mounts")
	o := storagecheck.Observe(t.Context(), c, &m)
	for _, err := range []error{o.VolumesErr, o.MountsErr, o.UsageErr, o.KubeletErr, o.DiscoveredErr, o.DisksErr} {
		if err != nil {
			t.Fatal(err)
		}
	}
	calls, roundTrips := r.count()
	if roundTrips != 1 {
		t.Errorf("Observe made %d calls in %d round trips, want 1 round trip", calls, roundTrips)
	}
	// VolumeStatus, MountStatus, DiscoveredVolume and Disk listed; KubeletSpec and SystemDisk read; Mounts once.
	if got := [3]int{sm.Calls("/cosi.resource.State/List") - lists, sm.Calls("/cosi.resource.State/Get") - gets, sm.Calls("Mounts") - mounts}; got != [3]int{4, 2, 1} || calls != 7 {
		t.Errorf("node served %d lists, %d gets, %d Mounts (client saw %d calls); want 4, 2, 1 (7)", got[0], got[1], got[2], calls)
	}
	// the counter itself: two calls one after the other are two round trips
	r.reset()
	for range 2 {
		if _, err := c.Mounts(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if calls, roundTrips := r.count(); calls != 2 || roundTrips != 2 {
		t.Errorf("sequential calls: %d calls in %d round trips, want 2 in 2", calls, roundTrips)
	}
	if len(o.Volumes) == 0 || len(o.Mounts) == 0 || len(o.Usage) == 0 || !o.KubeletFound || len(o.Discovered) == 0 || len(o.Disks) != 3 || o.SystemDisk != "nvme0n1" {
		// worker-1 selects an NVMe install disk: the sim's hardware has one
		t.Errorf("observation incomplete: %+v", o)
	}
}

func BenchmarkObserveAndCheck(b *testing.B) {
	f := simtest.Start(b, simtest.Options{})
	m := f.Inventory.Machine("worker-1")
	ctx := context.Background()
	c, err := f.Dialer.Client(ctx, m)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		target := storagecheck.NewTarget(m, f.Desired[m.Name], nil, nil, storagecheck.Observe(ctx, c, m))
		for _, ch := range storagecheck.Checks() {
			ch.Evaluate(ctx, m.Name, target)
		}
	}
}
