package talosapi

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Read names a fact Observe reads only when asked: what most passes do
// not need stays off the wire.
type Read int

const (
	// ReadBootImage reads the booted image's extensions and kernel command
	// line (Observation.Boot).
	ReadBootImage Read = iota + 1
)

// BootImage is what the installer that wrote the booted partition put
// there, as machined reports it.
type BootImage struct {
	// SchematicID is the Image Factory schematic the image was built from:
	// the version of its virtual "schematic" extension, which every
	// Factory image carries (image-factory internal/artifacts/schematic.go
	// schematicExtension); "" for an image from elsewhere (ghcr.io's
	// installer, a custom imager build).
	SchematicID string
	// Extensions are the system extensions by name (ExtensionStatus
	// metadata.name), the virtual schematic one left out, sorted.
	Extensions []string
	// Cmdline is /proc/cmdline (KernelCmdline cmdline).
	Cmdline string
}

// schematicExtension is the name of Image Factory's virtual extension
// (machinery constants.ImageFactorySchematicExtensionName).
const schematicExtension = "schematic"

// ObserveBootImage reads the machine's ExtensionStatus resources (one per
// extension layer: controllers/runtime/extension_status.go) and its
// KernelCmdline, which every Talos release devata supports serves to
// os:reader. ImageFactorySchematic, which says the same as the schematic
// extension, exists only from Talos 1.14 and is not read.
func ObserveBootImage(ctx context.Context, c *client.Client) (*BootImage, error) {
	list, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, c.COSI)
	if err != nil {
		return nil, fmt.Errorf("list ExtensionStatuses: %w", PlainError(err))
	}
	b := &BootImage{}
	for es := range list.All() {
		md := es.TypedSpec().Metadata
		if md.Name == schematicExtension {
			b.SchematicID = md.Version
			continue
		}
		b.Extensions = append(b.Extensions, md.Name)
	}
	slices.Sort(b.Extensions)
	cmdline, err := safe.StateGet[*runtime.KernelCmdline](ctx, c.COSI, resource.NewMetadata(runtime.NamespaceName, runtime.KernelCmdlineType, runtime.KernelCmdlineID, resource.VersionUndefined))
	if err != nil {
		return nil, fmt.Errorf("read KernelCmdline: %w", PlainError(err))
	}
	b.Cmdline = cmdline.TypedSpec().Cmdline
	return b, nil
}

// HasKernelArg says whether the command line holds arg as one of its
// words.
func (b *BootImage) HasKernelArg(arg string) bool {
	return slices.Contains(strings.Fields(b.Cmdline), arg)
}

// factoryInstaller matches an Image Factory installer: a host, then
// <platform>-installer (metal-installer, installer, ...-secureboot) and
// the 64-hex schematic id, then a tag or digest.
var factoryInstaller = regexp.MustCompile(`^[^/]+/(?:[a-z0-9]+-)?installer(?:-secureboot)?/([0-9a-f]{64})(?:[:@]|$)`)

// FactorySchematic is the schematic id an Image Factory installer image
// names, or "" for an installer from elsewhere.
func FactorySchematic(image string) string {
	m := factoryInstaller.FindStringSubmatch(image)
	if m == nil {
		return ""
	}
	return m[1]
}
