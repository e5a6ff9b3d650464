package api

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func put(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
}

func del(k, end string) *pb.RequestOp {
	d := &pb.DeleteRangeRequest{Key: []byte(k)}
	if end != "" {
		d.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}
}

func get(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
}

func txn(then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: then, Failure: els}}}
}

func TestCheckTxn(t *testing.T) {
	many := make([]*pb.RequestOp, 129)
	for i := range many {
		many[i] = get("k")
	}
	tests := []struct {
		name string
		req  *pb.TxnRequest
		want error
	}{
		{"plain", &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), put("b"), get("a")}}, nil},
		{"same key in both branches", &pb.TxnRequest{Success: []*pb.RequestOp{put("a")}, Failure: []*pb.RequestOp{put("a")}}, nil},
		{"duplicate put", &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), put("a")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put inside deleted range", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), put("b")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put after delete-all", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "\x00"), put("zzz")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put outside deleted range", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), put("c")}}, nil},
		{"nested duplicate", &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), txn([]*pb.RequestOp{put("a")}, nil)}}, rpctypes.ErrGRPCDuplicateKey},
		{"nested exclusive branches", &pb.TxnRequest{Success: []*pb.RequestOp{txn([]*pb.RequestOp{put("a")}, []*pb.RequestOp{put("a")})}}, nil},
		{"nested put vs outer delete", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", ""), txn(nil, []*pb.RequestOp{put("a")})}}, rpctypes.ErrGRPCDuplicateKey},
		{"too many ops", &pb.TxnRequest{Success: many}, rpctypes.ErrGRPCTooManyOps},
		{"empty compare key", &pb.TxnRequest{Compare: []*pb.Compare{{}}}, rpctypes.ErrGRPCEmptyKey},
		{"empty op", &pb.TxnRequest{Success: []*pb.RequestOp{{}}}, rpctypes.ErrGRPCKeyNotFound},
		{"empty put key", &pb.TxnRequest{Success: []*pb.RequestOp{put("")}}, rpctypes.ErrGRPCEmptyKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkTxn(tc.req, 128); got != tc.want {
				t.Fatalf("checkTxn = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckSingleRequests(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"range empty key", checkRange(&pb.RangeRequest{}), rpctypes.ErrGRPCEmptyKey},
		{"range bad sort order", checkRange(&pb.RangeRequest{Key: []byte("a"), SortOrder: 9}), rpctypes.ErrGRPCInvalidSortOption},
		{"range bad sort target", checkRange(&pb.RangeRequest{Key: []byte("a"), SortTarget: 9}), rpctypes.ErrGRPCInvalidSortOption},
		{"put ignore value with value", checkPut(&pb.PutRequest{Key: []byte("a"), Value: []byte("x"), IgnoreValue: true}), rpctypes.ErrGRPCValueProvided},
		{"put ignore lease with lease", checkPut(&pb.PutRequest{Key: []byte("a"), Lease: 5, IgnoreLease: true}), rpctypes.ErrGRPCLeaseProvided},
		{"put ok", checkPut(&pb.PutRequest{Key: []byte("a"), Value: []byte("x")}), nil},
		{"delete empty key", checkDelete(&pb.DeleteRangeRequest{}), rpctypes.ErrGRPCEmptyKey},
	}
	for _, tc := range tests {
		if tc.err != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}
