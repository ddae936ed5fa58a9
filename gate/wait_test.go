package gate_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// said collects a gate's progress lines.
type said struct {
	mu    sync.Mutex
	lines []string
}

func (s *said) say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
}

func (s *said) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

func etcdGate(f *simtest.Fleet, out *said, wait time.Duration) *gate.Etcd {
	return &gate.Etcd{
		Inventory: f.Inventory, Dialer: f.Dialer, Timeout: 2 * time.Second, Wait: wait, Poll: 20 * time.Millisecond,
		Say: out.say, Heartbeat: 50 * time.Millisecond,
	}
}

// Configured control planes that were never bootstrapped each wait in etcd's
// PreFunc to be bootstrapped or to join (Talos' services/etcd.go
// buildInitialCluster): no wait makes a cluster, so the gate refuses at once,
// naming the cause and the next step, instead of waiting out Wait.
func TestGateRefusesAtOnceWhenNoControlPlaneHasEtcd(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: false})
	serviceLists := func() (n int) {
		for _, m := range f.Sim.Machines() {
			n += m.Calls("ServiceList")
		}
		return n
	}
	before := serviceLists()
	gate.ObserveEtcd(context.Background(), f.Inventory, f.Dialer, 2*time.Second)
	oneLook := serviceLists() - before
	var out said
	g := etcdGate(f, &out, 3*time.Second)
	before = serviceLists()
	err := g.Pass(context.Background(), "before cp-1", f.Inventory.Machine("cp-1"))
	looks := serviceLists() - before
	want := "gate failed before cp-1: etcd is not bootstrapped on any control plane (each waits to be bootstrapped or to join: cp-1, cp-2, cp-3): run devata bootstrap"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if !errors.Is(err, gate.ErrFailed) || !errors.Is(err, gate.ErrNotBootstrapped) {
		t.Errorf("err %v does not wrap ErrFailed and ErrNotBootstrapped", err)
	}
	if oneLook == 0 || looks != oneLook {
		t.Errorf("the gate looked %d ServiceList calls' worth, one look is %d: it did not refuse on its first look", looks, oneLook)
	}
}

// Once one control plane holds etcd the others are joining, not waiting for
// a bootstrap: the gate waits for them, and says so every Heartbeat, naming
// what it waits for, how long so far, the bound and the last problem seen.
func TestGateWaitsForJoiningControlPlanesWithAHeartbeat(t *testing.T) {
	f := simtest.Start(t, simtest.Options{EtcdJoinDelay: 1500 * time.Millisecond})
	c, err := f.Dialer.Client(context.Background(), f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Bootstrap(context.Background(), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	var out said
	if err := etcdGate(f, &out, 20*time.Second).Pass(context.Background(), "before cp-2", nil); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	beat := regexp.MustCompile(`(?m)^    waiting for etcd to be healthy \(gate before cp-2\): \d+ms of 20s \(last: .*cp-[23].*\)$`)
	if !beat.MatchString(out.String()) {
		t.Errorf("no heartbeat matching %s in:\n%s", beat, out.String())
	}
	lines := strings.Split(out.String(), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "    gate before cp-2: etcd healthy, 3/3 members") {
		t.Errorf("the verdict is not the last line (a heartbeat after it?): %q", last)
	}
}

// A control plane in maintenance mode that no member lists (added to the
// inventory, not configured yet) is not part of etcd: ObserveEtcd names it
// Unjoined, a gate with JoinedOnly judges etcd by its members, and one
// without it still counts the machine down. A control plane wiped without
// leaving is still a member in the others' eyes: it is down, not unjoined,
// and only PassJoin for it passes, because etcd can lose its old member.
func TestGateJoinedOnlyAndPassJoin(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true, Maintenance: []string{"cp-3"}})
	ctx := context.Background()
	v := gate.ObserveEtcd(ctx, f.Inventory, f.Dialer, 2*time.Second)
	if strings.Join(v.Unjoined, ",") != "cp-3" || v.Err() == nil {
		t.Fatalf("unjoined %v, err %v; want cp-3 and the gate's plain view failing", v.Unjoined, v.Err())
	}
	var out said
	g := etcdGate(f, &out, time.Second)
	if err := g.Pass(ctx, "before cp-1", nil); err == nil {
		t.Error("a plain gate passed with cp-3 not a member")
	}
	g.JoinedOnly = true
	if err := g.Pass(ctx, "before cp-1", nil); err != nil {
		t.Errorf("JoinedOnly: %v", err)
	}
	if err := g.PassJoin(ctx, "before cp-3 joins", f.Inventory.Machine("cp-3")); err != nil {
		t.Errorf("PassJoin cp-3: %v", err)
	}

	f2 := simtest.Start(t, simtest.Options{Bootstrap: true})
	cp2 := f2.Sim.Machine("cp-2")
	cp2.Wipe()
	for deadline := time.Now().Add(20 * time.Second); cp2.Configured() || cp2.Observe().Down; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("cp-2 not in maintenance mode after its wipe")
		}
	}
	v = gate.ObserveEtcd(ctx, f2.Inventory, f2.Dialer, 2*time.Second)
	if len(v.Unjoined) != 0 || !slices.Contains(v.Down, "cp-2") {
		t.Errorf("wiped cp-2: unjoined %v, down %v; want it down, not unjoined", v.Unjoined, v.Down)
	}
	g2 := etcdGate(f2, &out, time.Second)
	g2.JoinedOnly = true
	if err := g2.Pass(ctx, "before cp-1", nil); err == nil {
		t.Error("a gate passed with member cp-2 wiped")
	}
	if err := g2.PassJoin(ctx, "before cp-2 joins", f2.Inventory.Machine("cp-2")); err != nil {
		t.Errorf("PassJoin cp-2 (its old member can go): %v", err)
	}
	// and not when another member is down too: etcd could not lose it
	f2.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	if err := g2.PassJoin(ctx, "before cp-2 joins", f2.Inventory.Machine("cp-2")); err == nil || !strings.Contains(err.Error(), "cp-3 is down") {
		t.Errorf("PassJoin cp-2 with cp-3 down: %v; want refused naming cp-3", err)
	}
}
