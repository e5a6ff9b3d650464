package auth

import (
	"bytes"
	"sort"
	"sync"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/crypto/bcrypt"

	"github.com/dyad-db/dyad/internal/storage"
)

const rootRole = "root"

var keyAuthRevision = []byte("authRevision")

// Store holds users and roles. Safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	users map[string]*authpb.User
	roles map[string]*authpb.Role
	rev   uint64
}

// New returns an empty store.
func New() *Store {
	return &Store{users: map[string]*authpb.User{}, roles: map[string]*authpb.Role{}}
}

// Load reads the records from tx, replacing what the store held.
func (s *Store) Load(tx storage.ReadTx) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users, s.roles = map[string]*authpb.User{}, map[string]*authpb.Role{}
	s.rev = storage.Uint64(tx.Get(storage.BucketAuth, keyAuthRevision))
	if err := tx.Scan(storage.BucketAuthUsers, nil, nil, func(k, v []byte) (bool, error) {
		u := &authpb.User{}
		if err := u.Unmarshal(v); err != nil {
			return false, err
		}
		s.users[string(u.Name)] = u
		return true, nil
	}); err != nil {
		return err
	}
	return tx.Scan(storage.BucketAuthRoles, nil, nil, func(k, v []byte) (bool, error) {
		r := &authpb.Role{}
		if err := r.Unmarshal(v); err != nil {
			return false, err
		}
		s.roles[string(r.Name)] = r
		return true, nil
	})
}

// Hash prepares a UserAdd or UserChangePassword for the log: the password is
// replaced by its bcrypt hash, as etcd does before proposing.
func Hash(password string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	return string(h), err
}

// Revision is the auth revision (bumped by every change).
func (s *Store) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// UserGet answers a read.
func (s *Store) UserGet(name string) (*pb.AuthUserGetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[name]
	if !ok {
		return nil, rpctypes.ErrGRPCUserNotFound
	}
	return &pb.AuthUserGetResponse{Roles: append([]string(nil), u.Roles...)}, nil
}

// UserList lists user names, sorted.
func (s *Store) UserList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedNames(s.users)
}

// RoleGet answers a read.
func (s *Store) RoleGet(name string) (*pb.AuthRoleGetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.roles[name]
	if !ok {
		return nil, rpctypes.ErrGRPCRoleNotFound
	}
	return &pb.AuthRoleGetResponse{Perm: r.KeyPermission}, nil
}

// RoleList lists role names, sorted.
func (s *Store) RoleList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedNames(s.roles)
}

