package sim

import (
	"context"
	"io"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The grpc.ServerStream wrappers the interceptors proxy calls through.

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
