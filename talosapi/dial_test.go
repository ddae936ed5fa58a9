package talosapi_test

import (
	"net"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// hostnameVia calls Version through d's client for m and returns the name
// of the simulated machine that served it.
func hostnameVia(t *testing.T, f *simtest.Fleet, d *talosapi.Dialer, m *inventory.Machine) string {
	t.Helper()
	before := map[string]int{}
	for _, sm := range f.Sim.Machines() {
		before[sm.Name()] = sm.Calls("Version")
	}
	c, err := d.Client(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Version(t.Context()); err != nil {
		t.Fatalf("version of %s: %v", m.Name, err)
	}
	served := ""
	for _, sm := range f.Sim.Machines() {
		if sm.Calls("Version") > before[sm.Name()] {
			served += sm.Name()
		}
	}
	return served
}

// closedPort is a port on host that refuses connections.
func closedPort(t *testing.T, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listen on %s (the test needs the loopback range 127.0.0.0/8): %v", host, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// A worker whose Talos API the operator cannot reach directly (its port is
// closed to them) is reached through the talosconfig's endpoints, which
// proxy to it by `node` metadata as apid does; the control planes, reachable,
// are dialed directly, and the next steps name the node as talosctl reaches it.
func TestDialerFallsBackToTheEndpointsForAnUnreachableMachine(t *testing.T) {
	f := simtest.Start(t, simtest.Options{LoopbackNet: "127.77.1"})
	tc := f.Talosconfig(t)
	tc.Contexts[tc.Context].Endpoints = []string{f.Overrides["cp-1"]}
	overrides := map[string]string{}
	for name, addr := range f.Overrides {
		if name != "worker-1" {
			overrides[name] = addr
		}
	}
	host, _, err := net.SplitHostPort(f.Overrides["worker-1"])
	if err != nil {
		t.Fatal(err)
	}
	worker := *f.Inventory.Machine("worker-1")
	worker.Address, worker.Port = host, closedPort(t, host)
	d, err := talosapi.NewDialer(tc, overrides)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Proxied(t.Context(), &worker) {
		t.Fatalf("worker-1 at %s refuses connections, yet it is dialed directly", worker.Endpoint())
	}
	if got := hostnameVia(t, f, d, &worker); got != "worker-1" {
		t.Errorf("through the endpoint, %q answered, want worker-1", got)
	}
	cp2 := f.Inventory.Machine("cp-2")
	if d.Proxied(t.Context(), cp2) {
		t.Error("cp-2 has a dial override, yet it goes through the endpoints")
	}
	if got := hostnameVia(t, f, d, cp2); got != "cp-2" {
		t.Errorf("cp-2 dialed directly: %q answered", got)
	}
	if got, want := d.Talosctl(&worker), "talosctl -n "+host; got != want {
		t.Errorf("talosctl for worker-1 = %q, want %q", got, want)
	}
}

// talosctl -e: every machine goes through the endpoints given, even those
// reachable directly, and the next steps say -e too.
func TestDialerExplicitEndpointsProxyEveryMachine(t *testing.T) {
	f := simtest.Start(t, simtest.Options{LoopbackNet: "127.77.2"})
	d, err := talosapi.NewDialer(f.Talosconfig(t), f.Overrides, talosapi.WithEndpoints(f.Overrides["cp-1"]))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cp-2", "worker-2"} {
		m := f.Inventory.Machine(name)
		if !d.Proxied(t.Context(), m) {
			t.Errorf("%s is dialed directly despite -e", name)
		}
		if got := hostnameVia(t, f, d, m); got != name {
			t.Errorf("%s through cp-1: %q answered", name, got)
		}
		host, _, _ := net.SplitHostPort(f.Overrides[name])
		if got, want := d.Talosctl(m), "talosctl -e "+f.Overrides["cp-1"]+" -n "+host; got != want {
			t.Errorf("talosctl for %s = %q, want %q", name, got, want)
		}
	}
	// the endpoint is down: the error is apid's, through the endpoint
	f.Sim.Machine("cp-1").Crash()
	c, err := d.Client(t.Context(), f.Inventory.Machine("worker-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Version(t.Context()); err == nil {
		t.Error("the only endpoint is down, yet worker-2 answered through it")
	}
}

// talosctl -e <worker>: a worker's apid forwards nothing (Talos'
// apid director.go; the sim does the same), so through a worker's endpoint
// the worker itself answers, named by its inventory address as Talos'
// IsLocalTarget takes it, and every other machine is refused with apid's
// PermissionDenied "no request forwarding", which devata passes on as
// talosctl does, not as some other machine's answer.
func TestDialerThroughAWorkerEndpoint(t *testing.T) {
	f := simtest.Start(t, simtest.Options{LoopbackNet: "127.77.3"})
	// machines at their own addresses and the Talos API port, no dial
	// overrides: `node` is the inventory address, as on a real network
	at := func(name string) *inventory.Machine {
		m := *f.Inventory.Machine(name)
		host, _, err := net.SplitHostPort(f.Overrides[name])
		if err != nil {
			t.Fatal(err)
		}
		m.Address, m.Port = host, 50000
		return &m
	}
	w1, cp1 := at("worker-1"), at("cp-1")
	d, err := talosapi.NewDialer(f.Talosconfig(t), nil, talosapi.WithEndpoints(w1.Address))
	if err != nil {
		t.Fatal(err)
	}
	if got := hostnameVia(t, f, d, w1); got != "worker-1" {
		t.Errorf("worker-1 through its own endpoint: %q answered", got)
	}
	c, err := d.Client(t.Context(), cp1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := f.Sim.Machine("cp-1").Calls("Version")
	if _, err := c.Version(t.Context()); client.StatusCode(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "no request forwarding") {
		t.Errorf("cp-1 through worker-1: %v, want PermissionDenied no request forwarding", err)
	}
	if f.Sim.Machine("cp-1").Calls("Version") != before {
		t.Error("cp-1 answered a call sent through worker-1")
	}
	// what drift reports says why, and what to do
	o := talosapi.Observe(t.Context(), d, cp1)
	if o.Err == nil || !talosapi.IsNoForwarding(o.Err) || !strings.Contains(o.Err.Error(), "give control planes as endpoints") {
		t.Errorf("observing cp-1 through worker-1: %v, want the refusal and what to do", o.Err)
	}
}

// talosctl --context: the context named is used, and next steps name it;
// an unknown one lists those there are.
func TestDialerContext(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	good := f.Talosconfig(t)
	tc := &clientconfig.Config{Context: "broken", Contexts: map[string]*clientconfig.Context{
		"broken":  {Endpoints: []string{"10.0.0.1"}},
		"homelab": good.Contexts[good.Context],
	}}
	if _, err := talosapi.NewDialer(tc, f.Overrides); err == nil || !strings.Contains(err.Error(), "no client certificate") {
		t.Errorf("current context without a certificate: %v", err)
	}
	if _, err := talosapi.NewDialer(tc, f.Overrides, talosapi.WithContext("nope")); err == nil || !strings.Contains(err.Error(), `"broken", "homelab"`) || !strings.Contains(err.Error(), "--context") {
		t.Errorf("unknown context: %v", err)
	}
	d, err := talosapi.NewDialer(tc, f.Overrides, talosapi.WithContext("homelab"))
	if err != nil {
		t.Fatal(err)
	}
	m := f.Inventory.Machine("cp-1")
	if got := hostnameVia(t, f, d, m); got != "cp-1" {
		t.Errorf("cp-1 with --context homelab: %q answered", got)
	}
	if got := d.Talosctl(m); !strings.HasPrefix(got, "talosctl --context homelab -n 127.0.0.1:") {
		t.Errorf("talosctl = %q, want --context homelab and the simulated address", got)
	}
}
