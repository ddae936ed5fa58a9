package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"devata.dev/devata/internal/talos"
)

// What `talosctl image list` and `talosctl containers` read, as Talos
// v1.14.1 serves it (v1.13.9 and v1.11.0 where they differ, below):
//
//   - ImageService.List (internal/app/images/images.go Service.List, from
//     1.13) and its deprecated forerunner MachineService.ImageList
//     (v1alpha1_images.go ImageList, every release): the images of one
//     containerd store, in containerd's order (by name), each with its
//     digest, creation time and size (omitted when containerd cannot
//     size it). List resolves the store as Pull does (storeOf); ImageList
//     always opens the CRI containerd, with containerdNamespaceHelper's
//     namespaces (system, k8s.io, and from 1.14 taloscontainers).
//   - MachineService.Containers (v1alpha1_server.go Containers,
//     getContainerInspector): the CRI driver only for the k8s.io
//     namespace; the containerd driver opens the system containerd for
//     the "system" namespace, the CRI containerd for any other.
//
// What a store holds: the images pulled into it (ImageService.Pull, the
// installers of upgrades: containerd.go), and what the machine runs,
// pulled when it booted: the kubelet's image and, on a control plane,
// etcd's in the CRI containerd's "system" namespace (services/kubelet.go
// and etcd.go: runner.WithNamespace(SystemContainerdNamespace) on the
// runner's default address, constants.CRIContainerdAddress), and the
// static pods' images with the CRI's sandbox image (pkg/images
// DefaultSandboxImage) in "k8s.io". Each image is listed under the names
// a pull leaves (pulledImage.names). The containers: apid, and trustd on
// a control plane, in the system containerd (services/apid.go and
// trustd.go: WithContainerdAddress(SystemContainerdAddress); started
// from the rootfs, so with no image); the static pods, each a sandbox and
// its container, in the CRI (internal/pkg/containers/cri buildPod and
// buildContainer). Images the sim has no layers for (all but the
// installers, installerLayers) have no size: 0, as List leaves it when
// image.Size fails. Workloads Kubernetes schedules (CoreDNS, kube-proxy,
// the CNI) are not listed: the sim's kubelets play them in the API
// server only (addons.go).

// sandboxImages is the CRI's sandbox image per Talos release
// (pkg/images/list.go DefaultSandboxImage): pause 3.10 in v1.11.0,
// 3.10.1 in v1.13.9, 3.10.2 in v1.14.1.
var sandboxImages = map[string]string{
	"v1.11.0": "registry.k8s.io/pause:3.10",
	"v1.13.9": "registry.k8s.io/pause:3.10.1",
	"v1.14.1": "registry.k8s.io/pause:3.10.2",
}

// listedImage is one name of an image in a store.
type listedImage struct {
	name, digest string
	size         int64
	created      time.Time
}

// imageDigest is the digest of an image the sim did not pull through its
// registry: the same on every machine and in every run.
func imageDigest(ref imageRef) string {
	sum := sha256.Sum256([]byte("sim image " + ref.repository + ":" + ref.tag))

	return "sha256:" + hex.EncodeToString(sum[:])
}

// runningImages are the images the machine's services and static pods run
// in store st, as they were pulled at boot.
func runningImages(s snapshot, st containerdStore) []string {
	if !s.configured() || st.address != constants.CRIContainerdAddress {
		return nil
	}

	var refs []string

	switch st.namespace {
	case constants.SystemContainerdNamespace:
		if k := s.active.K8sKubeletConfig(); k != nil {
			refs = append(refs, k.Image())
		}

		if s.controlPlane() && s.active.Cluster() != nil {
			refs = append(refs, s.active.Cluster().Etcd().Image())
		}
	case constants.K8sContainerdNamespace:
		pods := staticPodsOf(s)
		if len(pods) > 0 {
			refs = append(refs, releaseValue(sandboxImages, s.version))
		}

		for _, p := range pods {
			refs = append(refs, p.image)
		}
	}

	return refs
}

// storeImages lists store st of the machine, as containerd's image store
// lists it: every name, sorted.
func (m *Machine) storeImages(s snapshot, st containerdStore) []listedImage {
	byName := map[string]listedImage{}

	for _, raw := range runningImages(s, st) {
		ref, err := parseDockerRef(raw)
		if err != nil {
			continue
		}

		img := pulledImage{repository: ref.repository, version: ref.tag, digest: imageDigest(ref)}
		for _, name := range img.names(ref) {
			byName[name] = listedImage{name: name, digest: img.digest, created: s.booted}
		}
	}

	var installer int64
	for _, l := range installerLayers {
		installer += l
	}

	m.mu.Lock()
	for name, img := range m.images[st] {
		byName[name] = listedImage{name: name, digest: img.digest, size: installer, created: s.booted}
	}
	m.mu.Unlock()

	out := make([]listedImage, 0, len(byName))
	for _, img := range byName {
		out = append(out, img)
	}

	slices.SortFunc(out, func(a, b listedImage) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}

		return 0
	})

	return out
}

