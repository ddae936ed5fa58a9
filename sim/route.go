package sim

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// call is what a handler learns about the request it serves.
type call struct {
	endpoint *Machine // the machine the client connected to
	target   *Machine // the machine that serves the call
	roles    role.Set
}

type callKey struct{}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call) //nolint:errcheck // handlers only run behind the interceptors

	return c
}

// connection tells which machine a call reached, in which mode, and the
// caller's roles the way the authz injector reads them: from the client
// certificate's Organization, or reader-only in maintenance mode.
func connection(ctx context.Context) (endpoint *Machine, maintenance bool, roles role.Set, err error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, false, role.Set{}, status.Error(codes.Internal, "sim: no peer")
	}

	info, ok := p.AuthInfo.(authInfo)
	if !ok {
		return nil, false, role.Set{}, status.Error(codes.Internal, "sim: connection without sim credentials")
	}

	if info.maintenance {
		return info.endpoint, true, role.MakeSet(role.Reader), nil
	}

	if len(info.State.PeerCertificates) == 0 {
		return nil, false, role.Set{}, status.Error(codes.Unauthenticated, "no client certificate")
	}

	roles, _ = role.Parse(info.State.PeerCertificates[0].Subject.Organization)

	return info.endpoint, false, roles, nil
}

func shortMethod(full string) string {
	return full[strings.LastIndex(full, "/")+1:]
}

// serviceOf is the service of a full method name ("machine.ImageService").
func serviceOf(full string) string {
	svc, _, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")

	return svc
}

// serviceMethod names a method with its service's short name
// ("LifecycleService.Upgrade", "State.Get").
func serviceMethod(full string) string {
	svc := serviceOf(full)

	return svc[strings.LastIndex(svc, ".")+1:] + "." + shortMethod(full)
}

// since113 are the services Talos 1.13 added (containerd.go
// lifecycleAPIs).
var since113 = map[string]bool{
	"machine.ImageService":     true,
	"machine.LifecycleService": true,
}

// route reads apid's routing metadata as the endpoint's apid does
// (internal/app/apid/pkg/director/director.go Router.Director): the
// targets, and whether the call fans out (nodes) or goes to one machine
// (node, or none: the endpoint itself).
//
// A worker's apid has no remote backends: machined gives a worker no API
// client certificate (controllers/secrets/api.go generateWorker writes no
// Client, where generateControlPlane writes an os:impersonator one),
// provider.go TLSConfig.ClientConfig then returns nil and apid's main.go
// builds its router without a RemoteBackendFactory. Director then serves
// a call locally when its `node`, or its `nodes` of exactly one target, is
// the worker itself (IsLocalTarget), and refuses any other `node` or
// `nodes` call whole, before a target is dialed: singleDirector and
// aggregateDirector answer PermissionDenied "no request forwarding". A
// `nodes` call to COSI is InvalidArgument first, as the switch checks
// that before aggregateDirector; `nodes` of only the worker itself is
// served locally, COSI included, with the plain reply of a one-to-one
// call (no metadata.hostname).
func route(ctx context.Context, endpoint *Machine, fullMethod string) (targets []string, many bool, err error) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil, false, nil
	}

	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	if okNode && len(node) != 1 {
		return nil, false, status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	}

	s := endpoint.snap()
	forwards := s.controlPlane()

	if !forwards {
		if okNode && s.isLocalTarget(node[0]) {
			okNode = false
		}

		if okNodes && len(nodes) == 1 && s.isLocalTarget(nodes[0]) {
			okNodes = false
		}
	}

	switch {
	case okNodes:
		if err := oneToMany(s.version, fullMethod); err != nil {
			return nil, false, err
		}

		if !forwards {
			return nil, false, errNoForwarding
		}

		return nodes, true, nil
	case okNode:
		if !forwards {
			return nil, false, errNoForwarding
		}

		return node, false, nil
	default:
		return nil, false, nil
	}
}

// oneToMany is the check apid's Director makes of a `nodes` call before
// it picks the backends: Talos 1.11 and 1.12 refuse COSI only
// ("one-2-many proxying is not supported for COSI methods"); from 1.13
// only MachineService, ClusterService, InspectService, StorageService and
// TimeService fan out, and any other method, COSI's, ImageService's and
// LifecycleService's among them, is refused with its name (director.go
// in v1.12.1, v1.13.0, v1.13.9 and v1.14.1). It is the endpoint's apid
// that decides.
func oneToMany(version, fullMethod string) error {
	if !lifecycleAPIs(version) {
		if strings.HasPrefix(fullMethod, "/cosi.") {
			return status.Error(codes.InvalidArgument, "one-2-many proxying is not supported for COSI methods")
		}

		return nil
	}

	for _, svc := range []string{"/machine.MachineService/", "/cluster.ClusterService/", "/inspect.InspectService/", "/storage.StorageService/", "/time.TimeService/"} {
		if strings.HasPrefix(fullMethod, svc) {
			return nil
		}
	}

	return status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for method %s", fullMethod)
}

// errNoForwarding is a worker apid's answer to a call for another node
// (director.go singleDirector, aggregateDirector).
var errNoForwarding = status.Error(codes.PermissionDenied, "no request forwarding")

