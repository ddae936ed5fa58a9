package sim

import (
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Proto reflection for proxied replies: an empty reply of a method's type,
// and apid's per-node metadata and errors merged into its messages.

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
