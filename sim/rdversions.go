package sim

import (
	"strings"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/internal/talos"
)

// typesSince are the resource types the sim serves that a release older
// than their minor does not register: machined registers its resource
// definitions in runtime/v1alpha2/v1alpha2_state.go NewState (155 in
// v1.11.0, 165 in v1.13.9, 200 in v1.14.1); of the types the sim serves
// only ImageFactorySchematic, UnattendedInstallStatus, KubeletStatus and
// NTPStatus came later than 1.11, all four in 1.14 (v1.14.1 v1alpha2_state.go; absent from
// v1.13.9's). On an older machine its
// ResourceDefinition is not listed (talosctl's ResolveResourceKind then
// says the kind is not registered) and a read of it is refused as machined's
// access policy refuses a type it has no definition for.
var typesSince = map[resource.Type]int{
	runtime.ImageFactorySchematicType:   14,
	runtime.UnattendedInstallStatusType: 14,
	k8s.KubeletStatusType:               14,
	timeres.NTPStatusType:               14,
}

// typeRegistered reports whether Talos version registers typ; a version
// that does not parse registers everything.
func typeRegistered(version string, typ resource.Type) bool {
	since, ok := typesSince[typ]
	if !ok {
		return true
	}

	minor, ok := talos.Minor(version)

	return !ok || minor >= since
}

// rdRegistered is typeRegistered for a ResourceDefinition's id (the
// type's name in lower case).
func rdRegistered(version, id string) bool {
	for typ := range typesSince {
		if strings.EqualFold(typ, id) {
			return typeRegistered(version, typ)
		}
	}

	return true
}

// unregistered is the access policy's refusal of a type the machine has
// no definition for (accessPolicy).
func unregistered(typ resource.Type) error {
	return status.Errorf(codes.PermissionDenied, "resource type %q is not supported", typ)
}

// rdFilter drops, from a List of ResourceDefinitions, those the machine's
// release does not register.
type rdFilter struct {
	grpc.ServerStreamingServer[cosiv1alpha1.ListResponse]

	version string
}

func (f rdFilter) Send(resp *cosiv1alpha1.ListResponse) error {
	if md := resp.GetResource().GetMetadata(); md != nil && md.GetType() == meta.ResourceDefinitionType && !rdRegistered(f.version, md.GetId()) {
		return nil
	}

	return f.ServerStreamingServer.Send(resp)
}
