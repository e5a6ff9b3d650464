package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/dyad-db/dyad/internal/server"
)

// The RPC fuzz target drives a real in-process node through gRPC with
// requests decoded from fuzzed protobuf bytes. Small limits make the
// too-large and too-many-ops paths reachable from small inputs.
const (
	fuzzMaxRequestBytes = 1024
	fuzzMaxTxnOps       = 8
	// fuzzMinLeaseTTL keeps every fuzzed lease alive for the whole run, so
	// no expiry changes the revision between the checks of one call.
	fuzzMinLeaseTTL = 3600
	// etcd's largest lease TTL (MaxLeaseTTL in etcd's lease package).
	maxLeaseTTL = 9000000000
)

// rpcNode is one in-process node with a client for every service.
type rpcNode struct {
	kv    pb.KVClient
	lease pb.LeaseClient
	watch pb.WatchClient
	mt    pb.MaintenanceClient
	cl    pb.ClusterClient
	auth  pb.AuthClient
	// compacted is the newest revision compacted by the run; calls are
	// serial within one fuzz process, so the target tracks it itself.
	compacted     int64
	compactedOnce bool
}

func startRPCNode(tb testing.TB) *rpcNode {
	tb.Helper()
	cfg := server.Defaults()
	cfg.DataDir = tb.TempDir()
	cfg.MaxRequestBytes = fuzzMaxRequestBytes
	cfg.MaxTxnOps = fuzzMaxTxnOps
	cfg.MinLeaseTTL = fuzzMinLeaseTTL
	// The fuzz target checks the request path, not durability; fsync would
	// only slow it down.
	cfg.UnsafeNoFsync = true
	srv, err := server.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	g, _ := New(srv, Options{MaxRequestBytes: cfg.MaxRequestBytes, MaxTxnOps: cfg.MaxTxnOps})
	l := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); _ = g.Serve(l) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return l.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn.Close()
		cancel()
		g.Stop()
		wg.Wait()
		srv.Close()
	})
	return &rpcNode{
		kv: pb.NewKVClient(conn), lease: pb.NewLeaseClient(conn), watch: pb.NewWatchClient(conn),
		mt: pb.NewMaintenanceClient(conn), cl: pb.NewClusterClient(conn), auth: pb.NewAuthClient(conn),
	}
}

// etcdErrors are etcd's client-visible errors; an error whose message is one
// of these must carry etcd's code for it.
var etcdErrors = []error{
	rpctypes.ErrGRPCEmptyKey, rpctypes.ErrGRPCKeyNotFound, rpctypes.ErrGRPCValueProvided,
	rpctypes.ErrGRPCLeaseProvided, rpctypes.ErrGRPCTooManyOps, rpctypes.ErrGRPCDuplicateKey,
	rpctypes.ErrGRPCInvalidSortOption, rpctypes.ErrGRPCCompacted, rpctypes.ErrGRPCFutureRev,
	rpctypes.ErrGRPCNoSpace, rpctypes.ErrGRPCLeaseNotFound, rpctypes.ErrGRPCLeaseExist,
	rpctypes.ErrGRPCLeaseTTLTooLarge, rpctypes.ErrGRPCWatchCanceled, rpctypes.ErrGRPCMemberExist,
	rpctypes.ErrGRPCPeerURLExist, rpctypes.ErrGRPCMemberNotEnoughStarted, rpctypes.ErrGRPCMemberBadURLs,
	rpctypes.ErrGRPCMemberNotFound, rpctypes.ErrGRPCMemberNotLearner, rpctypes.ErrGRPCLearnerNotReady,
	rpctypes.ErrGRPCTooManyLearners, rpctypes.ErrGRPCClusterIDMismatch, rpctypes.ErrGRPCRequestTooLarge,
	rpctypes.ErrGRPCRequestTooManyRequests, rpctypes.ErrGRPCRootUserNotExist, rpctypes.ErrGRPCRootRoleNotExist,
	rpctypes.ErrGRPCUserAlreadyExist, rpctypes.ErrGRPCUserEmpty, rpctypes.ErrGRPCUserNotFound,
	rpctypes.ErrGRPCRoleAlreadyExist, rpctypes.ErrGRPCRoleNotFound, rpctypes.ErrGRPCRoleEmpty,
	rpctypes.ErrGRPCAuthFailed, rpctypes.ErrGRPCPermissionNotGiven, rpctypes.ErrGRPCPermissionDenied,
	rpctypes.ErrGRPCRoleNotGranted, rpctypes.ErrGRPCPermissionNotGranted, rpctypes.ErrGRPCAuthNotEnabled,
	rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCInvalidAuthMgmt, rpctypes.ErrGRPCAuthOldRevision,
	rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCNotLeader, rpctypes.ErrGRPCLeaderChanged,
	rpctypes.ErrGRPCNotCapable, rpctypes.ErrGRPCStopped, rpctypes.ErrGRPCTimeout,
	rpctypes.ErrGRPCTimeoutDueToLeaderFail, rpctypes.ErrGRPCTimeoutDueToConnectionLost,
	rpctypes.ErrGRPCUnhealthy, rpctypes.ErrGRPCCorrupt, rpctypes.ErrGRPCNotSupportedForLearner,
	rpctypes.ErrGRPCBadLeaderTransferee, rpctypes.ErrGRPCClusterVersionUnavailable,
	rpctypes.ErrGRPCWrongDowngradeVersionFormat, rpctypes.ErrGRPCInvalidDowngradeTargetVersion,
	rpctypes.ErrGRPCDowngradeInProcess, rpctypes.ErrGRPCNoInflightDowngrade,
	rpctypes.ErrGRPCCanceled, rpctypes.ErrGRPCDeadlineExceeded,
}

