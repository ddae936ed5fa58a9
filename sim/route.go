package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
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

func (f *Fleet) unaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		m, maintenance, roles, err := connection(ctx)
		if err != nil {
			return nil, err
		}

		m.inflight.Add(1)
		defer m.inflight.Add(-1)

		one := func(target string) (any, error) {
			t := m

			if target != "" {
				var err error

				if t, err = f.dial(m, target); err != nil {
					return nil, err
				}
			}

			hctx, err := f.enter(ctx, m, t, roles, info.FullMethod, req)
			if err != nil {
				return nil, err
			}

			return handler(hctx, req)
		}

		// the maintenance service has no apid in front of it
		if maintenance {
			return one("")
		}

		targets, many, err := route(ctx, m, info.FullMethod)
		if err != nil {
			return nil, err
		}

		if !many {
			if len(targets) == 0 {
				return one("")
			}

			return one(targets[0])
		}

		agg, err := newResponse(info.FullMethod)
		if err != nil {
			return nil, err
		}

		// targets run side by side, as apid's backends do; replies keep the
		// order the targets were given in
		type reply struct {
			resp any
			err  error
		}

		replies := make([]reply, len(targets))
		eachTarget(len(targets), func(i int) { replies[i].resp, replies[i].err = one(targets[i]) })

		for i, target := range targets {
			if replies[i].err != nil {
				appendError(agg, target, replies[i].err)

				continue
			}

			appendMessages(agg, replies[i].resp.(proto.Message), target) //nolint:forcetypeassert // gRPC replies are protobuf
		}

		return agg, nil
	}
}

func (f *Fleet) streamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()

		m, maintenance, roles, err := connection(ctx)
		if err != nil {
			return err
		}

		m.inflight.Add(1)
		defer m.inflight.Add(-1)

		one := func(target string, out grpc.ServerStream) error {
			t := m

			if target != "" {
				var err error

				if t, err = f.dial(m, target); err != nil {
					return err
				}
			}

			hctx, err := f.enter(ctx, m, t, roles, info.FullMethod, nil)
			if err != nil {
				return err
			}

			return handler(srv, &ctxStream{ServerStream: out, ctx: hctx})
		}

		if maintenance {
			return one("", ss)
		}

		targets, many, err := route(ctx, m, info.FullMethod)
		if err != nil {
			return err
		}

		if !many {
			if len(targets) == 0 {
				return one("", ss)
			}

			return one(targets[0], ss)
		}

		if !streamedByApid(info.FullMethod) {
			return proxyUnary(ss, info.FullMethod, targets, one)
		}

		// streams from several targets run side by side, as apid's
		// one-to-many proxy runs its backends (a watch such as Events
		// never ends), their messages sent one at a time (a stream cannot
		// be written from two goroutines)
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			errs = make([]error, len(targets))
			req  = &sharedRequest{}
		)
		for i, target := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := one(target, &hostnameStream{ServerStream: ss, host: target, mu: &mu, req: req}); err != nil {
					mu.Lock()
					errs[i] = ss.SendMsg(errorMessage(target, err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()

		return errors.Join(errs...)
	}
}

// apidStreamed are the methods apid proxies as streams
// (internal/app/apid/main.go registers them, and any method whose name
// ends in "Stream", with pkg/director Router.RegisterStreamedRegex): a
// `nodes` call's replies go out message by message, each stamped, a
// failed target as one error-only message. grpc-proxy proxies every other
// method as unary, client streams included: EtcdRecover is not listed.
var apidStreamed = map[string]bool{
	"/machine.MachineService/Copy":          true,
	"/machine.MachineService/DiskUsage":     true,
	"/machine.MachineService/Dmesg":         true,
	"/machine.MachineService/EtcdSnapshot":  true,
	"/machine.MachineService/Events":        true,
	"/machine.MachineService/ImageList":     true,
	"/machine.MachineService/Kubeconfig":    true,
	"/machine.MachineService/List":          true,
	"/machine.MachineService/Logs":          true,
	"/machine.MachineService/PacketCapture": true,
	"/machine.MachineService/Read":          true,
	"/os.OSService/Dmesg":                   true,
	"/cluster.ClusterService/HealthCheck":   true,
}

func streamedByApid(fullMethod string) bool {
	return apidStreamed[fullMethod] || strings.HasSuffix(fullMethod, "Stream")
}

// proxyUnary serves a `nodes` call to a stream method apid proxies as
// unary (grpc-proxy v0.5.1 handler_one2many.go): every message the client
// sends goes to every target (forwardServerToClientsMulti), and once all
// of them are done the client gets one reply, each target's messages with
// metadata.hostname set and a failed target as an error-only message in
// the reply's messages (forwardClientsToServerMultiUnary; apid's
// pkg/backend/apid.go AppendInfo and BuildError, streaming false). The
// call itself succeeds. Sent as a stream's error-only message instead, the
// error parses as garbage in the client's reply type: talosctl bootstrap
// --recover-from failed with "grpc: failed to unmarshal the received
// message", or took the error for success (issue 16).
func proxyUnary(ss grpc.ServerStream, fullMethod string, targets []string, one func(string, grpc.ServerStream) error) error {
	md, err := methodDescriptor(fullMethod)
	if err != nil {
		return err
	}

	agg, err := newMessage(md.Output())
	if err != nil {
		return err
	}

	var mu sync.Mutex // apid's ServerStreamWrapper: targets share the client's stream

	streams := make([]*fanStream, len(targets))
	for i := range streams {
		streams[i] = &fanStream{ServerStream: ss, mu: &mu, in: make(chan proto.Message), done: make(chan struct{})}
	}

	// the client's messages, to every target still reading; the last
	// RecvMsg may return only once the call is over (as grpc-proxy's does)
	go func() {
		for {
			msg, err := newMessage(md.Input())
			if err == nil {
				err = ss.RecvMsg(msg)
			}

			for _, s := range streams {
				if err != nil {
					s.recvErr = err
					close(s.in)

					continue
				}

				select {
				case s.in <- msg:
				case <-s.done:
				}
			}

			if err != nil {
				return
			}
		}
	}()

	errs := make([]error, len(targets))
	eachTarget(len(targets), func(i int) {
		defer close(streams[i].done)

		errs[i] = one(targets[i], streams[i])
	})

	for i, target := range targets {
		if errs[i] != nil {
			appendError(agg, target, errs[i])

			continue
		}

		for _, reply := range streams[i].replies {
			appendMessages(agg, reply, target)
		}
	}

	return ss.SendMsg(agg)
}

// fanStream is one target's side of a call proxyUnary fans out: it reads
// the client's messages as every target does and keeps its replies.
type fanStream struct {
	grpc.ServerStream

	mu      *sync.Mutex
	in      chan proto.Message // closed after recvErr is set
	recvErr error
	done    chan struct{} // closed when the target's handler returned
	replies []proto.Message
}

func (s *fanStream) RecvMsg(m any) error {
	msg, ok := <-s.in
	if !ok {
		return s.recvErr
	}

	dst, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "sim: %T is not a protobuf message", m)
	}

	proto.Reset(dst)
	proto.Merge(dst, msg)

	return nil
}

