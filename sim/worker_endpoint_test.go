package sim_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/hashicorp/go-multierror"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"devata.dev/devata/sim"
)

// workerFleet: two control planes and two workers on addresses of their
// own, so a bare IP names one machine, as on a real network; w-2's config
// sets a hostname of its own.
func workerFleet(t *testing.T) *sim.Fleet {
	t.Helper()

	cp, wk := baseConfigs(t)

	return start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp, Address: "127.0.0.2:0"},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: cp, Address: "127.0.0.3:0"},
		sim.MachineSpec{Name: "w-1", Role: "worker", Config: wk, Address: "127.0.0.4:0"},
		sim.MachineSpec{Name: "w-2", Role: "worker", Config: patch(t, wk, `machine: {network: {hostname: worker-b.example.com}}`), Address: "127.0.0.5:0"},
	)
}

// host is a machine's bare IP, the way Talos' NodeAddress lists it.
func host(m *sim.Machine) string {
	h, _, _ := net.SplitHostPort(m.Addr()) //nolint:errcheck // a listener's address always splits

	return h
}

// A worker's apid has no remote backends (Talos' secrets/api.go
// generateWorker issues it no client certificate): a `node` or `nodes`
// call through a worker's endpoint that names any other machine is refused
// whole with PermissionDenied "no request forwarding" (apid director.go
// singleDirector, aggregateDirector), as Talos' TestWorkerNoRouting
// (internal/integration/api/apid.go) checks; a call whose one target is the
// worker itself (IsLocalTarget: its address or hostname) is served.
func TestWorkerEndpointDoesNotForward(t *testing.T) {
	t.Parallel()

	f := workerFleet(t)
	cp1, w1, w2 := f.Machine("cp-1"), f.Machine("w-1"), f.Machine("w-2")
	c := admin(t, w1.Addr())

	refused := func(t *testing.T, what string, err error) {
		t.Helper()

		var multi *multierror.Error
		if errors.As(err, &multi) {
			t.Errorf("%s: %v, want the whole call refused, not node errors", what, err)
		}

		if client.StatusCode(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "no request forwarding") {
			t.Errorf("%s: %v, want PermissionDenied \"no request forwarding\"", what, err)
		}
	}

	for _, other := range []string{host(cp1), "cp-1", cp1.Addr(), host(w2), "w-2", "worker-b", "nope"} {
		_, err := c.Version(client.WithNode(t.Context(), other))
		refused(t, "node "+other, err)

		_, err = c.Version(client.WithNodes(t.Context(), other))
		refused(t, "nodes "+other, err)
	}

	// the worker among the targets does not make it local: only a single
	// target is
	for _, targets := range [][]string{{host(w1), host(cp1)}, {host(w1), host(w1)}, {"cp-1", "w-1"}} {
		resp, err := c.Version(client.WithNodes(t.Context(), targets...))
		refused(t, "nodes "+strings.Join(targets, ","), err)

		if len(resp.GetMessages()) != 0 {
			t.Errorf("nodes %v: replies %v, want none", targets, resp.GetMessages())
		}
	}

	// streams and client streams are refused before a target sees them
	stream, err := c.MachineClient.Kubeconfig(client.WithNodes(t.Context(), host(cp1)), &emptypb.Empty{})
	if err == nil {
		_, err = stream.Recv()
	}

	refused(t, "kubeconfig stream", err)

	_, err = c.EtcdRecover(client.WithNodes(t.Context(), host(cp1), "cp-2"), bytes.NewReader(bytes.Repeat([]byte{1}, 544)))
	refused(t, "etcd recover", err)

	// COSI: `node` is refused, `nodes` of another machine is COSI's
	// InvalidArgument first (Director's switch checks it before
	// aggregateDirector)
	_, err = safe.StateGet[*runtime.MachineStatus](client.WithNode(t.Context(), host(cp1)), c.COSI, runtime.NewMachineStatus().Metadata())
	refused(t, "cosi node", err)

	_, err = safe.StateGet[*runtime.MachineStatus](client.WithNodes(t.Context(), host(cp1)), c.COSI, runtime.NewMachineStatus().Metadata())
	if client.StatusCode(err) != codes.InvalidArgument {
		t.Errorf("cosi nodes cp-1: %v, want InvalidArgument", err)
	}

	for _, m := range []string{"cp-1", "cp-2", "w-2"} {
		if n := f.Machine(m).Calls("Version") + f.Machine(m).Calls("Kubeconfig") + f.Machine(m).Calls("EtcdRecover"); n != 0 {
			t.Errorf("%s served %d calls through w-1's endpoint", m, n)
		}
	}

	if n := w1.Calls("Version"); n != 0 {
		t.Errorf("w-1 served %d refused Version calls", n)
	}

	// the worker itself, as IsLocalTarget decides: its address, its
	// hostname (and the sim's host:port for the address)
	for _, self := range []string{host(w1), "w-1", w1.Addr()} {
		resp, err := c.Version(client.WithNode(t.Context(), self))
		if err != nil || len(resp.GetMessages()) != 1 {
			t.Errorf("node %s (itself): %v, %v; want its reply", self, resp.GetMessages(), err)
		}

		// `nodes` of only itself is served as a one-to-one call: the plain
		// reply, not stamped with the target
		resp, err = c.Version(client.WithNodes(t.Context(), self))
		if err != nil || len(resp.GetMessages()) != 1 || resp.GetMessages()[0].GetMetadata() != nil {
			t.Errorf("nodes %s (itself): %v, %v; want its plain reply", self, resp.GetMessages(), err)
		}

		// even on COSI, where `nodes` is otherwise InvalidArgument
		ks, err := safe.StateGet[*k8s.KubeletSpec](client.WithNodes(t.Context(), self), c.COSI, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata())
		if err != nil || ks.TypedSpec().ExpectedNodename != "w-1" {
			t.Errorf("cosi nodes %s (itself): %v, %v; want w-1's kubelet spec", self, ks, err)
		}
	}

	// and without node metadata
	if resp, err := c.Version(t.Context()); err != nil || len(resp.GetMessages()) != 1 {
		t.Errorf("version without nodes: %v, %v", resp.GetMessages(), err)
	}

	// a worker whose config sets its hostname answers to that (hostname
	// and FQDN), no longer to its name
	c2 := admin(t, w2.Addr())

	for _, self := range []string{"worker-b", "worker-b.example.com", host(w2)} {
		if _, err := c2.Version(client.WithNode(t.Context(), self)); err != nil {
			t.Errorf("w-2 node %s (itself): %v", self, err)
		}
	}

	_, err = c2.Version(client.WithNode(t.Context(), "w-2"))
	refused(t, "w-2 node w-2 (not its hostname)", err)
}

