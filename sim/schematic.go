package sim

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
	"github.com/siderolabs/talos/pkg/machinery/kernel"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"devata.dev/devata/internal/talos"
)

// Schematic is an Image Factory schematic as the simulated factory holds
// it: what an installer built from it puts on the machine. The factory
// serves an installer of a schematic only once the schematic was created
// there (POST /schematics); the empty schematic always exists.
type Schematic struct {
	// Extensions are official system extensions by image name
	// (siderolabs/iscsi-tools), in the schematic's order.
	Extensions []string
	// KernelArgs are the schematic's extra kernel arguments.
	KernelArgs []string
}

// factoryInstaller matches an Image Factory installer repository: a host,
// then <platform>-installer (installer, metal-installer,
// metal-installer-secureboot, ...) and the schematic id
// (image-factory v0.9.0 internal/registry: the repository's last element is
// the schematic id, the one before it names the image).
var factoryInstaller = regexp.MustCompile(`^[^/]+/(?:[a-z0-9]+-)?installer(?:-secureboot)?/([0-9a-f]{64})$`)

// schematicOf is the schematic an installer repository was built from:
// its id and contents, factory true for an Image Factory installer, and
// known false when that factory holds no such schematic (its registry
// answers 404 to the pull).
func (f *Fleet) schematicOf(repository string) (id string, s Schematic, factory, known bool) {
	m := factoryInstaller.FindStringSubmatch(repository)
	if m == nil {
		return "", Schematic{}, false, false
	}

	id = m[1]
	if id == talos.EmptySchematicID {
		return id, Schematic{}, true, true
	}

	f.schematicsMu.RLock()
	s, known = f.schematics[id]
	f.schematicsMu.RUnlock()

	return id, s, true, known
}

// CreateSchematic has the simulated Image Factory hold schematic s under
// id, as POST /schematics does: from then on its installers are found.
// The sim does not compute ids; the caller names it (inventory's
// Schematic.ID is the Factory's).
func (f *Fleet) CreateSchematic(id string, s Schematic) {
	f.schematicsMu.Lock()
	defer f.schematicsMu.Unlock()

	if f.schematics == nil {
		f.schematics = map[string]Schematic{}
	}

	f.schematics[id] = s
}

// pullable is the sim's registry, as the fleet's machines pull from it:
// containerd.go resolve, and an Image Factory installer only of a
// schematic the factory holds.
func (f *Fleet) pullable(image string, ref imageRef, faults Faults) (pulledImage, error) {
	if _, _, factory, known := f.schematicOf(ref.repository); factory && !known {
		return pulledImage{}, fmt.Errorf("failed to pull image %q: failed to resolve reference %q: %s: not found", ref, ref, ref)
	}

	return resolve(image, ref, faults)
}

// bootImage is what the installer that wrote the booted partition put on
// the machine: the Image Factory schematic it was built from (none for an
// installer from elsewhere, ghcr.io's included).
type bootImage struct {
	schematicID string
	schematic   Schematic
}

func (f *Fleet) bootImageOf(installImage string) bootImage {
	ref, err := parseDockerRef(installImage)
	if err != nil {
		return bootImage{}
	}

	id, s, factory, known := f.schematicOf(ref.repository)
	if !factory || !known {
		return bootImage{}
	}

	return bootImage{schematicID: id, schematic: s}
}

// extensionResources are what machined reports of the booted image's
// extensions and kernel command line:
//
//   - an ExtensionStatus per extension layer (controllers/runtime
//     extension_status.go ExtensionStatusController: one per layer of
//     /etc/extensions.yaml, id the layer image without .sqsh); the imager
//     checks the extensions out to directories 0, 1, ... in the profile's
//     order (pkg/imager/imager.go buildInitramfs), and Image Factory lists
//     the schematic's official extensions in order, then its virtual
//     "schematic" extension, version the schematic id, author "Image
//     Factory" (image-factory v0.9.0 internal/profile EnhanceFromSchematic,
//     internal/artifacts/schematic.go schematicExtension); every Factory
//     installer has it, the empty schematic's too;
//   - from Talos 1.14, ImageFactorySchematic image-factory-schematic from
//     that virtual extension (controllers/runtime/image_factory_schematic.go:
//     flavor and API URL from the author, "Name (URL)");
//   - KernelCmdline cmdline, /proc/cmdline: talos.platform=metal, the
//     version's default arguments (machinery kernel.DefaultArgs with its
//     quirks) and the schematic's extra arguments (the installer writes
//     them to the boot entry).
//
// Extension versions are the sim's: the Talos version the machine runs
// (Sidero's extensions carry versions of their own).
func extensionResources(s snapshot) []resource.Resource {
	args := append([]string{"talos.platform=metal"}, kernel.DefaultArgs(quirks.New(s.version))...)
	args = append(args, s.boot.schematic.KernelArgs...)

	cmdline := runtime.NewKernelCmdline()
	cmdline.TypedSpec().Cmdline = strings.Join(args, " ")

	out := []resource.Resource{cmdline}

	if s.boot.schematicID == "" {
		return out
	}

	for i, name := range s.boot.schematic.Extensions {
		out = append(out, extensionStatus(i, extensions.Metadata{
			Name:        name[strings.LastIndex(name, "/")+1:],
			Version:     s.version,
			Author:      "Sidero Labs",
			Description: "sim: official extension " + name,
		}))
	}

	out = append(out, extensionStatus(len(s.boot.schematic.Extensions), extensions.Metadata{
		Name:        "schematic",
		Version:     s.boot.schematicID,
		Author:      "Image Factory",
		Description: "Virtual extension which specifies the schematic of the image built with Image Factory.",
	}))

	if minor, _ := talos.Minor(s.version); minor >= 14 {
		ifs := runtime.NewImageFactorySchematic(runtime.NamespaceName, runtime.ImageFactorySchematicID)
		ifs.TypedSpec().SchematicID = s.boot.schematicID
		ifs.TypedSpec().Flavor = "Image Factory"
		out = append(out, ifs)
	}

	return out
}

func extensionStatus(i int, md extensions.Metadata) *runtime.ExtensionStatus {
	id := strconv.Itoa(i)
	es := runtime.NewExtensionStatus(runtime.NamespaceName, id)
	*es.TypedSpec() = runtime.ExtensionStatusSpec{Image: id + ".sqsh", Metadata: md}

	return es
}
