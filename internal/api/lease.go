package api

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/lease"
	"github.com/dyad-db/dyad/internal/server"
)

type leaseServer struct {
	s *server.Server
}

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return l.s.LeaseGrant(ctx, r)
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return l.s.LeaseRevoke(ctx, r)
}

func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return l.s.LeaseTimeToLive(ctx, r)
}

func (l *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return l.s.LeaseLeases(ctx)
}

// LeaseKeepAlive answers each keep-alive on the stream in order. An unknown
// or expired lease is answered with TTL 0, as etcd does.
func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ttl, err := l.s.LeaseRenew(stream.Context(), req.ID)
		if errors.Is(err, lease.ErrNotFound) {
			ttl, err = 0, nil
		}
		if err != nil {
			return rpctypes.ErrGRPCNoLeader
		}
		resp := &pb.LeaseKeepAliveResponse{Header: l.s.Header(l.s.Store().ReadableRev()), ID: req.ID, TTL: ttl}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}
