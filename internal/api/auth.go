package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/server"
)

// dyad does not implement etcd's user/role authentication; client identity
// is established with TLS client certificates (--client-cert-auth). The
// Auth service therefore answers as an etcd whose auth is disabled and has
// no users or roles.
var errAuthUnsupported = status.Error(codes.FailedPrecondition, "dyad: user/role authentication is not supported; use client certificates (--client-cert-auth)")

type authServer struct {
	s *server.Server
}

func (a *authServer) hdr() *pb.ResponseHeader { return a.s.Header(a.s.Store().ReadableRev()) }

func (a *authServer) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return nil, errAuthUnsupported
}

func (a *authServer) AuthDisable(context.Context, *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return &pb.AuthDisableResponse{Header: a.hdr()}, nil
}

func (a *authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: a.hdr(), Enabled: false}, nil
}

func (a *authServer) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, rpctypes.ErrGRPCAuthNotEnabled
}

func (a *authServer) UserAdd(context.Context, *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	return nil, errAuthUnsupported
}

func (a *authServer) UserGet(context.Context, *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	return nil, rpctypes.ErrGRPCUserNotFound
}

func (a *authServer) UserList(context.Context, *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return &pb.AuthUserListResponse{Header: a.hdr()}, nil
}

func (a *authServer) UserDelete(context.Context, *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return nil, rpctypes.ErrGRPCUserNotFound
}

func (a *authServer) UserChangePassword(context.Context, *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	return nil, rpctypes.ErrGRPCUserNotFound
}

func (a *authServer) UserGrantRole(context.Context, *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return nil, rpctypes.ErrGRPCUserNotFound
}

func (a *authServer) UserRevokeRole(context.Context, *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return nil, rpctypes.ErrGRPCUserNotFound
}

func (a *authServer) RoleAdd(context.Context, *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return nil, errAuthUnsupported
}

func (a *authServer) RoleGet(context.Context, *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	return nil, rpctypes.ErrGRPCRoleNotFound
}

func (a *authServer) RoleList(context.Context, *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return &pb.AuthRoleListResponse{Header: a.hdr()}, nil
}

func (a *authServer) RoleDelete(context.Context, *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return nil, rpctypes.ErrGRPCRoleNotFound
}

func (a *authServer) RoleGrantPermission(context.Context, *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return nil, rpctypes.ErrGRPCRoleNotFound
}

func (a *authServer) RoleRevokePermission(context.Context, *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return nil, rpctypes.ErrGRPCRoleNotFound
}
