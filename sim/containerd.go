package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/internal/talos"
)

// The registry and containerd behind Talos 1.13's ImageService and
// LifecycleService (images.go, lifecycle.go) and the legacy Upgrade's
// pull (upgrade.go): which installer images exist, and each machine's
// containerd image stores.

// lifecycleAPIs reports whether Talos version serves machine.ImageService
// and machine.LifecycleService: both came with Talos 1.13
// (api/machine/image.proto and lifecycle.proto; v1alpha1_server.go
// Register in v1.13.0, v1.13.9 and v1.14.1; talos v1.12.1 and machinery
// v1.12.4 have neither), as did apid's list of the services that fan out
// (director.go Director). A version past the newest devata supports has
// them too.
func lifecycleAPIs(version string) bool {
	if rel, ok := talos.ReleaseOf(version); ok {
		return rel.LifecycleUpgrade
	}

	minor, ok := talos.Minor(version)

	return ok && minor > talos.NewestMinor
}

// containerdStore is one containerd image store: the instance's socket
// and the namespace in it.
type containerdStore struct {
	address, namespace string
}

// storeOf resolves a request's ContainerdInstance as machined of version
// does (internal/app/internal/ctrhelper ContainerdInstanceHelper), with
// its errors (InvalidArgument). Talos 1.13 sends the containerd driver
// to the system containerd whatever the namespace and knows two
// namespaces; 1.14 adds NS_TALOSCONTAINERS and sends the containerd
// driver to the CRI instance for every namespace but NS_SYSTEM
// (ContainerdInstanceAddress). In both, the CRI driver is the CRI
// instance and the containerd driver may not use NS_CRI.
func storeOf(version string, in *common.ContainerdInstance) (containerdStore, error) {
	driver, ns := in.GetDriver(), in.GetNamespace()
	minor, _ := talos.Minor(version)
	v114 := minor != 13

	var st containerdStore

	switch driver {
	case common.ContainerDriver_CONTAINERD:
		st.address = constants.SystemContainerdAddress
		if v114 && ns != common.ContainerdNamespace_NS_SYSTEM {
			st.address = constants.CRIContainerdAddress
		}
	case common.ContainerDriver_CRI:
		st.address = constants.CRIContainerdAddress
	default:
		return st, status.Errorf(codes.InvalidArgument, "invalid containerd driver %s", driver)
	}

	switch {
	case ns == common.ContainerdNamespace_NS_CRI:
		st.namespace = constants.K8sContainerdNamespace
	case ns == common.ContainerdNamespace_NS_SYSTEM:
		st.namespace = constants.SystemContainerdNamespace
	case ns == common.ContainerdNamespace_NS_TALOSCONTAINERS && v114:
		st.namespace = constants.TalosContainersContainerdNamespace
	case ns > common.ContainerdNamespace_NS_CRI && !v114:
		// machinery v1.13's enum has no name for it: String gives the number
		return st, status.Errorf(codes.InvalidArgument, "invalid containerd namespace %s", strconv.Itoa(int(ns)))
	default:
		return st, status.Errorf(codes.InvalidArgument, "invalid containerd namespace %s", ns)
	}

	if driver == common.ContainerDriver_CONTAINERD && ns == common.ContainerdNamespace_NS_CRI {
		return st, status.Errorf(codes.InvalidArgument, "cannot use CRI namespace with containerd driver")
	}

	return st, nil
}

// legacyStore is where MachineService.Upgrade pulls the installer
// (install.PullAndValidateInstallerImage: the system containerd, its
// system namespace).
var legacyStore = containerdStore{address: constants.SystemContainerdAddress, namespace: constants.SystemContainerdNamespace}

// pulledImage is an installer image in a containerd store.
type pulledImage struct {
	repository, version, digest string
}

// installer is the installer image as a boot partition records it.
func (p pulledImage) installer(name string) bootEntry {
	return bootEntry{version: p.version, image: name}
}

// installerDigest is the digest of the sim's installer for a repository
// and Talos version: the same on every machine and in every run.
func installerDigest(repository, version string) string {
	sum := sha256.Sum256([]byte("sim installer " + repository + ":" + version))

	return "sha256:" + hex.EncodeToString(sum[:])
}

// resolve is a pull's resolution of ref in the sim's registry
// (containerd's docker resolver, remotes/docker/resolver.go Resolve). It
// holds an installer for every Talos version tag (vX.Y.Z, pre-releases
// included) of every repository, with installerDigest's digest, except
// ghcr.io/siderolabs/installer from Talos 1.14 on (Talos publishes its
// installers on the Image Factory only from 1.14: talos #13138, pkg/images
// in v1.14.1) and the images UpgradeImagesMissing names. A reference by
// digest resolves when the digest is the one of its tag; a bare digest
// never does. A miss is containerd's not found, wrapped by image.Pull
// (pull.go pullInternal): "failed to pull image %q: failed to resolve
// reference %q: %s: not found".
func resolve(image string, ref imageRef, f Faults) (pulledImage, error) {
	version, ok := talosVersionTag(ref.tag)

	if ok && ref.repository == talos.GHCRInstaller {
		if minor, known := talos.Minor(version); known && minor >= 14 {
			ok = false
		}
	}

	img := pulledImage{repository: ref.repository, version: version, digest: installerDigest(ref.repository, version)}

	if !ok || ref.digest != "" && ref.digest != img.digest || imageMissing(f.UpgradeImagesMissing, image, ref) {
		return pulledImage{}, fmt.Errorf("failed to pull image %q: failed to resolve reference %q: %s: not found", ref, ref, ref)
	}

	return img, nil
}

// names are the names a pull leaves the image under in its store
// (aliases.go manageAliases): the reference as pulled, the bare digest and
// the repository at the digest.
func (p pulledImage) names(ref imageRef) []string {
	return []string{ref.String(), p.digest, p.repository + "@" + p.digest}
}

// pull records an image in one of the machine's containerd stores.
func (m *Machine) pull(st containerdStore, ref imageRef, img pulledImage) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.images == nil {
		m.images = map[containerdStore]map[string]pulledImage{}
	}

	if m.images[st] == nil {
		m.images[st] = map[string]pulledImage{}
	}

	for _, name := range img.names(ref) {
		m.images[st][name] = img
	}
}

// pulled looks an image up by name in a store, as containerd's GetImage
// does: the exact name, no normalization.
func (m *Machine) pulled(st containerdStore, name string) (pulledImage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()

	img, ok := m.images[st][name]

	return img, ok
}

// forgetImagesLocked drops the stores a boot or a wipe loses: the system
// containerd keeps its images under /system/var, a tmpfs
// (services/containerd.go Runner: --root /system/var/lib/containerd), so
// every boot; the CRI containerd under /var/lib/containerd, on EPHEMERAL,
// so only when EPHEMERAL is wiped.
func (m *Machine) forgetImagesLocked(ephemeral bool) {
	for st := range m.images {
		if ephemeral || st.address == constants.SystemContainerdAddress {
			delete(m.images, st)
		}
	}
}