// List is ImageService.List (from Talos 1.13; route.go answers for older
// machines): the images of the request's containerd store.
func (a *imageAPI) List(in *machine.ImageServiceListRequest, srv grpc.ServerStreamingServer[machine.ImageServiceListResponse]) error {
	t, s := target(srv.Context())

	st, err := storeOf(s.version, in.GetContainerd())
	if err != nil {
		return err
	}

	for _, img := range t.storeImages(s, st) {
		if err := srv.Send(&machine.ImageServiceListResponse{
			Name: img.name, Digest: img.digest, CreatedAt: timestamppb.New(img.created), Size: img.size,
		}); err != nil {
			return err
		}
	}

	return nil
}

// ImageList is the deprecated MachineService.ImageList: the CRI
// containerd, in the request's namespace (containerdNamespaceHelper: an
// unknown one is InvalidArgument "invalid namespace …";
// NS_TALOSCONTAINERS only from 1.14).
func (a *machineAPI) ImageList(in *machine.ImageListRequest, srv grpc.ServerStreamingServer[machine.ImageListResponse]) error {
	t, s := target(srv.Context())

	st := containerdStore{address: constants.CRIContainerdAddress}

	minor, _ := talos.Minor(s.version)

	switch ns := in.GetNamespace(); {
	case ns == common.ContainerdNamespace_NS_CRI:
		st.namespace = constants.K8sContainerdNamespace
	case ns == common.ContainerdNamespace_NS_SYSTEM:
		st.namespace = constants.SystemContainerdNamespace
	case ns == common.ContainerdNamespace_NS_TALOSCONTAINERS && minor >= 14:
		st.namespace = constants.TalosContainersContainerdNamespace
	case ns > common.ContainerdNamespace_NS_CRI && minor < 14:
		// machinery v1.13's enum has no name for it: String gives the number
		return status.Errorf(codes.InvalidArgument, "invalid namespace %s", strconv.Itoa(int(ns)))
	default:
		return status.Errorf(codes.InvalidArgument, "invalid namespace %s", ns)
	}

	for _, img := range t.storeImages(s, st) {
		if err := srv.Send(&machine.ImageListResponse{
			Name: img.name, Digest: img.digest, CreatedAt: timestamppb.New(img.created), Size: img.size,
		}); err != nil {
			return err
		}
	}

	return nil
}

// Containers is MachineService.Containers (v1alpha1_server.go Containers,
// getContainerInspector): the running containers of a namespace.
func (a *machineAPI) Containers(ctx context.Context, in *machine.ContainersRequest) (*machine.ContainersResponse, error) {
	_, s := target(ctx)

	if in.GetNamespace() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "namespace can't be empty")
	}

	var containers []*machine.ContainerInfo

	switch in.GetDriver() {
	case common.ContainerDriver_CRI:
		if in.GetNamespace() != constants.K8sContainerdNamespace {
			return nil, errors.New("CRI inspector is supported only for K8s namespace")
		}

		containers = criContainers(s)
	case common.ContainerDriver_CONTAINERD:
		if in.GetNamespace() == constants.SystemContainerdNamespace && s.configured() {
			ids := []string{"apid"}
			if s.controlPlane() {
				ids = append(ids, "trustd")
			}

			for i, id := range ids {
				containers = append(containers, &machine.ContainerInfo{
					Namespace: constants.SystemContainerdNamespace, Id: id, InternalId: id, PodId: id, Name: id,
					Pid: uint32(1100 + i), Status: "RUNNING",
				})
			}
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unsupported driver %q", in.GetDriver())
	}

	return &machine.ContainersResponse{Messages: []*machine.Container{{Containers: containers}}}, nil
}

// criContainers are the static pods as the CRI inspector lists them: per
// pod its sandbox (Id the pod's namespace/name, the sandbox image,
// SANDBOX_READY) and its container (Id pod:container:the first 12 digits
// of its ID, CONTAINER_RUNNING).
func criContainers(s snapshot) []*machine.ContainerInfo {
	var out []*machine.ContainerInfo

	id := func(parts ...string) string {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s %d %v", s.name, s.booted.UnixNano(), parts))

		return hex.EncodeToString(sum[:])
	}

	pause := releaseValue(sandboxImages, s.version)

	for i, p := range staticPodsOf(s) {
		pod := kubeSystem + "/" + p.id(s.hostname())
		sandbox := id(pod)
		ctr := id(pod, p.component)

		out = append(out,
			&machine.ContainerInfo{
				Namespace: constants.K8sContainerdNamespace, Id: pod, InternalId: sandbox, Uid: id(pod, "uid")[:32], PodId: pod, Name: pod,
				Image: pause, Pid: uint32(2000 + 2*i), Status: "SANDBOX_READY",
			},
			&machine.ContainerInfo{
				Namespace: constants.K8sContainerdNamespace, Id: pod + ":" + p.component + ":" + ctr[:12], InternalId: ctr, PodId: pod, Name: p.component,
				Image: p.image, Pid: uint32(2001 + 2*i), Status: "CONTAINER_RUNNING",
			},
		)
	}

	return out
}
