package sim

import (
	"context"
	"errors"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The gRPC interceptors that route every call as apid does: to the
// endpoint itself, or proxied and fanned out to the targets it names.

// unaryInterceptor serves a unary call on the connection's endpoint or on
// each target route names, entering each machine's handler through enter.
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

// streamInterceptor is unaryInterceptor for streaming calls.
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
