package sim_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

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

	// the targets stream side by side, as apid's: in either order
	slices.Sort(hosts)
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

// EtcdRecover, a client stream, with `nodes`: apid proxies it as a unary
// call (it is not among apid's streamed methods), so every target gets the
// whole upload and the reply is one EtcdRecoverResponse with a message per
// target, a failed one as messages[].metadata.error.
func TestNodesClientStream(t *testing.T) {
	t.Parallel()

	f := routedFleet(t)
	c := admin(t, f.Machine("cp-1").Addr())

	// a snapshot-shaped upload (a multiple of 512 bytes, then their sha256)
	// of several messages, which only a whole upload passes the hash check
	db := bytes.Repeat([]byte("devata"), 10*512)
	sum := sha256.Sum256(db)
	upload := append(db, sum[:]...)

	ctx := ctxTimeout(t, 10*time.Second)
	eventually(t, "uploads to cp-1 and cp-2", func() error {
		_, err := c.EtcdRecover(client.WithNodes(ctx, "cp-1", "cp-2"), bytes.NewReader(upload))
		return err
	})

	w2 := f.Machine("w-2").Addr()
	resp, err := c.EtcdRecover(client.WithNodes(ctx, "cp-1", "w-1", w2, "cp-2"), bytes.NewReader(upload))

	var hosts []string
	for _, msg := range resp.GetMessages() {
		hosts = append(hosts, msg.GetMetadata().GetHostname())
	}

	if want := []string{"cp-1", "cp-2"}; !slices.Equal(hosts, want) {
		t.Errorf("replies from %v, want %v", hosts, want)
	}

	var multi *multierror.Error
	if !errors.As(err, &multi) || len(multi.Errors) != 2 {
		t.Fatalf("error = %v, want a multierror of two node errors", err)
	}

	for i, want := range []struct {
		node string
		code codes.Code
		msg  string
	}{
		{"w-1", codes.Unimplemented, "etcd recover is only available on control plane nodes"},
		{w2, codes.Unavailable, "connection refused"},
	} {
		var nodeErr *client.NodeError
		if !errors.As(multi.Errors[i], &nodeErr) || nodeErr.Node != want.node || client.StatusCode(nodeErr.Err) != want.code || !strings.Contains(nodeErr.Err.Error(), want.msg) {
			t.Errorf("error %d = %v, want %s: %s (%s)", i, multi.Errors[i], want.node, want.code, want.msg)
		}
	}

	// cp-2, the last target, got every byte: its etcd recovery passes the
	// hash check and only then refuses a snapshot the sim did not stream
	c2 := client.WithNode(ctx, "cp-2")
	if err := c.Bootstrap(c2, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("bootstrap cp-2 with recover_etcd: %v", err)
	}

	eventually(t, "cp-2's etcd fails on the foreign snapshot", func() error {
		svc, err := c.ServiceInfo(c2, "etcd")
		if err != nil {
			return err
		}

		if len(svc) != 1 || svc[0].Service.GetState() != "Failed" {
			return fmt.Errorf("etcd on cp-2: %v", svc)
		}

		events := svc[0].Service.GetEvents().GetEvents()
		if msg := events[len(events)-1].GetMsg(); !strings.Contains(msg, "not a snapshot this simulated fleet streamed") {
			t.Fatalf("etcd on cp-2 failed with %q, want the foreign snapshot refused after the hash check", msg)
		}

		return nil
	})
}
