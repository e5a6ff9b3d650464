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

// members lists both nodes of a pair, each with its peer and client URLs,
// so that etcdctl's --cluster and clientv3's endpoint sync reach both
// zones. The replica is a voting member, not a learner: it serves every
// RPC (forwarding writes to the primary), and listing it as a learner would
// tell tools that it refuses linearizable reads and needs a promotion that
// dyad has no use for.
func (c *clusterServer) members() []*pb.Member {
	var out []*pb.Member
	for _, m := range c.s.Members() {
		out = append(out, &pb.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs})
	}
	return out
}

// isMember reports whether id is one of the listed members.
func (c *clusterServer) isMember(id uint64) bool {
	for _, m := range c.s.Members() {
		if m.ID == id {
			return true
		}
	}
	return false
}

func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return &pb.MemberListResponse{Header: c.s.Header(c.s.Store().ReadableRev()), Members: c.members()}, nil
}

func (c *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, errMembership
}

func (c *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	if !c.isMember(r.ID) {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return nil, errMembership
}

func (c *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	if !c.isMember(r.ID) {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return nil, errMembership
}

func (c *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	if !c.isMember(r.ID) {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return nil, rpctypes.ErrGRPCMemberNotLearner
}