// etcdUnknown are errors etcd itself answers with code Unknown (it passes
// them through from a library); dyad answers them alike.
var etcdUnknown = map[string]bool{
	// UserAdd/UserChangePassword with a password over 72 bytes (checked
	// against etcd 3.6.16 by hand).
	"bcrypt: password length exceeds 72 bytes": true,
}

// checkStatus fails unless err is nil or a gRPC status with a code a client
// can act on; a message etcd defines must come with etcd's code.
func checkStatus(t *testing.T, op string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%s: error is not a gRPC status: %v", op, err)
	}
	if etcdUnknown[st.Message()] && st.Code() == codes.Unknown {
		return
	}
	switch st.Code() {
	case codes.Unknown, codes.Internal, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		// Validation never needs these: Unknown/Internal hide a bug, and the
		// rest mean the node stopped answering.
		t.Fatalf("%s: error with code %v: %v", op, st.Code(), err)
	}
	for _, e := range etcdErrors {
		want := status.Convert(e)
		if want.Message() == st.Message() {
			if want.Code() != st.Code() {
				t.Fatalf("%s: %q with code %v, etcd uses %v", op, st.Message(), st.Code(), want.Code())
			}
			return
		}
	}
}

// wantErr fails unless err is exactly etcd's want.
func wantErr(t *testing.T, op string, err, want error) {
	t.Helper()
	got, w := status.Convert(err), status.Convert(want)
	if err == nil || got.Code() != w.Code() || got.Message() != w.Message() {
		t.Fatalf("%s: got %v, etcd answers %v", op, err, want)
	}
}

func (n *rpcNode) rev(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	resp, err := n.kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, CountOnly: true})
	if err != nil {
		t.Fatalf("revision probe: %v", err)
	}
	return resp.Header.Revision
}

// rpcKinds names the RPCs the target drives, selected by the kind byte.
var rpcKinds = []string{
	"Range", "Put", "DeleteRange", "Txn", "Compact",
	"LeaseGrant", "LeaseRevoke", "LeaseTimeToLive", "LeaseLeases", "LeaseKeepAlive",
	"Watch", "Alarm", "Status", "HashKV", "Hash", "Defragment", "MoveLeader", "Downgrade",
	"MemberList", "MemberAdd", "MemberRemove", "MemberUpdate", "MemberPromote",
	"UserAdd", "UserGet", "UserDelete", "UserChangePassword", "UserGrantRole", "UserRevokeRole",
	"RoleAdd", "RoleGet", "RoleDelete", "RoleGrantPermission", "RoleRevokePermission",
	"AuthStatus", "Authenticate", "AuthDisable",
}