// Through a control plane's endpoint, calls still reach workers, one or
// many.
func TestControlPlaneEndpointForwardsToWorkers(t *testing.T) {
	t.Parallel()

	f := workerFleet(t)
	w1 := f.Machine("w-1")
	c := admin(t, f.Machine("cp-1").Addr())

	if resp, err := c.Version(client.WithNode(t.Context(), host(w1))); err != nil || len(resp.GetMessages()) != 1 {
		t.Errorf("node w-1: %v, %v", resp.GetMessages(), err)
	}

	resp, err := c.Version(client.WithNodes(t.Context(), host(w1), "w-2", "cp-2"))
	if err != nil || len(resp.GetMessages()) != 3 {
		t.Errorf("nodes w-1, w-2, cp-2: %v, %v", resp.GetMessages(), err)
	}

	stream, err := c.MachineClient.Kubeconfig(client.WithNodes(t.Context(), "cp-2", host(w1)), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	var hosts []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatalf("kubeconfig stream: %v", err)
		}

		hosts = append(hosts, msg.GetMetadata().GetHostname())
	}

	// the targets stream side by side, as apid's: in either order
	if len(hosts) != 2 || !slices.Contains(hosts, "cp-2") || !slices.Contains(hosts, host(w1)) {
		t.Errorf("kubeconfig stream from %v, want cp-2 and w-1", hosts)
	}

	ks, err := safe.StateGet[*k8s.KubeletSpec](client.WithNode(t.Context(), host(w1)), c.COSI, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata())
	if err != nil || ks.TypedSpec().ExpectedNodename != "w-1" {
		t.Errorf("cosi node w-1: %v, %v", ks, err)
	}

	if w1.Calls("Version") != 2 {
		t.Errorf("w-1 served %d Version calls, want 2", w1.Calls("Version"))
	}
}