func sortedNames[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Apply applies an auth entry. It returns the response (without header), a
// request error, or a storage error.
func (s *Store) Apply(tx storage.WriteTx, r *pb.InternalRaftRequest) (any, error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var resp any
	var rerr error
	switch {
	case r.AuthUserAdd != nil:
		resp, rerr = s.userAdd(r.AuthUserAdd)
	case r.AuthUserDelete != nil:
		if _, ok := s.users[r.AuthUserDelete.Name]; !ok {
			rerr = rpctypes.ErrGRPCUserNotFound
			break
		}
		delete(s.users, r.AuthUserDelete.Name)
		resp = &pb.AuthUserDeleteResponse{}
		if err := tx.Delete(storage.BucketAuthUsers, []byte(r.AuthUserDelete.Name)); err != nil {
			return nil, nil, err
		}
		return s.bump(tx, resp, nil)
	case r.AuthUserChangePassword != nil:
		u, ok := s.users[r.AuthUserChangePassword.Name]
		if !ok {
			rerr = rpctypes.ErrGRPCUserNotFound
			break
		}
		u.Password = []byte(r.AuthUserChangePassword.HashedPassword)
		resp = &pb.AuthUserChangePasswordResponse{}
	case r.AuthUserGrantRole != nil:
		g := r.AuthUserGrantRole
		u, ok := s.users[g.User]
		if !ok {
			rerr = rpctypes.ErrGRPCUserNotFound
			break
		}
		if _, ok := s.roles[g.Role]; !ok && g.Role != rootRole {
			rerr = rpctypes.ErrGRPCRoleNotFound
			break
		}
		i := sort.SearchStrings(u.Roles, g.Role)
		if i < len(u.Roles) && u.Roles[i] == g.Role {
			resp = &pb.AuthUserGrantRoleResponse{} // already granted: etcd ignores it
			break
		}
		u.Roles = append(u.Roles[:i], append([]string{g.Role}, u.Roles[i:]...)...)
		resp = &pb.AuthUserGrantRoleResponse{}
	case r.AuthUserRevokeRole != nil:
		g := r.AuthUserRevokeRole
		u, ok := s.users[g.Name]
		if !ok {
			rerr = rpctypes.ErrGRPCUserNotFound
			break
		}
		i := sort.SearchStrings(u.Roles, g.Role)
		if i >= len(u.Roles) || u.Roles[i] != g.Role {
			rerr = rpctypes.ErrGRPCRoleNotGranted
			break
		}
		u.Roles = append(u.Roles[:i], u.Roles[i+1:]...)
		resp = &pb.AuthUserRevokeRoleResponse{}
	case r.AuthRoleAdd != nil:
		name := r.AuthRoleAdd.Name
		if name == "" {
			rerr = rpctypes.ErrGRPCRoleEmpty
			break
		}
		if _, ok := s.roles[name]; ok {
			rerr = rpctypes.ErrGRPCRoleAlreadyExist
			break
		}
		s.roles[name] = &authpb.Role{Name: []byte(name)}
		resp = &pb.AuthRoleAddResponse{}
		return s.bump(tx, resp, s.putRole(tx, s.roles[name]))
	case r.AuthRoleDelete != nil:
		name := r.AuthRoleDelete.Role
		if _, ok := s.roles[name]; !ok {
			rerr = rpctypes.ErrGRPCRoleNotFound
			break
		}
		delete(s.roles, name)
		if err := tx.Delete(storage.BucketAuthRoles, []byte(name)); err != nil {
			return nil, nil, err
		}
		// The role is revoked from every user that had it.
		for _, u := range s.users {
			i := sort.SearchStrings(u.Roles, name)
			if i < len(u.Roles) && u.Roles[i] == name {
				u.Roles = append(u.Roles[:i], u.Roles[i+1:]...)
				if err := s.putUser(tx, u); err != nil {
					return nil, nil, err
				}
			}
		}
		return s.bump(tx, &pb.AuthRoleDeleteResponse{}, nil)
	case r.AuthRoleGrantPermission != nil:
		g := r.AuthRoleGrantPermission
		role, ok := s.roles[g.Name]
		if !ok {
			rerr = rpctypes.ErrGRPCRoleNotFound
			break
		}
		if g.Perm == nil {
			rerr = rpctypes.ErrGRPCPermissionNotGiven
			break
		}
		replaced := false
		for _, p := range role.KeyPermission {
			if bytes.Equal(p.Key, g.Perm.Key) && bytes.Equal(p.RangeEnd, g.Perm.RangeEnd) {
				p.PermType = g.Perm.PermType
				replaced = true
			}
		}
		if !replaced {
			role.KeyPermission = append(role.KeyPermission, &authpb.Permission{PermType: g.Perm.PermType, Key: g.Perm.Key, RangeEnd: g.Perm.RangeEnd})
			sort.Slice(role.KeyPermission, func(i, j int) bool {
				return bytes.Compare(role.KeyPermission[i].Key, role.KeyPermission[j].Key) < 0
			})
		}
		return s.bump(tx, &pb.AuthRoleGrantPermissionResponse{}, s.putRole(tx, role))
	case r.AuthRoleRevokePermission != nil:
		g := r.AuthRoleRevokePermission
		role, ok := s.roles[g.Role]
		if !ok {
			rerr = rpctypes.ErrGRPCRoleNotFound
			break
		}
		kept := role.KeyPermission[:0]
		found := false
		for _, p := range role.KeyPermission {
			if bytes.Equal(p.Key, g.Key) && bytes.Equal(p.RangeEnd, g.RangeEnd) {
				found = true
				continue
			}
			kept = append(kept, p)
		}
		if !found {
			rerr = rpctypes.ErrGRPCPermissionNotGranted
			break
		}
		role.KeyPermission = kept
		return s.bump(tx, &pb.AuthRoleRevokePermissionResponse{}, s.putRole(tx, role))
	default:
		return nil, nil, nil
	}
	if rerr != nil {
		return nil, rerr, nil
	}
	// The user changed (add, password, grant, revoke): persist it.
	var name string
	switch {
	case r.AuthUserAdd != nil:
		name = r.AuthUserAdd.Name
	case r.AuthUserChangePassword != nil:
		name = r.AuthUserChangePassword.Name
	case r.AuthUserGrantRole != nil:
		name = r.AuthUserGrantRole.User
	case r.AuthUserRevokeRole != nil:
		name = r.AuthUserRevokeRole.Name
	}
	return s.bump(tx, resp, s.putUser(tx, s.users[name]))
}

func (s *Store) userAdd(r *pb.AuthUserAddRequest) (any, error) {
	if r.Name == "" {
		return nil, rpctypes.ErrGRPCUserEmpty
	}
	if _, ok := s.users[r.Name]; ok {
		return nil, rpctypes.ErrGRPCUserAlreadyExist
	}
	u := &authpb.User{Name: []byte(r.Name), Options: r.Options}
	if r.Options == nil || !r.Options.NoPassword {
		u.Password = []byte(r.HashedPassword)
	}
	s.users[r.Name] = u
	return &pb.AuthUserAddResponse{}, nil
}

func (s *Store) putUser(tx storage.WriteTx, u *authpb.User) error {
	b, err := u.Marshal()
	if err != nil {
		return err
	}
	return tx.Put(storage.BucketAuthUsers, u.Name, b)
}

func (s *Store) putRole(tx storage.WriteTx, r *authpb.Role) error {
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	return tx.Put(storage.BucketAuthRoles, r.Name, b)
}

// bump raises the auth revision after a successful change.
func (s *Store) bump(tx storage.WriteTx, resp any, err error) (any, error, error) {
	if err != nil {
		return nil, nil, err
	}
	s.rev++
	return resp, nil, tx.Put(storage.BucketAuth, keyAuthRevision, storage.PutUint64(s.rev))
}