func (s *fanStream) SendMsg(m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "sim: %T is not a protobuf message", m)
	}

	s.replies = append(s.replies, proto.Clone(msg))

	return nil
}

func (s *fanStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.ServerStream.SetHeader(md)
}

func (s *fanStream) SendHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.ServerStream.SendHeader(md)
}

func (s *fanStream) SetTrailer(md metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.ServerStream.SetTrailer(md)
}

type ctxStream struct {
	grpc.ServerStream

	ctx context.Context //nolint:containedctx // a stream carries its context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// hostnameStream stamps every streamed message with its node, as apid does
// for one-to-many streams.
type hostnameStream struct {
	grpc.ServerStream

	host string
	mu   *sync.Mutex // shared by the targets of one stream
	req  *sharedRequest
	read bool
}

// sharedRequest is the one request of a server-streaming call, read from
// the client once and handed to every target's handler, as apid's proxy
// sends it to each backend.
type sharedRequest struct {
	once sync.Once
	msg  proto.Message
	err  error
}

func (s *hostnameStream) RecvMsg(m any) error {
	if s.req == nil {
		return s.ServerStream.RecvMsg(m)
	}
	if s.read {
		return io.EOF
	}
	s.read = true
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "request %T is not a protobuf message", m)
	}
	s.req.once.Do(func() {
		msg := pm.ProtoReflect().New().Interface()
		s.req.err = s.ServerStream.RecvMsg(msg)
		s.req.msg = msg
	})
	if s.req.err != nil {
		return s.req.err
	}
	proto.Merge(pm, s.req.msg)
	return nil
}