func kindOf(name string) uint8 {
	for i, k := range rpcKinds {
		if k == name {
			return uint8(i)
		}
	}
	panic("unknown rpc kind " + name)
}

func marshal(m interface{ Marshal() ([]byte, error) }) []byte {
	b, err := m.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

func rpcSeeds() [][2]any {
	put := func(k, v string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
	}
	del := func(k, end string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
	}
	rng := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}}}
	cmp := &pb.Compare{Key: []byte("a"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}}
	return [][2]any{
		{"Range", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, Limit: 2, SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD}},
		{"Range", &pb.RangeRequest{Key: []byte("a"), Revision: 1 << 40}},
		{"Range", &pb.RangeRequest{Key: []byte("\xff\xfe"), RangeEnd: []byte("\xff\xff"), CountOnly: true, MinModRevision: 2}},
		{"Put", &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}},
		{"Put", &pb.PutRequest{Key: []byte("b\xc3\x28"), Value: []byte("v"), Lease: 7, PrevKv: true}},
		{"Put", &pb.PutRequest{Key: []byte("a"), IgnoreValue: true}},
		{"Put", &pb.PutRequest{Key: []byte("big"), Value: bytes.Repeat([]byte("x"), fuzzMaxRequestBytes)}},
		{"DeleteRange", &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), PrevKv: true}},
		{"Txn", &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: []*pb.RequestOp{put("a", "2"), del("x", "y")}, Failure: []*pb.RequestOp{rng}}},
		{"Txn", &pb.TxnRequest{Success: []*pb.RequestOp{put("a", "1"), put("a", "2")}}},
		{"Txn", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{put("n", "1")}}}}}}},
		{"Compact", &pb.CompactionRequest{Revision: 3, Physical: true}},
		{"LeaseGrant", &pb.LeaseGrantRequest{ID: 7, TTL: 60}},
		{"LeaseGrant", &pb.LeaseGrantRequest{TTL: maxLeaseTTL + 1}},
		{"LeaseRevoke", &pb.LeaseRevokeRequest{ID: 7}},
		{"LeaseTimeToLive", &pb.LeaseTimeToLiveRequest{ID: 7, Keys: true}},
		{"LeaseLeases", &pb.LeaseLeasesRequest{}},
		{"LeaseKeepAlive", &pb.LeaseKeepAliveRequest{ID: 7}},
		{"Watch", &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte{0}, StartRevision: 1, PrevKv: true, ProgressNotify: true, Fragment: true}}}},
		{"Watch", &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 3}}}},
		{"Watch", &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}},
		{"Alarm", &pb.AlarmRequest{Action: pb.AlarmRequest_GET}},
		{"Alarm", &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, Alarm: pb.AlarmType_NOSPACE}},
		{"Status", &pb.StatusRequest{}},
		{"HashKV", &pb.HashKVRequest{Revision: 2}},
		{"Hash", &pb.HashRequest{}},
		{"Defragment", &pb.DefragmentRequest{}},
		{"MoveLeader", &pb.MoveLeaderRequest{TargetID: 5}},
		{"Downgrade", &pb.DowngradeRequest{Action: pb.DowngradeRequest_VALIDATE, Version: "3.5"}},
		{"MemberList", &pb.MemberListRequest{Linearizable: true}},
		{"MemberAdd", &pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:2380"}, IsLearner: true}},
		{"MemberRemove", &pb.MemberRemoveRequest{ID: 1}},
		{"MemberUpdate", &pb.MemberUpdateRequest{ID: 1, PeerURLs: []string{"http://x"}}},
		{"MemberPromote", &pb.MemberPromoteRequest{ID: 1}},
		{"UserAdd", &pb.AuthUserAddRequest{Name: "u", Password: "p"}},
		{"UserGet", &pb.AuthUserGetRequest{Name: "u"}},
		{"UserDelete", &pb.AuthUserDeleteRequest{Name: "u"}},
		{"UserChangePassword", &pb.AuthUserChangePasswordRequest{Name: "u", Password: "q"}},
		{"UserGrantRole", &pb.AuthUserGrantRoleRequest{User: "u", Role: "r"}},
		{"UserRevokeRole", &pb.AuthUserRevokeRoleRequest{Name: "u", Role: "r"}},
		{"RoleAdd", &pb.AuthRoleAddRequest{Name: "r"}},
		{"RoleGet", &pb.AuthRoleGetRequest{Role: "r"}},
		{"RoleDelete", &pb.AuthRoleDeleteRequest{Role: "r"}},
		{"RoleGrantPermission", &pb.AuthRoleGrantPermissionRequest{Name: "r"}},
		{"RoleRevokePermission", &pb.AuthRoleRevokePermissionRequest{Role: "r", Key: []byte("a")}},
		{"AuthStatus", &pb.AuthStatusRequest{}},
		{"Authenticate", &pb.AuthenticateRequest{Name: "u", Password: "p"}},
		{"AuthDisable", &pb.AuthDisableRequest{}},
	}
}

