package sim

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/files"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubeaccess"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/perf"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/siderolink"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// talosNamespaces are registered as machined's v1alpha2 state does.
var talosNamespaces = []struct{ name, description string }{
	{v1alpha1.NamespaceName, "Talos v1alpha1 subsystems glue resources."},
	{cluster.NamespaceName, "Cluster configuration and discovery resources."},
	{cluster.RawNamespaceName, "Cluster unmerged raw resources."},
	{config.NamespaceName, "Talos node configuration."},
	{etcd.NamespaceName, "etcd resources."},
	{files.NamespaceName, "Files and file-like resources."},
	{hardware.NamespaceName, "Hardware resources."},
	{k8s.NamespaceName, "Kubernetes all node types resources."},
	{k8s.ControlPlaneNamespaceName, "Kubernetes control plane resources."},
	{kubespan.NamespaceName, "KubeSpan resources."},
	{network.NamespaceName, "Networking resources."},
	{network.ConfigNamespaceName, "Networking configuration resources."},
	{cri.NamespaceName, "CRI Seccomp resources."},
	{secrets.NamespaceName, "Resources with secret material."},
	{perf.NamespaceName, "Stats resources."},
}

// talosResources are the types machined registers: talosctl resolves a kind
// through their ResourceDefinitions even where the sim serves no instance.
var talosResources = []meta.ResourceWithRD{
	&block.Device{}, &block.DiscoveredVolume{}, &block.DiscoveryRefreshRequest{}, &block.DiscoveryRefreshStatus{},
	&block.Disk{}, &block.MountRequest{}, &block.MountStatus{}, &block.SwapStatus{}, &block.Symlink{},
	&block.SystemDisk{}, &block.UserDiskConfigStatus{}, &block.VolumeConfig{}, &block.VolumeLifecycle{},
	&block.VolumeMountRequest{}, &block.VolumeMountStatus{}, &block.VolumeStatus{}, &block.ZswapStatus{},
	&cluster.Affiliate{}, &cluster.Config{}, &cluster.Identity{}, &cluster.Info{}, &cluster.Member{},
	&config.MachineConfig{}, &config.MachineType{},
	&cri.ImageCacheConfig{}, &cri.SeccompProfile{}, &cri.RegistriesConfig{},
	&etcd.Config{}, &etcd.PKIStatus{}, &etcd.Spec{}, &etcd.Member{},
	&files.EtcFileSpec{}, &files.EtcFileStatus{},
	&hardware.MemoryModule{}, &hardware.PCIDevice{}, &hardware.PCIDriverRebindConfig{}, &hardware.PCIDriverRebindStatus{},
	&hardware.PCRStatus{}, &hardware.Processor{}, &hardware.SystemInformation{},
	&k8s.AdmissionControlConfig{}, &k8s.AuditPolicyConfig{}, &k8s.AuthorizationConfig{}, &k8s.APIServerConfig{},
	&k8s.KubePrismEndpoints{}, &k8s.ConfigStatus{}, &k8s.ControllerManagerConfig{}, &k8s.Endpoint{},
	&k8s.ExtraManifestsConfig{}, &k8s.KubeletConfig{}, &k8s.KubeletLifecycle{}, &k8s.KubeletSpec{}, &k8s.KubeletStatus{},
	&k8s.KubePrismConfig{}, &k8s.KubePrismStatuses{}, &k8s.Manifest{}, &k8s.ManifestStatus{},
	&k8s.BootstrapManifestsConfig{}, &k8s.NodeAnnotationSpec{}, &k8s.NodeCordonedSpec{}, &k8s.NodeIP{},
	&k8s.NodeIPConfig{}, &k8s.NodeLabelSpec{}, &k8s.Nodename{}, &k8s.NodeStatus{}, &k8s.NodeTaintSpec{},
	&k8s.SchedulerConfig{}, &k8s.StaticPod{}, &k8s.StaticPodServerStatus{}, &k8s.StaticPodStatus{}, &k8s.SecretsStatus{},
	&kubeaccess.Config{},
	&kubespan.Config{}, &kubespan.Endpoint{}, &kubespan.Identity{}, &kubespan.PeerSpec{}, &kubespan.PeerStatus{},
	&network.AddressStatus{}, &network.AddressSpec{}, &network.DeviceConfigSpec{}, &network.DNSResolveCache{},
	&network.DNSUpstream{}, &network.EthernetSpec{}, &network.EthernetStatus{}, &network.HardwareAddr{},
	&network.HostDNSConfig{}, &network.HostnameStatus{}, &network.HostnameSpec{}, &network.LinkRefresh{},
	&network.LinkStatus{}, &network.LinkSpec{}, &network.NfTablesChain{}, &network.NodeAddress{},
	&network.NodeAddressFilter{}, &network.NodeAddressSortAlgorithm{}, &network.OperatorSpec{}, &network.ProbeSpec{},
	&network.ProbeStatus{}, &network.ResolverStatus{}, &network.ResolverSpec{}, &network.RouteStatus{},
	&network.RouteSpec{}, &network.Status{}, &network.TimeServerStatus{}, &network.TimeServerSpec{},
	&perf.CPU{}, &perf.Memory{},
	&runtime.BootedEntry{}, &runtime.DevicesStatus{}, &runtime.Diagnostic{}, &runtime.EventSinkConfig{},
	&runtime.ExtensionServiceConfig{}, &runtime.ExtensionServiceConfigStatus{}, &runtime.ExtensionStatus{},
	&runtime.ImageFactorySchematic{},
	&runtime.KernelCmdline{}, &runtime.KernelModuleSpec{}, &runtime.KernelParamSpec{}, &runtime.KernelParamDefaultSpec{},
	&runtime.KernelParamStatus{}, &runtime.KmsgLogConfig{}, &runtime.LoadedKernelModule{},
	&runtime.MaintenanceServiceConfig{}, &runtime.MaintenanceServiceRequest{}, &runtime.MachineResetSignal{},
	&runtime.MachineStatus{}, &runtime.MetaKey{}, &runtime.MetaLoaded{}, &runtime.MountStatus{},
	&runtime.PlatformMetadata{}, &runtime.SBOMItem{}, &runtime.SecurityState{}, &runtime.UnattendedInstallStatus{},
	&runtime.UniqueMachineToken{},
	&runtime.Version{}, &runtime.WatchdogTimerConfig{}, &runtime.WatchdogTimerStatus{},
	&secrets.API{}, &secrets.CertSAN{}, &secrets.EncryptionSalt{}, &secrets.Etcd{}, &secrets.EtcdRoot{},
	&secrets.Kubelet{}, &secrets.Kubernetes{}, &secrets.KubernetesDynamicCerts{}, &secrets.KubernetesRoot{},
	&secrets.MaintenanceRoot{}, &secrets.OSRoot{}, &secrets.Trustd{},
	&siderolink.Config{}, &siderolink.Status{}, &siderolink.Tunnel{},
	&timeres.AdjtimeStatus{}, &timeres.NTPStatus{}, &timeres.Status{},
	&v1alpha1.AcquireConfigSpec{}, &v1alpha1.AcquireConfigStatus{}, &v1alpha1.Service{},
}

