package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// A request gRPC cannot decode (a string field that is not UTF-8, bytes
// that are no protobuf message) is the client's fault, but gRPC answers it
// INTERNAL, with no ErrorInfo, before any interceptor sees the call, and
// a stream's RecvMsg has already written that status to the client when
// it returns the error. So the server's codec does not fail such a
// request: handed a *decodeTarget (as every method of a service
// registered through decodingRegistrar asks), it decodes into the message
// it holds and keeps the error there, and the wrapped handler then fails
// the call as ErrMalformedRequest through the interceptors, which log it,
// count it and give it its ErrorInfo like any other error.

// decodeTarget is what a wrapped handler receives a message into.
type decodeTarget struct {
	msg any
	err error
}

// serverCodec is gRPC's proto codec but for *decodeTarget.
type serverCodec struct{ encoding.CodecV2 }

func newServerCodec() serverCodec {
	return serverCodec{encoding.GetCodecV2(protocodec.Name)}
}

func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if t, ok := v.(*decodeTarget); ok {
		t.err = c.CodecV2.Unmarshal(data, t.msg)
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

func malformed(err error) error {
	return fmt.Errorf("%w: %v", ErrMalformedRequest, err)
}

// decodingRegistrar registers services on a *grpc.Server with every
// handler receiving its messages through a decodeTarget.
type decodingRegistrar struct{ *grpc.Server }

func (r decodingRegistrar) RegisterService(sd *grpc.ServiceDesc, impl any) {
	d := *sd
	d.Methods = make([]grpc.MethodDesc, len(sd.Methods))
	for i, m := range sd.Methods {
		m.Handler = decodingMethod(m.Handler)
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(sd.Streams))
	for i, s := range sd.Streams {
		h := s.Handler
		s.Handler = func(srv any, ss grpc.ServerStream) error {
			return h(srv, decodingStream{ss})
		}
		d.Streams[i] = s
	}
	r.Server.RegisterService(&d, impl)
}

// decodingMethod wraps a unary handler. The generated handler returns a
// failed decode before it calls the interceptor; so the decode never
// fails it, and the interceptor runs a handler that fails the call.
func decodingMethod(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		var bad error
		return h(srv, ctx, func(m any) error {
			t := decodeTarget{msg: m}
			if err := dec(&t); err != nil {
				return err
			}
			if t.err != nil {
				bad = malformed(t.err)
			}
			return nil
		}, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if bad != nil {
				handler = func(context.Context, any) (any, error) { return nil, bad }
			}
			if ic == nil {
				return handler(ctx, req)
			}
			return ic(ctx, req, info, handler)
		})
	}
}

// decodingStream is a stream handler's view of its stream.
type decodingStream struct{ grpc.ServerStream }

func (s decodingStream) RecvMsg(m any) error {
	t := decodeTarget{msg: m}
	if err := s.ServerStream.RecvMsg(&t); err != nil {
		return err
	}
	if t.err != nil {
		return malformed(t.err)
	}
	return nil
}
