package sim_test

import (
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/hashicorp/go-multierror"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/client-go/tools/clientcmd"

	"devata.dev/devata/sim"
)

func routedFleet(t *testing.T) *sim.Fleet {
	t.Helper()

	cp, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: cp, TalosVersion: "v1.10.6"},
		sim.MachineSpec{Name: "w-1", Role: "worker", Config: wk},
		sim.MachineSpec{Name: "w-2", Role: "worker", Config: wk},
		sim.MachineSpec{Name: "new-1", Role: "worker"},
	)
	f.Machine("w-2").SetFaults(sim.Faults{Unreachable: true})

	return f
}

func TestNodesFanOut(t *testing.T) {
	t.Parallel()

	f := routedFleet(t)
	c := admin(t, f.Machine("cp-1").Addr())

	cp1 := f.Machine("cp-1").Addr()
	targets := []string{cp1, "cp-2", f.Machine("w-2").Addr(), f.Machine("new-1").Addr(), "nope"}

	resp, err := c.Version(client.WithNodes(t.Context(), targets...))

	var got []string
	for _, msg := range resp.GetMessages() {
		got = append(got, msg.Metadata.GetHostname()+"="+msg.Version.Tag)
	}

	if want := []string{cp1 + "=v1.11.0", "cp-2=v1.10.6"}; !slices.Equal(got, want) {
		t.Errorf("replies = %v, want %v", got, want)
	}

	var multi *multierror.Error
	if !errors.As(err, &multi) {
		t.Fatalf("error = %v, want a multierror of node errors", err)
	}

	var failed []string

	for _, e := range multi.Errors {
		var nodeErr *client.NodeError
		if !errors.As(e, &nodeErr) {
			t.Fatalf("error %v is not a node error", e)
		}

		if client.StatusCode(nodeErr.Err) != codes.Unavailable {
			t.Errorf("%s: %v, want Unavailable", nodeErr.Node, nodeErr.Err)
		}

		failed = append(failed, nodeErr.Node)
	}

	if want := targets[2:]; !slices.Equal(failed, want) {
		t.Errorf("failed nodes = %v, want %v", failed, want)
	}

	if f.Machine("cp-2").Calls("Version") != 1 || f.Machine("w-2").Calls("Version") != 0 {
		t.Errorf("calls: cp-2 %d (want 1), w-2 %d (want 0)", f.Machine("cp-2").Calls("Version"), f.Machine("w-2").Calls("Version"))
	}

	t.Run("per-node authorization", func(t *testing.T) {
		r := dial(t, readerRoles, cp1)

		_, err := r.ApplyConfiguration(client.WithNodes(t.Context(), cp1, "cp-2"), &machine.ApplyConfigurationRequest{Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})

		var multi *multierror.Error
		if !errors.As(err, &multi) || len(multi.Errors) != 2 || client.StatusCode(multi.Errors[0]) != codes.PermissionDenied {
			t.Errorf("apply as reader: %v, want two PermissionDenied node errors", err)
		}
	})
}

func TestNodeOneToOne(t *testing.T) {
	t.Parallel()

	f := routedFleet(t)
	c := admin(t, f.Machine("cp-1").Addr())

	resp, err := c.Version(client.WithNode(t.Context(), "cp-2"))
	if err != nil {
		t.Fatalf("version via node: %v", err)
	}

	if len(resp.Messages) != 1 || resp.Messages[0].Version.Tag != "v1.10.6" || resp.Messages[0].Metadata != nil {
		t.Errorf("reply = %v, want cp-2's plain reply", resp.Messages)
	}

	if _, err := c.Version(client.WithNode(t.Context(), f.Machine("w-2").Addr())); client.StatusCode(err) != codes.Unavailable {
		t.Errorf("version via unreachable node: %v, want Unavailable", err)
	}

	// COSI follows node: cp-2's own kubelet spec
	ks, err := safe.StateGet[*k8s.KubeletSpec](client.WithNode(t.Context(), f.Machine("w-1").Addr()), c.COSI, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata())
	if err != nil || ks.TypedSpec().ExpectedNodename != "w-1" {
		t.Errorf("kubelet spec via node = %v, %v; want w-1's", ks, err)
	}
}

func TestCOSIRejectsNodes(t *testing.T) {
	t.Parallel()

	f := routedFleet(t)
	c := admin(t, f.Machine("cp-1").Addr())

	_, err := safe.StateGet[*runtime.MachineStatus](client.WithNodes(t.Context(), "cp-1", "cp-2"), c.COSI, runtime.NewMachineStatus().Metadata())
	if client.StatusCode(err) != codes.InvalidArgument {
		t.Errorf("get with nodes: %v, want InvalidArgument", err)
	}

	_, err = safe.StateListAll[*runtime.MachineStatus](client.WithNodes(t.Context(), "cp-2"), c.COSI)
	if client.StatusCode(err) != codes.InvalidArgument {
		t.Errorf("list with nodes: %v, want InvalidArgument", err)
	}
}

func TestKubeconfig(t *testing.T) {
	t.Parallel()

	f := routedFleet(t)
	c := admin(t, f.Machine("cp-1").Addr())

	raw, err := c.Kubeconfig(t.Context())
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}

	kc, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatalf("parse kubeconfig: %v\n%s", err, raw)
	}

	if ctx := kc.Contexts[kc.CurrentContext]; ctx == nil || kc.Clusters[ctx.Cluster].Server != "https://10.20.0.10:6443" || len(kc.AuthInfos[ctx.AuthInfo].ClientCertificateData) == 0 {
		t.Errorf("kubeconfig does not point at the cluster endpoint with a client certificate:\n%s", raw)
	}

	// streamed one-to-many: each message is stamped with its node, a worker fails
	stream, err := c.MachineClient.Kubeconfig(client.WithNodes(t.Context(), "cp-2", "w-1"), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	var hosts, errs []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatalf("recv: %v", err)
		}

		hosts = append(hosts, msg.Metadata.GetHostname())

		if msg.Metadata.GetError() != "" {
			errs = append(errs, msg.Metadata.GetHostname())
		}
	}

	if !slices.Equal(hosts, []string{"cp-2", "w-1"}) || !slices.Equal(errs, []string{"w-1"}) {
		t.Errorf("stream hosts %v, errors %v; want cp-2 and w-1, error from w-1", hosts, errs)
	}
}

// Machines on their own loopback addresses can be named by bare host, the
// way apid takes targets.
func TestNodeByHost(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp, Address: "127.0.0.2:0"},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: cp, Address: "127.0.0.3:0", TalosVersion: "v1.10.6"},
	)
	c := admin(t, f.Machine("cp-1").Addr())

	resp, err := c.Version(client.WithNodes(t.Context(), "127.0.0.3", "127.0.0.2"))
	if err != nil {
		t.Fatalf("version: %v", err)
	}

	var got []string
	for _, msg := range resp.Messages {
		got = append(got, msg.Metadata.GetHostname()+"="+msg.Version.Tag)
	}

	if want := []string{"127.0.0.3=v1.10.6", "127.0.0.2=v1.11.0"}; !slices.Equal(got, want) {
		t.Errorf("replies = %v, want %v", got, want)
	}
}