// FuzzRPC sends one fuzzed request to the RPC the kind byte selects and
// checks that the node answers it as etcd would: no panic, every error a
// gRPC status (etcd's code and message where etcd defines the case), a
// failed request leaves the store as it was, and a successful write is
// visible in full at the revision it reports.
func FuzzRPC(f *testing.F) {
	for _, s := range rpcSeeds() {
		f.Add(kindOf(s[0].(string)), marshal(s[1].(interface{ Marshal() ([]byte, error) })))
	}
	n := startRPCNode(f)
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		if int(kind) >= len(rpcKinds) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		before := n.rev(t, ctx)
		changed := n.call(t, ctx, rpcKinds[kind], data, before)
		after := n.rev(t, ctx)
		if changed >= 0 && after != before+changed {
			t.Fatalf("%s: revision %d -> %d, want +%d", rpcKinds[kind], before, after, changed)
		}
	})
}

// call runs one RPC and returns by how much it must have moved the revision
// (-1: not known in advance, checked by call itself).
func (n *rpcNode) call(t *testing.T, ctx context.Context, kind string, data []byte, rev int64) int64 {
	type unmarshaler interface{ Unmarshal([]byte) error }
	dec := func(m unmarshaler) bool { return m.Unmarshal(data) == nil }
	switch kind {
	case "Range":
		r := &pb.RangeRequest{}
		if !dec(r) {
			return 0
		}
		resp, err := n.kv.Range(ctx, r)
		checkStatus(t, kind, err)
		checkRangeAnswer(t, n, r, resp, err, rev)
		return 0
	case "Put":
		r := &pb.PutRequest{}
		if !dec(r) {
			return 0
		}
		resp, err := n.kv.Put(ctx, r)
		checkStatus(t, kind, err)
		switch {
		case len(r.Key) == 0:
			wantErr(t, kind, err, rpctypes.ErrGRPCEmptyKey)
		case r.IgnoreValue && len(r.Value) != 0:
			wantErr(t, kind, err, rpctypes.ErrGRPCValueProvided)
		case r.IgnoreLease && r.Lease != 0:
			wantErr(t, kind, err, rpctypes.ErrGRPCLeaseProvided)
		case r.Size() > fuzzMaxRequestBytes:
			wantErr(t, kind, err, rpctypes.ErrGRPCRequestTooLarge)
		}
		if err != nil {
			return 0
		}
		if resp.Header.Revision != rev+1 {
			t.Fatalf("Put: header revision %d, want %d", resp.Header.Revision, rev+1)
		}
		n.checkKey(t, ctx, kind, r.Key, r.Value, !r.IgnoreValue, rev+1)
		return 1
	case "DeleteRange":
		r := &pb.DeleteRangeRequest{}
		if !dec(r) {
			return 0
		}
		resp, err := n.kv.DeleteRange(ctx, r)
		checkStatus(t, kind, err)
		if len(r.Key) == 0 {
			wantErr(t, kind, err, rpctypes.ErrGRPCEmptyKey)
		}
		if err != nil {
			return 0
		}
		if r.PrevKv && int64(len(resp.PrevKvs)) != resp.Deleted {
			t.Fatalf("DeleteRange: %d prev kvs for %d deleted", len(resp.PrevKvs), resp.Deleted)
		}
		n.checkGone(t, ctx, kind, r.Key, r.RangeEnd)
		if resp.Deleted > 0 {
			return 1
		}
		return 0
	case "Txn":
		r := &pb.TxnRequest{}
		if !dec(r) {
			return 0
		}
		resp, err := n.kv.Txn(ctx, r)
		checkStatus(t, kind, err)
		if max(len(r.Compare), len(r.Success), len(r.Failure)) > fuzzMaxTxnOps {
			wantErr(t, kind, err, rpctypes.ErrGRPCTooManyOps)
		}
		if err != nil {
			return 0
		}
		n.checkTxn(t, ctx, r, resp, rev)
		return -1
	case "Compact":
		r := &pb.CompactionRequest{}
		if !dec(r) {
			return 0
		}
		_, err := n.kv.Compact(ctx, r)
		checkStatus(t, kind, err)
		switch {
		case r.Revision > rev:
			wantErr(t, kind, err, rpctypes.ErrGRPCFutureRev)
		case r.Revision < n.compacted || (r.Revision == n.compacted && (r.Revision != 0 || n.compactedOnce)):
			// etcd's compaction point starts at -1: a first compaction
			// at 0 succeeds.
			wantErr(t, kind, err, rpctypes.ErrGRPCCompacted)
		case err != nil:
			t.Fatalf("Compact %d (current %d, compacted %d): %v", r.Revision, rev, n.compacted, err)
		default:
			n.compacted, n.compactedOnce = r.Revision, true
		}
		return 0
	case "LeaseGrant":
		r := &pb.LeaseGrantRequest{}
		if !dec(r) {
			return 0
		}
		resp, err := n.lease.LeaseGrant(ctx, r)
		checkStatus(t, kind, err)
		if r.TTL > maxLeaseTTL {
			wantErr(t, kind, err, rpctypes.ErrGRPCLeaseTTLTooLarge)
		}
		if err == nil && (resp.ID == 0 || (r.ID != 0 && resp.ID != r.ID) || resp.TTL < fuzzMinLeaseTTL) {
			t.Fatalf("LeaseGrant %+v: granted %+v", r, resp)
		}
		return 0
	case "LeaseRevoke":
		r := &pb.LeaseRevokeRequest{}
		if !dec(r) {
			return 0
		}
		// Revoking deletes the lease's keys in one revision when it has any.
		ttl, err := n.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: r.ID, Keys: true})
		if err != nil {
			t.Fatalf("LeaseTimeToLive before revoke: %v", err)
		}
		_, err = n.lease.LeaseRevoke(ctx, r)
		checkStatus(t, kind, err)
		if ttl.TTL == -1 {
			wantErr(t, kind, err, rpctypes.ErrGRPCLeaseNotFound)
			return 0
		}
		if err != nil {
			t.Fatalf("LeaseRevoke of a live lease: %v", err)
		}
		for _, k := range ttl.Keys {
			n.checkGone(t, ctx, kind, k, nil)
		}
		if len(ttl.Keys) > 0 {
			return 1
		}
		return 0
	case "LeaseTimeToLive":
		r := &pb.LeaseTimeToLiveRequest{}
		if dec(r) {
			_, err := n.lease.LeaseTimeToLive(ctx, r)
			checkStatus(t, kind, err)
		}
		return 0
	case "LeaseLeases":
		r := &pb.LeaseLeasesRequest{}
		if dec(r) {
			_, err := n.lease.LeaseLeases(ctx, r)
			checkStatus(t, kind, err)
		}
		return 0
	case "LeaseKeepAlive":
		r := &pb.LeaseKeepAliveRequest{}
		if dec(r) {
			n.keepAlive(t, ctx, r)
		}
		return 0
	case "Watch":
		r := &pb.WatchRequest{}
		if dec(r) {
			n.watchOnce(t, ctx, r)
		}
		return 0
	}
	return n.callOther(t, ctx, kind, data)
}