func newInmem(ns resource.Namespace) state.CoreState {
	// small histories: a fleet holds thousands of these
	return inmem.NewStateWithOptions(
		inmem.WithHistoryInitialCapacity(2),
		inmem.WithHistoryMaxCapacity(32),
		inmem.WithHistoryGap(2),
	)(ns)
}

var (
	metaOnce  sync.Once
	metaState state.CoreState
	metaErr   error
)

// sharedMeta builds the `meta` namespace once per process: namespaces and
// resource definitions are the same on every machine of every fleet, and
// nobody can write them (the access policy denies writes), so all share one.
func sharedMeta(ctx context.Context) (state.CoreState, error) {
	metaOnce.Do(func() {
		metaState, metaErr = newMetaState(context.WithoutCancel(ctx))
	})

	return metaState, metaErr
}

func newMetaState(ctx context.Context) (state.CoreState, error) {
	metaNS := newInmem(meta.NamespaceName)

	st := state.WrapCore(namespaced.NewState(func(ns resource.Namespace) state.CoreState {
		if ns == meta.NamespaceName {
			return metaNS
		}

		return newInmem(ns)
	}))

	namespaces := registry.NewNamespaceRegistry(st)
	resources := registry.NewResourceRegistry(st)

	if err := namespaces.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("register default namespaces: %w", err)
	}

	if err := resources.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("register default resources: %w", err)
	}

	for _, ns := range talosNamespaces {
		if err := namespaces.Register(ctx, ns.name, ns.description); err != nil {
			return nil, fmt.Errorf("register namespace %s: %w", ns.name, err)
		}
	}

	for _, r := range talosResources {
		if err := resources.Register(ctx, r); err != nil {
			return nil, fmt.Errorf("register resource %T: %w", r, err)
		}
	}

	return metaNS, nil
}

func newMachineState(metaNS state.CoreState) state.State {
	return state.WrapCore(namespaced.NewState(func(ns resource.Namespace) state.CoreState {
		if ns == meta.NamespaceName {
			return metaNS
		}

		return newInmem(ns)
	}))
}

// accessPolicy is the per-type filter machined puts in front of COSI:
// read-only, known types only, Sensitive types for os:admin only, known
// namespaces only.
func accessPolicy(st state.State) state.FilteringRule {
	return func(ctx context.Context, access state.Access) error {
		if !access.Verb.Readonly() {
			return status.Error(codes.PermissionDenied, "write access is not allowed")
		}

		rd, err := safe.StateGet[*meta.ResourceDefinition](ctx, st,
			resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, strings.ToLower(access.ResourceType), resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Errorf(codes.PermissionDenied, "resource type %q is not supported", access.ResourceType)
			}

			return err
		}

		var roles role.Set
		if c := callFrom(ctx); c != nil {
			roles = c.roles
		}

		switch rd.TypedSpec().Sensitivity {
		case meta.Sensitive:
			if !roles.Includes(role.Admin) {
				return errNotAuthorized
			}
		case meta.NonSensitive:
		default:
			return fmt.Errorf("unexpected sensitivity %q", rd.TypedSpec().Sensitivity)
		}

		_, err = safe.StateGet[*meta.Namespace](ctx, st,
			resource.NewMetadata(meta.NamespaceName, meta.NamespaceType, access.ResourceNamespace, resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Errorf(codes.PermissionDenied, "namespace %q is not supported", access.ResourceNamespace)
			}

			return err
		}

		return nil
	}
}

