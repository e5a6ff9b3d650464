package api

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/dyad-db/dyad/internal/server"
)

// PairStatusMethod is dyad's own RPC on the client port for `dyad status`:
// the replication state etcd's StatusResponse has no field for. It takes
// an Empty and answers a Struct (a JSON object), so it needs no generated
// code, and it is served with the same TLS and client certificate check as
// the etcd services. Fields: role, sync, peerAlive (bools), lagRevisions,
// peerRoundTripSeconds and roundTripAgeSeconds (numbers), protocols (the
// range of replication protocol versions the node speaks), protocol (the
// version the pair speaks, 0: none) and protocolRefused (why the peer is
// refused, empty if it is not).
const PairStatusMethod = "/dyad.v1.Pair/Status"

// pairServiceDesc describes the service by hand (built on each call, so
// that there is no package-level descriptor to share).
func pairServiceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "dyad.v1.Pair",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Status",
			Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(emptypb.Empty)
				if err := dec(in); err != nil {
					return nil, err
				}
				s := srv.(*server.Server)
				if icpt == nil {
					return pairStatus(s), nil
				}
				info := &grpc.UnaryServerInfo{Server: srv, FullMethod: PairStatusMethod}
				return icpt(ctx, in, info, func(ctx context.Context, req any) (any, error) { return pairStatus(s), nil })
			},
		}},
		Metadata: "dyad/pair",
	}
}

func pairStatus(s *server.Server) *structpb.Struct {
	st := s.PairStatus()
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"role":                 structpb.NewStringValue(st.Role),
		"sync":                 structpb.NewBoolValue(st.Sync),
		"peerAlive":            structpb.NewBoolValue(st.PeerAlive),
		"lagRevisions":         structpb.NewNumberValue(float64(st.LagRevisions)),
		"peerRoundTripSeconds": structpb.NewNumberValue(st.PeerRoundTrip.Seconds()),
		"roundTripAgeSeconds":  structpb.NewNumberValue(st.RoundTripAge.Seconds()),
		"protocols":            structpb.NewStringValue(st.Protocols),
		"protocol":             structpb.NewNumberValue(float64(st.Protocol)),
		"protocolRefused":      structpb.NewStringValue(st.ProtocolRefused),
	}}
}