// callOther runs the Maintenance, Cluster and Auth calls; none of them
// moves the key-value revision.
func (n *rpcNode) callOther(t *testing.T, ctx context.Context, kind string, data []byte) int64 {
	type msg interface{ Unmarshal([]byte) error }
	do := func(r msg, call func() error) int64 {
		if r.Unmarshal(data) != nil {
			return 0
		}
		checkStatus(t, kind, call())
		return 0
	}
	switch kind {
	case "Alarm":
		r := &pb.AlarmRequest{}
		return do(r, func() error { _, err := n.mt.Alarm(ctx, r); return err })
	case "Status":
		r := &pb.StatusRequest{}
		return do(r, func() error { _, err := n.mt.Status(ctx, r); return err })
	case "HashKV":
		r := &pb.HashKVRequest{}
		return do(r, func() error { _, err := n.mt.HashKV(ctx, r); return err })
	case "Hash":
		r := &pb.HashRequest{}
		return do(r, func() error { _, err := n.mt.Hash(ctx, r); return err })
	case "Defragment":
		r := &pb.DefragmentRequest{}
		return do(r, func() error { _, err := n.mt.Defragment(ctx, r); return err })
	case "MoveLeader":
		r := &pb.MoveLeaderRequest{}
		return do(r, func() error { _, err := n.mt.MoveLeader(ctx, r); return err })
	case "Downgrade":
		r := &pb.DowngradeRequest{}
		return do(r, func() error { _, err := n.mt.Downgrade(ctx, r); return err })
	case "MemberList":
		r := &pb.MemberListRequest{}
		return do(r, func() error { _, err := n.cl.MemberList(ctx, r); return err })
	case "MemberAdd":
		r := &pb.MemberAddRequest{}
		return do(r, func() error { _, err := n.cl.MemberAdd(ctx, r); return err })
	case "MemberRemove":
		r := &pb.MemberRemoveRequest{}
		return do(r, func() error { _, err := n.cl.MemberRemove(ctx, r); return err })
	case "MemberUpdate":
		r := &pb.MemberUpdateRequest{}
		return do(r, func() error { _, err := n.cl.MemberUpdate(ctx, r); return err })
	case "MemberPromote":
		r := &pb.MemberPromoteRequest{}
		return do(r, func() error { _, err := n.cl.MemberPromote(ctx, r); return err })
	case "UserAdd":
		r := &pb.AuthUserAddRequest{}
		return do(r, func() error { _, err := n.auth.UserAdd(ctx, r); return err })
	case "UserGet":
		r := &pb.AuthUserGetRequest{}
		return do(r, func() error { _, err := n.auth.UserGet(ctx, r); return err })
	case "UserDelete":
		r := &pb.AuthUserDeleteRequest{}
		return do(r, func() error { _, err := n.auth.UserDelete(ctx, r); return err })
	case "UserChangePassword":
		r := &pb.AuthUserChangePasswordRequest{}
		return do(r, func() error { _, err := n.auth.UserChangePassword(ctx, r); return err })
	case "UserGrantRole":
		r := &pb.AuthUserGrantRoleRequest{}
		return do(r, func() error { _, err := n.auth.UserGrantRole(ctx, r); return err })
	case "UserRevokeRole":
		r := &pb.AuthUserRevokeRoleRequest{}
		return do(r, func() error { _, err := n.auth.UserRevokeRole(ctx, r); return err })
	case "RoleAdd":
		r := &pb.AuthRoleAddRequest{}
		return do(r, func() error { _, err := n.auth.RoleAdd(ctx, r); return err })
	case "RoleGet":
		r := &pb.AuthRoleGetRequest{}
		return do(r, func() error { _, err := n.auth.RoleGet(ctx, r); return err })
	case "RoleDelete":
		r := &pb.AuthRoleDeleteRequest{}
		return do(r, func() error { _, err := n.auth.RoleDelete(ctx, r); return err })
	case "RoleGrantPermission":
		r := &pb.AuthRoleGrantPermissionRequest{}
		return do(r, func() error { _, err := n.auth.RoleGrantPermission(ctx, r); return err })
	case "RoleRevokePermission":
		r := &pb.AuthRoleRevokePermissionRequest{}
		return do(r, func() error { _, err := n.auth.RoleRevokePermission(ctx, r); return err })
	case "AuthStatus":
		r := &pb.AuthStatusRequest{}
		return do(r, func() error { _, err := n.auth.AuthStatus(ctx, r); return err })
	case "Authenticate":
		r := &pb.AuthenticateRequest{}
		return do(r, func() error { _, err := n.auth.Authenticate(ctx, r); return err })
	case "AuthDisable":
		r := &pb.AuthDisableRequest{}
		return do(r, func() error { _, err := n.auth.AuthDisable(ctx, r); return err })
	}
	t.Fatalf("no call for rpc kind %q", kind)
	return 0
}