func (s *hostnameStream) SendMsg(m any) error {
	if msg, ok := m.(proto.Message); ok {
		msg = proto.Clone(msg)
		withMetadata(msg.ProtoReflect(), func(md *common.Metadata) { md.Hostname = s.host })
		m = msg
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	return s.ServerStream.SendMsg(m)
}

// newResponse makes an empty reply of the method's output type.
func newResponse(fullMethod string) (proto.Message, error) {
	md, err := methodDescriptor(fullMethod)
	if err != nil {
		return nil, err
	}

	return newMessage(md.Output())
}

func methodDescriptor(fullMethod string) (protoreflect.MethodDescriptor, error) {
	parts := strings.Split(strings.TrimPrefix(fullMethod, "/"), "/")
	if len(parts) != 2 {
		return nil, status.Errorf(codes.Internal, "bad method %q", fullMethod)
	}

	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(parts[0]))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "service %q: %v", parts[0], err)
	}

	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, status.Errorf(codes.Internal, "%q is not a service", parts[0])
	}

	md := sd.Methods().ByName(protoreflect.Name(parts[1]))
	if md == nil {
		return nil, status.Errorf(codes.Unimplemented, "method %s not implemented", parts[1])
	}

	return md, nil
}

func newMessage(d protoreflect.MessageDescriptor) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "message type %s: %v", d.FullName(), err)
	}

	return mt.New().Interface(), nil
}

func messagesField(msg protoreflect.Message) protoreflect.FieldDescriptor {
	fd := msg.Descriptor().Fields().ByName("messages")
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		return nil
	}

	return fd
}

// appendMessages moves src's messages into dst, each stamped with host.
func appendMessages(dst, src proto.Message, host string) {
	d, s := dst.ProtoReflect(), src.ProtoReflect()

	fd := messagesField(d)
	if fd == nil {
		return
	}

	dl, sl := d.Mutable(fd).List(), s.Get(fd).List()

	for i := range sl.Len() {
		el := sl.Get(i).Message()
		withMetadata(el, func(md *common.Metadata) { md.Hostname = host })
		dl.Append(protoreflect.ValueOfMessage(el))
	}
}

// appendError adds the error-only message apid makes for a failed node.
func appendError(dst proto.Message, host string, err error) {
	d := dst.ProtoReflect()

	fd := messagesField(d)
	if fd == nil {
		return
	}

	dl := d.Mutable(fd).List()
	el := dl.NewElement()
	withMetadata(el.Message(), func(md *common.Metadata) { fillError(md, host, err) })
	dl.Append(el)
}

func errorMessage(host string, err error) *common.Empty {
	md := &common.Metadata{}
	fillError(md, host, err)

	return &common.Empty{Metadata: md}
}

func fillError(md *common.Metadata, host string, err error) {
	md.Hostname = host
	md.Error = err.Error()
	md.Status = status.Convert(err).Proto()
}

func withMetadata(msg protoreflect.Message, edit func(*common.Metadata)) {
	fd := msg.Descriptor().Fields().ByName("metadata")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != "common.Metadata" {
		return
	}

	md, ok := msg.Mutable(fd).Message().Interface().(*common.Metadata)
	if !ok {
		panic(fmt.Sprintf("metadata of %s is %T", msg.Descriptor().FullName(), msg.Mutable(fd).Message().Interface()))
	}

	edit(md)
}

// grpcDefaultMaxRecv is gRPC's default limit on a received message
// (grpc-go server.go defaultServerMaxReceiveMessageSize).
const grpcDefaultMaxRecv = 4 << 20

// maintenanceMessageSize refuses a request larger than gRPC's default to
// a machine in maintenance mode below Talos 1.13, as its server does: up
// to 1.12 maintenance mode is MaintenanceServiceController's own gRPC
// server, made with factory.NewServer and no MaxRecvMsgSize (v1.11.0
// internal/app/machined/pkg/controllers/runtime/maintenance_service.go
// Run), so the 32 MiB that apid and machined accept
// (constants.GRPCMaxMessageSize) do not apply there; from 1.13 machined
// itself serves maintenance mode with the 32 MiB (v1.13.9
// system/services/machined.go). The error is grpc-go's, raised before
// any handler runs.
func maintenanceMessageSize(version string, req any) error {
	if lifecycleAPIs(version) {
		return nil
	}

	msg, ok := req.(proto.Message)
	if !ok {
		return nil
	}

	if n := proto.Size(msg); n > grpcDefaultMaxRecv {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, grpcDefaultMaxRecv)
	}

	return nil
}
