package api

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/dyad-db/dyad/internal/server"
)

// leaderCheckPeriod is how often a require-leader stream, and the health
// status, look at the node's primary.
const leaderCheckPeriod = 200 * time.Millisecond

// requiresLeader reports whether the client asked for etcd's
// WithRequireLeader (metadata "hasleader: true"). It runs on every
// request, so it looks up the one key rather than copying the request's
// whole metadata (FromIncomingContext copies every key and value).
func requiresLeader(ctx context.Context) bool {
	for _, v := range metadata.ValueFromIncomingContext(ctx, rpctypes.MetadataRequireLeaderKey) {
		if v == rpctypes.MetadataHasLeader {
			return true
		}
	}
	return false
}

// unaryLeader refuses require-leader requests while the node knows no
// primary, as etcd does.
func unaryLeader(s *server.Server) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if requiresLeader(ctx) && !s.HasLeader() {
			return nil, rpctypes.ErrGRPCNoLeader
		}
		return h(ctx, req)
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c ctxStream) Context() context.Context { return c.ctx }

// streamLeader refuses require-leader streams without a primary, and ends
// them with "no leader" when the primary is lost, as etcd's monitorLeader
// does (clients then retry on another endpoint).
func streamLeader(s *server.Server) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !requiresLeader(ss.Context()) {
			return h(srv, ss)
		}
		if !s.HasLeader() {
			return rpctypes.ErrGRPCNoLeader
		}
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		lost := make(chan struct{})
		done := make(chan struct{})
		go func() { // owned: stops when the handler returns
			defer close(done)
			t := time.NewTicker(leaderCheckPeriod)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if !s.HasLeader() {
						close(lost)
						cancel()
						return
					}
				}
			}
		}()
		err := h(srv, ctxStream{ServerStream: ss, ctx: ctx})
		cancel()
		<-done
		select {
		case <-lost:
			return rpctypes.ErrGRPCNoLeader
		default:
			return err
		}
	}
}

// RunHealth keeps the gRPC health status in step with the node: SERVING
// while it knows a primary and is healthy, NOT_SERVING otherwise. It
// returns when ctx is done.
func RunHealth(ctx context.Context, s *server.Server, hs *health.Server) {
	t := time.NewTicker(leaderCheckPeriod)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_SERVING
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if s.Healthy() != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last {
			hs.SetServingStatus("", st)
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
