package server_test

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// BenchmarkPairTxnConflict measures Kubernetes' GuaranteedUpdate from a
// stale cache on an in-memory pair, called on the node directly (no
// gRPC): If ModRevision(k) == a revision k no longer has, Then Put k 1
// KiB, Else Get k. The compare fails every time, so the txn writes
// nothing; it is sent to the primary and to the replica, by one client.
func BenchmarkPairTxnConflict(b *testing.B) {
	a, r := benchPair(b)
	ctx := context.Background()
	key := []byte("pods/default/pod-00001")
	put, err := a.srv.Put(ctx, &pb.PutRequest{Key: key, Value: make([]byte, 1024)})
	if err != nil {
		b.Fatal(err)
	}
	stale := put.Header.Revision - 1
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_ModRevision{ModRevision: stale}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: make([]byte, 1024)}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
	}
	for _, c := range []struct {
		name string
		n    *node
	}{{"primary", a}, {"replica", r}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				resp, err := c.n.srv.Txn(ctx, txn)
				if err != nil || resp.Succeeded || len(resp.Responses) != 1 {
					b.Fatalf("txn: %v (succeeded %v)", err, resp.GetSucceeded())
				}
			}
		})
	}
}