// checkRangeAnswer checks etcd's answers to a bad range and the shape of a good one.
func checkRangeAnswer(t *testing.T, n *rpcNode, r *pb.RangeRequest, resp *pb.RangeResponse, err error, rev int64) {
	t.Helper()
	switch {
	case len(r.Key) == 0:
		wantErr(t, "Range", err, rpctypes.ErrGRPCEmptyKey)
		return
	case pb.RangeRequest_SortOrder_name[int32(r.SortOrder)] == "" || pb.RangeRequest_SortTarget_name[int32(r.SortTarget)] == "":
		wantErr(t, "Range", err, rpctypes.ErrGRPCInvalidSortOption)
		return
	case r.Revision > rev:
		wantErr(t, "Range", err, rpctypes.ErrGRPCFutureRev)
		return
	case r.Revision > 0 && r.Revision < n.compacted:
		wantErr(t, "Range", err, rpctypes.ErrGRPCCompacted)
		return
	}
	if err != nil {
		t.Fatalf("Range %+v: %v", r, err)
	}
	if resp.Header.Revision != rev {
		t.Fatalf("Range: header revision %d, want %d", resp.Header.Revision, rev)
	}
	if r.CountOnly && len(resp.Kvs) != 0 {
		t.Fatalf("Range count_only returned %d kvs", len(resp.Kvs))
	}
	if r.Limit > 0 && int64(len(resp.Kvs)) > r.Limit {
		t.Fatalf("Range limit %d returned %d kvs", r.Limit, len(resp.Kvs))
	}
	if !r.CountOnly && resp.Count < int64(len(resp.Kvs)) {
		t.Fatalf("Range count %d below %d kvs", resp.Count, len(resp.Kvs))
	}
	// As in etcd, count is taken before the revision filters and more only
	// says that the limit cut the answer.
	filtered := r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
	if resp.More && (r.Limit <= 0 || int64(len(resp.Kvs)) != r.Limit) {
		t.Fatalf("Range more with limit %d and %d kvs", r.Limit, len(resp.Kvs))
	}
	if !filtered && !r.CountOnly && resp.More != (resp.Count > int64(len(resp.Kvs))) {
		t.Fatalf("Range more=%v with count %d and %d kvs", resp.More, resp.Count, len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if r.KeysOnly && len(kv.Value) != 0 {
			t.Fatalf("Range keys_only returned a value for %q", kv.Key)
		}
		atRev := rev
		if r.Revision > 0 {
			atRev = r.Revision
		}
		if kv.ModRevision > atRev || kv.CreateRevision > kv.ModRevision {
			t.Fatalf("Range at %d returned %q created %d modified %d", atRev, kv.Key, kv.CreateRevision, kv.ModRevision)
		}
	}
}

// checkKey checks that key holds value (when checkValue) at modRev.
func (n *rpcNode) checkKey(t *testing.T, ctx context.Context, op string, key, value []byte, checkValue bool, modRev int64) {
	t.Helper()
	got, err := n.kv.Range(ctx, &pb.RangeRequest{Key: key})
	if err != nil {
		t.Fatalf("%s: reading %q back: %v", op, key, err)
	}
	if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != modRev || (checkValue && !bytes.Equal(got.Kvs[0].Value, value)) {
		t.Fatalf("%s: %q reads back as %v, want value %q at revision %d", op, key, got.Kvs, value, modRev)
	}
}

// checkGone checks that nothing is left in [key, end).
func (n *rpcNode) checkGone(t *testing.T, ctx context.Context, op string, key, end []byte) {
	t.Helper()
	got, err := n.kv.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: end, CountOnly: true})
	if err != nil {
		t.Fatalf("%s: reading %q back: %v", op, key, err)
	}
	if got.Count != 0 {
		t.Fatalf("%s: %d keys left in [%q, %q)", op, got.Count, key, end)
	}
}

