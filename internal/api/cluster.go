package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/server"
)

// errMembership: dyad's membership is fixed by configuration (one node, or
// a pair), so runtime reconfiguration is refused with a clear message.
var errMembership = status.Error(codes.FailedPrecondition, "dyad: membership is set by --initial-cluster; runtime reconfiguration is not supported")

type clusterServer struct {
	s *server.Server
}

func (c *clusterServer) members() []*pb.Member {
	cfg := c.s.Config()
	_, id := c.s.IDs()
	return []*pb.Member{{ID: id, Name: cfg.Name, PeerURLs: cfg.PeerURLs, ClientURLs: cfg.ClientURLs}}
}

func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return &pb.MemberListResponse{Header: c.s.Header(c.s.Store().ReadableRev()), Members: c.members()}, nil
}

func (c *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, errMembership
}

func (c *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	_, id := c.s.IDs()
	if r.ID != id {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return nil, errMembership
}

func (c *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	_, id := c.s.IDs()
	if r.ID != id {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return nil, errMembership
}

func (c *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	_, id := c.s.IDs()
	if r.ID != id {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return nil, rpctypes.ErrGRPCMemberNotLearner
}
