package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/auth"
)

// AuthChange proposes a user/role change (an InternalRaftRequest with one
// Auth* field set). Passwords are hashed here, before the entry is logged.
func (s *Server) AuthChange(ctx context.Context, req *pb.InternalRaftRequest) (any, error) {
	if a := req.AuthUserAdd; a != nil && a.HashedPassword == "" && (a.Options == nil || !a.Options.NoPassword) {
		h, err := auth.Hash(a.Password)
		if err != nil {
			return nil, err
		}
		c := *a
		c.Password, c.HashedPassword = "", h
		req = &pb.InternalRaftRequest{AuthUserAdd: &c}
	}
	if a := req.AuthUserChangePassword; a != nil && a.HashedPassword == "" {
		h, err := auth.Hash(a.Password)
		if err != nil {
			return nil, err
		}
		c := *a
		c.Password, c.HashedPassword = "", h
		req = &pb.InternalRaftRequest{AuthUserChangePassword: &c}
	}
	return s.propose(ctx, req)
}

// Auth is the node's user/role store (reads).
func (s *Server) Auth() *auth.Store { return s.auth }
