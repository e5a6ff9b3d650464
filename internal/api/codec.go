package api

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// gogoMessage is what etcd's generated messages (gogoproto) implement: they
// size and encode themselves.
type gogoMessage interface {
	Size() int
	MarshalToSizedBuffer(dAtA []byte) (int, error)
}

// codec is the server's gRPC codec: gRPC's own "proto" codec, except that
// etcd's messages are encoded by their generated code, once, into a buffer
// of gRPC's pool.
//
// gRPC's codec handles them through protobuf's legacy wrapper, which
// cannot cache a size: its proto.Size encodes the whole message into a new
// slice to measure it, and the encode proper encodes it again into another
// new slice before copying it into the pooled buffer. Every response was
// thus encoded twice and left twice its size as garbage. That is paid per
// watcher on every watch event (a 2 KiB object reaching ten watchers was
// encoded twenty times) and per LIST page, and the garbage is paid again
// by the collector. Here a response costs one Size (which walks lengths)
// and one encode into a buffer the transport returns to the pool once it
// has written it.
//
// The bytes are the same: the generated code is what the legacy wrapper
// calls too (TestCodecMatchesGRPCs). Requests are decoded by gRPC's codec:
// it decodes once already.
type codec struct {
	fallback encoding.CodecV2
}

// newCodec returns the codec, falling back to gRPC's registered "proto"
// codec for everything that is not a gogoproto message (the health
// service's) and for decoding.
func newCodec() codec {
	return codec{fallback: encoding.GetCodecV2(grpcproto.Name)}
}

func (c codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(gogoMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.Size()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if err := marshalSized(m, buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if err := marshalSized(m, *buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// marshalSized encodes m into buf, whose length is m's size. The generated
// code writes from the end; a message that changed between Size and the
// encode (never, here: responses are not shared while being sent) would
// not fill buf exactly and is refused rather than sent short.
func marshalSized(m gogoMessage, buf []byte) error {
	n, err := m.MarshalToSizedBuffer(buf)
	if err != nil {
		return err
	}
	if n != len(buf) {
		return fmt.Errorf("proto: %T encoded %d bytes, its size was %d", m, n, len(buf))
	}
	return nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.fallback.Unmarshal(data, v)
}
