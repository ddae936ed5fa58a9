package sim

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/internal/talos"
)

// MachineService.ImagePull is what talosctl upgrade-k8s pre-pulls the
// Kubernetes images with (v1.14.1 pkg/cluster/kubernetes/talos_managed.go
// prePullImages: kube-apiserver, kube-controller-manager and
// kube-scheduler at the target on every control plane in NS_CRI, then the
// kubelet on every node in NS_SYSTEM; Unimplemented is skipped). machined
// serves it in v1.11.0 and v1.14.1 alike (v1alpha1_images.go ImagePull,
// deprecated in favour of ImageService.Pull from 1.13): the CRI
// containerd, the namespace by containerdNamespaceHelper (NS_CRI k8s.io,
// NS_SYSTEM system, from 1.14 NS_TALOSCONTAINERS; anything else
// InvalidArgument "invalid namespace %s"), then image.Pull with
// WithSkipIfAlreadyPulled; a missing image is NotFound "error pulling
// image: …". The reply carries one empty message. Roles: admin and
// operator (system/services/machined.go rules).
//
// The sim's registry for it holds the Kubernetes images Talos runs
// (registry.k8s.io's kube-apiserver, kube-controller-manager,
// kube-scheduler, kube-proxy, coredns/coredns and ghcr.io/siderolabs/kubelet,
// any vX.Y.Z tag) besides the installers (containerd.go resolve). A pull
// takes no time here. Every pull is recorded (ImagePulls) with how many
// configs the fleet had applied when it landed, so a test can prove the
// pulls came before the first component changed.

// ImagePull is one image a machine pulled through MachineService.ImagePull.
type ImagePull struct {
	Image     string
	Namespace string // containerd namespace: k8s.io, system
	// AppliesBefore is how many configs (dry runs aside) the whole fleet
	// had applied when this pull landed.
	AppliesBefore int
}

// kubeImageRepos are the repositories of the Kubernetes images a Talos
// config names (machinery constants: KubeletImage, KubernetesAPIServerImage,
// …, CoreDNSImage).
var kubeImageRepos = []string{
	constants.KubeletImage,
	constants.KubernetesAPIServerImage,
	constants.KubernetesControllerManagerImage,
	constants.KubernetesSchedulerImage,
	constants.KubeProxyImage,
	constants.CoreDNSImage,
}

// kubeImage resolves a Kubernetes image in the sim's registry.
func kubeImage(ref imageRef) (pulledImage, bool) {
	if !strings.HasPrefix(ref.tag, "v") && !strings.HasPrefix(ref.tag, "1.") {
		return pulledImage{}, false
	}

	for _, repo := range kubeImageRepos {
		if r, err := parseDockerRef(repo); err == nil && r.repository == ref.repository {
			return pulledImage{repository: ref.repository, version: ref.tag, digest: installerDigest(ref.repository, ref.tag)}, true
		}
	}

	return pulledImage{}, false
}

// ImagePull is MachineService.ImagePull (see above).
func (a *machineAPI) ImagePull(ctx context.Context, in *machine.ImagePullRequest) (*machine.ImagePullResponse, error) {
	t, s := target(ctx)

	st := containerdStore{address: constants.CRIContainerdAddress}

	switch ns := in.GetNamespace(); {
	case ns == common.ContainerdNamespace_NS_CRI:
		st.namespace = constants.K8sContainerdNamespace
	case ns == common.ContainerdNamespace_NS_SYSTEM:
		st.namespace = constants.SystemContainerdNamespace
	case ns == common.ContainerdNamespace_NS_TALOSCONTAINERS && minorAtLeast(s.version, 14):
		st.namespace = constants.TalosContainersContainerdNamespace
	default:
		return nil, status.Errorf(codes.InvalidArgument, "invalid namespace %s", ns)
	}

	ref, err := parseDockerRef(in.GetReference())
	if err != nil {
		return nil, fmt.Errorf("failed to parse image reference %q: %w", in.GetReference(), err)
	}

	if _, ok := t.pulled(st, ref.String()); !ok {
		img, ok := kubeImage(ref)
		if !ok {
			if img, err = t.fleet.pullable(in.GetReference(), ref, s.faults); err != nil {
				return nil, status.Errorf(codes.NotFound, "error pulling image: %s", err)
			}
		}

		t.pull(st, ref, img)
	}

	applies := 0
	for _, m := range t.fleet.Machines() {
		applies += m.Calls("ApplyConfiguration") - m.Calls("ApplyConfiguration(dry-run)")
	}

	t.pullsMu.Lock()
	t.pulls = append(t.pulls, ImagePull{Image: ref.String(), Namespace: st.namespace, AppliesBefore: applies})
	t.pullsMu.Unlock()

	a.fleet.log.Info("sim: image pulled (MachineService.ImagePull)", "machine", t.name, "image", ref.String(), "namespace", st.namespace)

	return &machine.ImagePullResponse{Messages: []*machine.ImagePull{{}}}, nil
}

// ImagePulls are the images the machine pulled through
// MachineService.ImagePull, in order.
func (m *Machine) ImagePulls() []ImagePull {
	m.pullsMu.Lock()
	defer m.pullsMu.Unlock()

	return append([]ImagePull(nil), m.pulls...)
}

func minorAtLeast(version string, minor int) bool {
	m, ok := talos.Minor(version)

	return ok && m >= minor
}