// isLocalTarget says whether a target names the machine itself, as apid's
// localAddressProvider.IsLocalTarget (director/local_address.go) decides:
// the exact string is one of the NodeAddress "current" addresses (a bare
// IP: the sim's is the machine's host, see networkResources) or the
// HostnameStatus hostname or FQDN (the config's machine.network.hostname
// split at its first dot by HostnameSpecSpec.ParseFQDN; else the
// machine's name, the sim's default hostname). The sim also takes the
// machine's own host:port, its stand-in for the address where loopback
// machines share a host (see resolve); nothing else matches, so another
// machine's name or address, or the machine's name where its config sets
// another hostname, is not local.
func (s snapshot) isLocalTarget(target string) bool {
	if target == s.host || target == s.addr {
		return true
	}

	fqdn := s.hostname()
	short, _, _ := strings.Cut(fqdn, ".")

	return target == fqdn || target == short
}

// dial finds a routed target the way apid's backend would reach it.
func (f *Fleet) dial(endpoint *Machine, target string) (*Machine, error) {
	t := f.resolve(target)
	if t == nil {
		return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp: lookup %s: no such host\"", target)
	}

	if t == endpoint {
		return t, nil
	}

	s := t.snap()

	switch {
	case s.down || s.faults.Unreachable:
		return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: connection refused\"", s.addr)
	case !s.configured():
		// apid speaks mTLS to the maintenance service's self-signed certificate
		return nil, status.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority\"")
	}

	return t, nil
}

// enter runs the checks a machine makes before its handler: injected
// latency and errors, maintenance limits, authorization. It returns the
// context the handler runs in. Authorization belongs here, once per
// target: on Talos the endpoint's apid only injects the caller's roles
// (authz.Injector) and each target's machined runs authz.Authorizer
// (system/services/machined.go Main), so a `nodes` call without the role
// fails per node, not as a whole.
func (f *Fleet) enter(ctx context.Context, endpoint, target *Machine, roles role.Set, fullMethod string, req any) (context.Context, error) {
	s := target.snap()
	method := shortMethod(fullMethod)

	if s.faults.Latency > 0 {
		t := time.NewTimer(s.faults.Latency)

		select {
		case <-ctx.Done():
			t.Stop()

			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}

	for _, name := range []string{method, serviceMethod(fullMethod), fullMethod} {
		if code, ok := s.faults.ErrorCodes[name]; ok && code != codes.OK {
			return nil, status.Errorf(code, "sim: injected %s on %s", code, method)
		}
	}

	target.count(method)
	target.count(serviceMethod(fullMethod))
	target.count(fullMethod)

	if apply, ok := req.(*machine.ApplyConfigurationRequest); ok && apply.DryRun {
		target.count("ApplyConfiguration(dry-run)")
	}

	svc := serviceOf(fullMethod)

	switch {
	case since113[svc] && !lifecycleAPIs(s.version):
		// a Talos without the service: its gRPC server answers before any
		// interceptor runs (grpc-go server.go handleStream), and apid
		// passes that on
		return nil, status.Errorf(codes.Unimplemented, "unknown service %s", svc)
	case since113[svc]:
		// Talos 1.13's maintenance mode is machined's own API, its callers
		// os:reader (authz.Injector ReadOnlyWithAdminOnSiderolink; the sim
		// has no SideroLink peers), so its rules apply there too
		if err := authorize(fullMethod, roles); err != nil {
			return nil, err
		}
	case !s.configured() && lifecycleAPIs(s.version):
		// from 1.13 maintenance mode is machined's own API behind apid
		// (v1.13.9 v1alpha1_server.go Register), every caller os:reader
		// (api_service_config.go ReadonlyRoleMode, authz.Injector
		// ReadOnlyWithAdminOnSiderolink), and machined's rules decide
		if err := authorizeMaintenance(fullMethod, roles); err != nil {
			return nil, err
		}

		if !servedInMaintenance113(fullMethod) {
			return nil, status.Errorf(codes.Unimplemented, "sim: %s is not modelled on a machine in maintenance mode", method)
		}
	case !s.configured() && svc == "time.TimeService":
		// up to 1.12 maintenance mode is its own gRPC server, with
		// MachineService and COSI only (v1.11.0 maintenance_service.go
		// Run, maintenance/server.go Register)
		return nil, status.Errorf(codes.Unimplemented, "unknown service %s", svc)
	case !s.configured():
		if !maintenanceMethods[method] && !strings.HasPrefix(fullMethod, "/cosi.") {
			return nil, status.Errorf(codes.Unimplemented, "method %s not implemented", method)
		}

		if err := maintenanceMessageSize(s.version, req); err != nil {
			return nil, err
		}
	default:
		if err := authorize(fullMethod, roles); err != nil {
			return nil, err
		}
	}

	return context.WithValue(ctx, callKey{}, &call{endpoint: endpoint, target: target, roles: roles}), nil
}

// fanOut bounds the goroutines one `nodes` call runs its targets on.
const fanOut = 32

// eachTarget runs do for targets 0…n-1 side by side, as apid's backends
// run, at most fanOut at once, and returns when all are done.
func eachTarget(n int, do func(i int)) {
	sem := make(chan struct{}, fanOut)

	var wg sync.WaitGroup

	for i := range n {
		sem <- struct{}{}

		wg.Go(func() {
			defer func() { <-sem }()

			do(i)
		})
	}

	wg.Wait()
}