// checkTxn checks that a successful txn applied its whole branch: every put
// of the taken branch is there at the txn's revision, every delete left its
// range empty, and the revision moved by one exactly when it wrote.
func (n *rpcNode) checkTxn(t *testing.T, ctx context.Context, r *pb.TxnRequest, resp *pb.TxnResponse, rev int64) {
	t.Helper()
	ops := r.Failure
	if resp.Succeeded {
		ops = r.Success
	}
	if len(resp.Responses) != len(ops) {
		t.Fatalf("Txn: %d responses for %d ops", len(resp.Responses), len(ops))
	}
	after := n.rev(t, ctx)
	if after != resp.Header.Revision || after < rev || after > rev+1 {
		t.Fatalf("Txn: revision %d -> %d, header says %d", rev, after, resp.Header.Revision)
	}
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			if after != rev+1 {
				t.Fatalf("Txn: put %q without a new revision", p.Key)
			}
			n.checkKey(t, ctx, "Txn", p.Key, p.Value, !p.IgnoreValue, after)
		}
		if d := op.GetRequestDeleteRange(); d != nil {
			n.checkGone(t, ctx, "Txn", d.Key, d.RangeEnd)
		}
	}
}

// keepAlive sends one keep-alive and checks its answer: the lease it names,
// and TTL 0 for a lease that does not exist.
func (n *rpcNode) keepAlive(t *testing.T, ctx context.Context, r *pb.LeaseKeepAliveRequest) {
	t.Helper()
	ttl, err := n.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: r.ID})
	if err != nil {
		t.Fatalf("LeaseTimeToLive: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := n.lease.LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatalf("LeaseKeepAlive: %v", err)
	}
	if err := st.Send(r); err != nil {
		t.Fatalf("LeaseKeepAlive send: %v", err)
	}
	resp, err := st.Recv()
	checkStatus(t, "LeaseKeepAlive", err)
	if err != nil {
		return
	}
	if resp.ID != r.ID || (ttl.TTL == -1) != (resp.TTL == 0) {
		t.Fatalf("LeaseKeepAlive %d (ttl %d): answered %+v", r.ID, ttl.TTL, resp)
	}
}

