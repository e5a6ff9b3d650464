package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/server"
)

// dyad keeps users and roles as etcd does but does not enforce them: client
// identity is established with TLS client certificates (--client-cert-auth).
// The Auth service therefore answers as an etcd whose authentication is
// disabled: user and role management works, Authenticate says auth is not
// enabled, and enabling it is refused with a clear message.
var errAuthUnsupported = status.Error(codes.FailedPrecondition,
	"dyad: enabling user/role authentication is not supported; use client certificates (--client-cert-auth)")

type authServer struct {
	s *server.Server
}

func (a *authServer) hdr() *pb.ResponseHeader { return a.s.Header(a.s.Store().ReadableRev()) }

// change proposes a user/role change and returns the typed response with its
// header filled.
func change[T interface{ *R }, R any](a *authServer, ctx context.Context, req *pb.InternalRaftRequest, set func(T, *pb.ResponseHeader)) (T, error) {
	resp, err := a.s.AuthChange(ctx, req)
	if err != nil {
		return nil, err
	}
	out := resp.(T)
	set(out, a.hdr())
	return out, nil
}

func (a *authServer) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return nil, errAuthUnsupported
}

func (a *authServer) AuthDisable(context.Context, *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return &pb.AuthDisableResponse{Header: a.hdr()}, nil
}

func (a *authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: a.hdr(), Enabled: false, AuthRevision: a.s.Auth().Revision()}, nil
}

func (a *authServer) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, rpctypes.ErrGRPCAuthNotEnabled
}

func (a *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthUserAdd: r}, func(o *pb.AuthUserAddResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	resp, err := a.s.Auth().UserGet(r.Name)
	if err != nil {
		return nil, err
	}
	resp.Header = a.hdr()
	return resp, nil
}

func (a *authServer) UserList(context.Context, *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return &pb.AuthUserListResponse{Header: a.hdr(), Users: a.s.Auth().UserList()}, nil
}

func (a *authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthUserDelete: r}, func(o *pb.AuthUserDeleteResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthUserChangePassword: r}, func(o *pb.AuthUserChangePasswordResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthUserGrantRole: r}, func(o *pb.AuthUserGrantRoleResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthUserRevokeRole: r}, func(o *pb.AuthUserRevokeRoleResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthRoleAdd: r}, func(o *pb.AuthRoleAddResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	resp, err := a.s.Auth().RoleGet(r.Role)
	if err != nil {
		return nil, err
	}
	resp.Header = a.hdr()
	return resp, nil
}

func (a *authServer) RoleList(context.Context, *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return &pb.AuthRoleListResponse{Header: a.hdr(), Roles: a.s.Auth().RoleList()}, nil
}

func (a *authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthRoleDelete: r}, func(o *pb.AuthRoleDeleteResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthRoleGrantPermission: r}, func(o *pb.AuthRoleGrantPermissionResponse, h *pb.ResponseHeader) { o.Header = h })
}

func (a *authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return change(a, ctx, &pb.InternalRaftRequest{AuthRoleRevokePermission: r}, func(o *pb.AuthRoleRevokePermissionResponse, h *pb.ResponseHeader) { o.Header = h })
}
