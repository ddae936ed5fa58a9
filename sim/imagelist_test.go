package sim_test

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/sim"
)

// imageNames lists a store through ImageService.List.
func imageNames(t *testing.T, c *client.Client, node string, in *common.ContainerdInstance) ([]string, error) {
	t.Helper()

	stream, err := c.ImageClient.List(client.WithNode(ctxTimeout(t, 5*time.Second), node), &machine.ImageServiceListRequest{Containerd: in})
	if err != nil {
		return nil, err
	}

	var names []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return names, nil
		}

		if err != nil {
			return names, err
		}

		if msg.GetDigest() == "" || msg.GetCreatedAt() == nil {
			t.Errorf("%s: image %q without digest or creation time", node, msg.GetName())
		}

		names = append(names, msg.GetName())
	}
}

func hasPrefix(names []string, prefix string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, prefix) })
}

// `talosctl image list` and `talosctl containers` (ImageService.List,
// MachineService.ImageList and Containers) answer os:reader as Talos
// v1.14.1 does: the kubelet's and etcd's images in the CRI containerd's
// system namespace, the static pods' with the sandbox image in k8s.io,
// each under the names a pull leaves, sorted; apid (and trustd on a
// control plane) in the system containerd; a sandbox and a container per
// static pod in the CRI; and machined's errors for what it refuses.
func TestImageListAndContainers(t *testing.T) {
	t.Parallel()

	cp, w := baseConfigs(t)
	f := startWith(t, sim.Options{Machines: []sim.MachineSpec{
		{Name: "cp-1", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
		{Name: "w-1", Role: "worker", Config: w, TalosVersion: "v1.14.1"},
		{Name: "old", Role: "worker", Config: w, TalosVersion: "v1.11.0"},
	}})
	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	joined(t, f, 1)

	c := dial(t, role.MakeSet(role.Reader), f.Machine("cp-1").Addr())
	cri := &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_CRI}
	system := &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}

	var k8s []string
	eventually(t, "cp-1's static pods", func() error {
		var err error
		if k8s, err = imageNames(t, c, "cp-1", cri); err == nil && !hasPrefix(k8s, "registry.k8s.io/kube-apiserver:") {
			err = errors.New("no kube-apiserver image yet")
		}

		return err
	})
	for _, want := range []string{"registry.k8s.io/pause:3.10.2", "registry.k8s.io/kube-apiserver:", "registry.k8s.io/kube-controller-manager:", "registry.k8s.io/kube-scheduler:", "registry.k8s.io/pause@sha256:", "sha256:"} {
		if !hasPrefix(k8s, want) {
			t.Errorf("cp-1 k8s.io lacks %s: %v", want, k8s)
		}
	}
	if !slices.IsSorted(k8s) {
		t.Errorf("not in containerd's order: %v", k8s)
	}

	sys, err := imageNames(t, c, "cp-1", system)
	if err != nil || !hasPrefix(sys, "ghcr.io/siderolabs/kubelet:") || !strings.Contains(strings.Join(sys, " "), "/etcd:") {
		t.Errorf("cp-1 system: %v, %v; want the kubelet's and etcd's images", sys, err)
	}

	wk8s, err := imageNames(t, c, "w-1", cri)
	if err != nil || len(wk8s) != 0 {
		t.Errorf("worker k8s.io: %v, %v; want none (no static pods)", wk8s, err)
	}
	wsys, err := imageNames(t, c, "w-1", system)
	if err != nil || !hasPrefix(wsys, "ghcr.io/siderolabs/kubelet:") || strings.Contains(strings.Join(wsys, " "), "etcd") {
		t.Errorf("worker system: %v, %v; want the kubelet's image only", wsys, err)
	}

	// the containerd driver cannot read the CRI namespace (ctrhelper)
	_, err = imageNames(t, c, "cp-1", &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_CRI})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cannot use CRI namespace with containerd driver") {
		t.Errorf("containerd driver, CRI namespace: %v", err)
	}

	// a v1.11.0 machine has no ImageService; the legacy ImageList answers (talosctl falls back to it)
	if _, err := imageNames(t, c, "old", cri); status.Code(err) != codes.Unimplemented {
		t.Errorf("ImageService.List on v1.11.0: %v, want Unimplemented", err)
	}
	stream, err := c.ImageList(client.WithNode(ctxTimeout(t, 5*time.Second), "old"), common.ContainerdNamespace_NS_SYSTEM)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if err != nil || !strings.HasPrefix(msg.GetName(), "ghcr.io/siderolabs/kubelet:") {
		t.Errorf("ImageList on v1.11.0: %v, %v", msg, err)
	}

	containers := func(node, ns string, driver common.ContainerDriver) ([]*machine.ContainerInfo, error) {
		resp, err := c.Containers(client.WithNode(ctxTimeout(t, 5*time.Second), node), ns, driver)
		if err != nil {
			return nil, err
		}

		return resp.GetMessages()[0].GetContainers(), nil
	}

	got, err := containers("cp-1", constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD)
	if err != nil || len(got) != 2 || got[0].GetId() != "apid" || got[1].GetId() != "trustd" || got[0].GetStatus() != "RUNNING" {
		t.Errorf("cp-1 system containers: %v, %v; want apid and trustd running", got, err)
	}
	if got, err := containers("w-1", constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD); err != nil || len(got) != 1 || got[0].GetId() != "apid" {
		t.Errorf("worker system containers: %v, %v; want apid", got, err)
	}

	got, err = containers("cp-1", constants.K8sContainerdNamespace, common.ContainerDriver_CRI)
	if err != nil || len(got) != 6 {
		t.Fatalf("cp-1 k8s.io containers: %v, %v; want 3 sandboxes and their containers", got, err)
	}
	sandbox, ctr := got[0], got[1]
	if sandbox.GetId() != "kube-system/kube-apiserver-cp-1" || sandbox.GetPodId() != sandbox.GetId() || sandbox.GetImage() != "registry.k8s.io/pause:3.10.2" || sandbox.GetStatus() != "SANDBOX_READY" {
		t.Errorf("sandbox %v", sandbox)
	}
	if !strings.HasPrefix(ctr.GetId(), "kube-system/kube-apiserver-cp-1:kube-apiserver:") || len(ctr.GetId()) != len("kube-system/kube-apiserver-cp-1:kube-apiserver:")+12 ||
		ctr.GetPodId() != sandbox.GetId() || !strings.HasPrefix(ctr.GetImage(), "registry.k8s.io/kube-apiserver:") || ctr.GetStatus() != "CONTAINER_RUNNING" {
		t.Errorf("container %v", ctr)
	}

	if _, err := containers("cp-1", constants.SystemContainerdNamespace, common.ContainerDriver_CRI); err == nil || !strings.Contains(err.Error(), "CRI inspector is supported only for K8s namespace") {
		t.Errorf("CRI driver, system namespace: %v", err)
	}
	if _, err := containers("cp-1", "", common.ContainerDriver_CONTAINERD); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty namespace: %v", err)
	}

	// os:reader may list, as machined's rules say; os:etcd:backup may not
	none := dial(t, role.MakeSet(role.EtcdBackup), f.Machine("cp-1").Addr())
	if _, err := none.Containers(client.WithNode(ctxTimeout(t, 5*time.Second), "cp-1"), constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD); status.Code(err) != codes.PermissionDenied {
		t.Errorf("no roles: %v, want PermissionDenied", err)
	}
}