// watchOnce sends one fuzzed watch request followed by a marker watch and
// reads until the marker's Created answer (control answers keep their
// order): every answer before it must be well formed, and the stream must
// stay healthy. A progress request with no synced watcher is answered with
// nothing, as in etcd, hence the marker.
func (n *rpcNode) watchOnce(t *testing.T, ctx context.Context, r *pb.WatchRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := n.watch.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := st.Send(r); err != nil {
		t.Fatalf("Watch send: %v", err)
	}
	marker := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("\x00marker")}}}
	if err := st.Send(marker); err != nil {
		t.Fatalf("Watch send marker: %v", err)
	}
	create := r.GetCreateRequest()
	created := 0
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			t.Fatalf("Watch stream ended before the marker was created")
		}
		checkStatus(t, "Watch", err)
		if err != nil {
			return
		}
		if resp.Header == nil {
			t.Fatalf("Watch answer without header: %+v", resp)
		}
		if resp.Canceled && resp.Created && resp.WatchId != -1 {
			t.Fatalf("Watch: failed create with watch id %d", resp.WatchId)
		}
		for _, ev := range resp.Events {
			if ev.Kv == nil || ev.Kv.ModRevision > resp.Header.Revision {
				t.Fatalf("Watch: event %+v past header revision %d", ev, resp.Header.Revision)
			}
		}
		if resp.Created {
			created++
		}
		switch {
		case create == nil && created == 1, create != nil && created == 2:
			if resp.Canceled {
				t.Fatalf("Watch: marker refused: %+v", resp)
			}
			return
		}
	}
}
