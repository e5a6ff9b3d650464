package auth

import (
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/storage"
)

func TestApplySequence(t *testing.T) {
	be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	s := New()
	perm := &authpb.Permission{PermType: authpb.READ, Key: []byte("/a"), RangeEnd: []byte("/b")}
	steps := []struct {
		name string
		req  *pb.InternalRaftRequest
		want error
	}{
		{"add user", &pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "alice", HashedPassword: "h"}}, nil},
		{"add user again", &pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "alice"}}, rpctypes.ErrGRPCUserAlreadyExist},
		{"add empty user", &pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{}}, rpctypes.ErrGRPCUserEmpty},
		{"grant missing role", &pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "alice", Role: "r"}}, rpctypes.ErrGRPCRoleNotFound},
		{"add role", &pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "r"}}, nil},
		{"grant role", &pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "alice", Role: "r"}}, nil},
		{"grant perm", &pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "r", Perm: perm}}, nil},
		{"revoke unknown perm", &pb.InternalRaftRequest{AuthRoleRevokePermission: &pb.AuthRoleRevokePermissionRequest{Role: "r", Key: []byte("/z")}}, rpctypes.ErrGRPCPermissionNotGranted},
		{"revoke ungranted role", &pb.InternalRaftRequest{AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "x"}}, rpctypes.ErrGRPCRoleNotGranted},
		{"add bob", &pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "bob", HashedPassword: "h"}}, nil},
		{"delete role", &pb.InternalRaftRequest{AuthRoleDelete: &pb.AuthRoleDeleteRequest{Role: "r"}}, nil},
	}
	for _, st := range steps {
		err := be.Update(func(tx storage.WriteTx) error {
			_, rerr, err := s.Apply(tx, st.req)
			if rerr != st.want {
				t.Errorf("%s: got %v, want %v", st.name, rerr, st.want)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Reload: deleting the role revoked it from alice, both users remain.
	s2 := New()
	if err := be.View(s2.Load); err != nil {
		t.Fatal(err)
	}
	if got := s2.UserList(); len(got) != 2 || got[0] != "alice" || got[1] != "bob" {
		t.Fatalf("users after reload: %v", got)
	}
	u, _ := s2.UserGet("alice")
	if len(u.Roles) != 0 || len(s2.RoleList()) != 0 {
		t.Fatalf("deleted role survives: user roles %v, roles %v", u.Roles, s2.RoleList())
	}
	if s2.Revision() != s.Revision() || s.Revision() != 6 {
		t.Fatalf("auth revision %d (reloaded %d), want 6", s.Revision(), s2.Revision())
	}
}