// cosiDispatcher is the one COSI State service of the fleet: it hands each
// call to the protobuf server of the machine the call was routed to.
type cosiDispatcher struct {
	cosiv1alpha1.UnimplementedStateServer
}

func cosiOf(ctx context.Context) (*server.State, error) {
	return cosiFor(ctx, "")
}

// cosiFor is cosiOf for a read of the given type: a read of Members
// refreshes them first (see members.go).
func cosiFor(ctx context.Context, typ resource.Type) (*server.State, error) {
	c := callFrom(ctx)
	if c == nil {
		return nil, status.Error(codes.Internal, "sim: call without routing")
	}

	if typ == cluster.MemberType {
		c.target.syncMembers(ctx)
	}

	return c.target.cosi, nil
}

func (d *cosiDispatcher) Get(ctx context.Context, req *cosiv1alpha1.GetRequest) (*cosiv1alpha1.GetResponse, error) {
	s, err := cosiFor(ctx, req.GetType())
	if err != nil {
		return nil, err
	}

	if v := callFrom(ctx).target.snap().version; !typeRegistered(v, req.GetType()) {
		return nil, unregistered(req.GetType())
	}

	return s.Get(ctx, req)
}

func (d *cosiDispatcher) List(req *cosiv1alpha1.ListRequest, srv grpc.ServerStreamingServer[cosiv1alpha1.ListResponse]) error {
	s, err := cosiFor(srv.Context(), req.GetType())
	if err != nil {
		return err
	}

	v := callFrom(srv.Context()).target.snap().version
	if !typeRegistered(v, req.GetType()) {
		return unregistered(req.GetType())
	}

	return s.List(req, rdFilter{ServerStreamingServer: srv, version: v})
}

func (d *cosiDispatcher) Create(ctx context.Context, req *cosiv1alpha1.CreateRequest) (*cosiv1alpha1.CreateResponse, error) {
	s, err := cosiOf(ctx)
	if err != nil {
		return nil, err
	}

	return s.Create(ctx, req)
}

func (d *cosiDispatcher) Update(ctx context.Context, req *cosiv1alpha1.UpdateRequest) (*cosiv1alpha1.UpdateResponse, error) {
	s, err := cosiOf(ctx)
	if err != nil {
		return nil, err
	}

	return s.Update(ctx, req)
}

func (d *cosiDispatcher) Destroy(ctx context.Context, req *cosiv1alpha1.DestroyRequest) (*cosiv1alpha1.DestroyResponse, error) {
	s, err := cosiOf(ctx)
	if err != nil {
		return nil, err
	}

	return s.Destroy(ctx, req)
}

func (d *cosiDispatcher) Watch(req *cosiv1alpha1.WatchRequest, srv grpc.ServerStreamingServer[cosiv1alpha1.WatchResponse]) error {
	s, err := cosiFor(srv.Context(), req.GetType())
	if err != nil {
		return err
	}

	if v := callFrom(srv.Context()).target.snap().version; !typeRegistered(v, req.GetType()) {
		return unregistered(req.GetType())
	}

	return s.Watch(req, srv)
}

// key names a resource the sim wrote, without holding on to it.
type key struct {
	ns  resource.Namespace
	typ resource.Type
	id  resource.ID
}

// put makes the state hold exactly desired among the resources the sim
// manages, writing only what changed.
func put(ctx context.Context, st state.State, managed map[key]struct{}, desired []resource.Resource) (map[key]struct{}, error) {
	next := make(map[key]struct{}, len(desired))

	for _, r := range desired {
		md := r.Metadata()
		k := key{md.Namespace(), md.Type(), md.ID()}
		next[k] = struct{}{}

		old, err := st.Get(ctx, md)

		switch {
		case state.IsNotFoundError(err):
			if err = st.Create(ctx, r); err != nil {
				return next, fmt.Errorf("create %s: %w", md, err)
			}
		case err != nil:
			return next, fmt.Errorf("get %s: %w", md, err)
		case !reflect.DeepEqual(old.Spec(), r.Spec()):
			md.SetVersion(old.Metadata().Version())

			if err = st.Update(ctx, r); err != nil {
				return next, fmt.Errorf("update %s: %w", md, err)
			}
		}
	}

	for k := range managed {
		if _, keep := next[k]; keep {
			continue
		}

		ptr := resource.NewMetadata(k.ns, k.typ, k.id, resource.VersionUndefined)
		if err := st.Destroy(ctx, ptr); err != nil && !state.IsNotFoundError(err) {
			return next, fmt.Errorf("destroy %s: %w", ptr, err)
		}
	}

	return next, nil
}
