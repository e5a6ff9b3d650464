package server

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/lease"
	"github.com/dyad-db/dyad/internal/repl"
)

// LeaseGrant creates a lease, choosing its ID when the request has none.
func (s *Server) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if err := s.checkSpace(64); err != nil {
		return nil, err
	}
	req := *r
	if req.ID == 0 {
		for {
			req.ID = s.leaseID.Next()
			if !s.lessor.Exists(req.ID) {
				break
			}
		}
	}
	if err := s.lessor.CheckGrant(req.ID, req.TTL); err != nil {
		return nil, toGRPC(err)
	}
	resp, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseGrant: &req})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.LeaseGrantResponse)
	s.FillHeader(out.Header)
	return out, nil
}

// LeaseRevoke deletes a lease and its keys.
func (s *Server) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if !s.lessor.Exists(r.ID) {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	resp, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseRevoke: r})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.LeaseRevokeResponse)
	s.FillHeader(out.Header)
	return out, nil
}

// LeaseRenew is one keep-alive. It returns the TTL, or lease.ErrNotFound.
func (s *Server) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	if s.repl != nil && !s.Role().Leads() {
		if s.Role() != repl.RoleReplica {
			return 0, rpctypes.ErrGRPCNoLeader
		}
		// Only the leader times leases: renew there.
		return s.forwardKeepAlive(ctx, id)
	}
	if s.repl != nil && s.Role() == repl.RolePrimary && !s.HasLeader() {
		// Its role lease expired: the replica may be taking over, and
		// would time this lease from its promotion on, unaware of the
		// renewal. Refuse as etcd does without a leader; the client
		// retries and reaches whoever leads.
		return 0, rpctypes.ErrGRPCNoLeader
	}
	return s.lessor.Renew(id)
}

// LeaseTimeToLive reports a lease's remaining time (TTL -1 if none, as
// etcd answers).
func (s *Server) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp := &pb.LeaseTimeToLiveResponse{Header: s.Header(s.store.ReadableRev()), ID: r.ID, TTL: -1}
	le, err := s.lessor.Get(r.ID, r.Keys)
	if err == lease.ErrNotFound {
		return resp, nil
	}
	if err != nil {
		return nil, err
	}
	resp.GrantedTTL = le.TTL
	resp.TTL = int64(math.Ceil(le.Remaining.Seconds()))
	if resp.TTL < 0 {
		resp.TTL = 0
	}
	if r.Keys {
		resp.Keys = le.Keys
	}
	return resp, nil
}

// LeaseLeases lists every lease.
func (s *Server) LeaseLeases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	resp := &pb.LeaseLeasesResponse{Header: s.Header(s.store.ReadableRev())}
	for _, id := range s.lessor.IDs() {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	return resp, nil
}
