package api

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// watchEvents returns n put events of size-byte values under /registry/pods/.
func watchEvents(n, size int) []*mvccpb.Event {
	evs := make([]*mvccpb.Event, n)
	for i := range evs {
		evs[i] = &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{
			Key:            fmt.Appendf(nil, "/registry/pods/ns-%03d/pod-%d", i%100, i),
			Value:          bytes.Repeat([]byte{'v'}, size),
			CreateRevision: 7, ModRevision: int64(100 + i), Version: 3, Lease: 9,
		}}
	}
	return evs
}

func TestCodecMatchesGRPCs(t *testing.T) {
	hdr := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 1234, RaftTerm: 5}
	kvs := func(n int) []*mvccpb.KeyValue {
		var out []*mvccpb.KeyValue
		for _, ev := range watchEvents(n, 2048) {
			out = append(out, ev.Kv)
		}
		return out
	}
	for _, c := range []struct {
		name string
		msg  any
		// fresh is an empty message of the same type to decode into.
		fresh func() any
	}{
		{"empty put response", &pb.PutResponse{}, func() any { return &pb.PutResponse{} }},
		{"put response", &pb.PutResponse{Header: hdr}, func() any { return &pb.PutResponse{} }},
		{"watch created", &pb.WatchResponse{Header: hdr, WatchId: 3, Created: true}, func() any { return &pb.WatchResponse{} }},
		{"watch event of 2 KiB (pooled buffer)", &pb.WatchResponse{Header: hdr, WatchId: 3, Events: watchEvents(1, 2048)}, func() any { return &pb.WatchResponse{} }},
		{"watch events with prev kv", &pb.WatchResponse{Header: hdr, WatchId: 1 << 40, Events: func() []*mvccpb.Event {
			evs := watchEvents(3, 100)
			evs[1].PrevKv = evs[0].Kv
			evs[2].Type = mvccpb.DELETE
			return evs
		}()}, func() any { return &pb.WatchResponse{} }},
		{"watch cancel", &pb.WatchResponse{Header: hdr, WatchId: 2, Canceled: true, CompactRevision: 40, CancelReason: "mvcc: required revision has been compacted"}, func() any { return &pb.WatchResponse{} }},
		{"LIST page", &pb.RangeResponse{Header: hdr, Kvs: kvs(500), More: true, Count: 50000}, func() any { return &pb.RangeResponse{} }},
		{"not gogoproto (health)", &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, func() any { return &healthpb.HealthCheckResponse{} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			grpcs := encoding.GetCodecV2(grpcproto.Name)
			want, err := grpcs.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Free()
			got, err := newCodec().Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Free()
			if !bytes.Equal(got.Materialize(), want.Materialize()) {
				t.Fatalf("encoded %d bytes, gRPC's codec %d, or they differ", got.Len(), want.Len())
			}
			back := c.fresh()
			if err := newCodec().Unmarshal(got, back); err != nil {
				t.Fatal(err)
			}
			again, err := grpcs.Marshal(back)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Free()
			if !bytes.Equal(again.Materialize(), want.Materialize()) {
				t.Fatal("decoding the encoding did not give the message back")
			}
		})
	}
}

// shortMessage claims a size its encoding does not fill.
type shortMessage struct{ size, wrote int }

func (m shortMessage) Size() int { return m.size }
func (m shortMessage) MarshalToSizedBuffer(b []byte) (int, error) {
	return m.wrote, nil
}

type failingMessage struct{}

var errEncode = errors.New("cannot encode")

func (failingMessage) Size() int                                { return 4096 }
func (failingMessage) MarshalToSizedBuffer([]byte) (int, error) { return 0, errEncode }

func TestCodecRefusesWhatItCannotEncodeWhole(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  any
		want error // nil: any error
	}{
		{"short, small", shortMessage{size: 10, wrote: 9}, nil},
		{"short, pooled", shortMessage{size: 8192, wrote: 100}, nil},
		{"encode error, pooled", failingMessage{}, errEncode},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, err := newCodec().Marshal(c.msg)
			if err == nil {
				data.Free()
				t.Fatal("encoded a message that did not fill its size")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
}

// BenchmarkCodecWatchEvent encodes the response a watcher of the scale
// bench gets for one write (one 2 KiB pod), with gRPC's codec and with
// the server's; the buffer is freed as the transport frees it.
func BenchmarkCodecWatchEvent(b *testing.B) {
	resp := &pb.WatchResponse{Header: &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 1234, RaftTerm: 5}, WatchId: 3, Events: watchEvents(1, 2048)}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"grpc", encoding.GetCodecV2(grpcproto.Name)}, {"dyad", newCodec()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.codec.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
