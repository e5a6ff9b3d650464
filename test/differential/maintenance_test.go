package differential

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// compactSeed: a 2,3,5; b 4, deleted 6; c 7. Current revision 7.
func compactSeed() []step {
	return steps(
		seed("a", "1", "a", "2", "b", "1", "a", "3"),
		[]step{delStep("", &pb.DeleteRangeRequest{Key: []byte("b")})},
		seed("c", "1"),
	)
}

func TestCompact(t *testing.T) {
	at := func(rev int64) *pb.RangeRequest {
		r := all()
		r.Revision = rev
		return r
	}
	runScenarios(t, []scenario{
		{"compact", steps(compactSeed(), []step{
			compactStep(100, false), // future
			compactStep(8, true),    // future by one
			compactStep(4, true),
			compactStep(4, true), // again
			compactStep(3, false),
			compactStep(0, false),
			compactStep(-1, false),
			getAll(),
			rangeStep("all rev 3 (compacted)", at(3)),
			rangeStep("a rev 1 (compacted)", &pb.RangeRequest{Key: []byte("a"), Revision: 1}),
			rangeStep("all rev 4 (= compaction)", at(4)),
			rangeStep("all rev 5", at(5)),
			rangeStep("all rev 6", at(6)),
			rangeStep("all rev 3 count_only (compacted)", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 3, CountOnly: true}),
			rangeStep("all rev 3 serializable (compacted)", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 3, Serializable: true}),
			txnStep("txn range at compacted revision", &pb.TxnRequest{Success: []*pb.RequestOp{opRange(&pb.RangeRequest{Key: []byte("a"), Revision: 2})}}),
			txnStep("write txn with range at compacted revision", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("z", "1"), opRange(&pb.RangeRequest{Key: []byte("a"), Revision: 2})}}),
			getAll(),
			compactStep(7, true), // current revision; b's tombstone goes
			rangeStep("all rev 6 (compacted)", at(6)),
			rangeStep("all rev 7", at(7)),
			hashKVStep(0),
			putStep("", &pb.PutRequest{Key: []byte("b"), Value: []byte("again"), PrevKv: true}),
			getAll(),
			compactStep(8, false), // not physical
			rangeStep("all rev 7 after non-physical compaction (compacted)", at(7)),
			rangeStep("all rev 8", at(8)),
			compactStep(8, false),
		})},
	})
}

// hashSeed mixes every kind of write: plain puts, overwrites, deletes,
// multi-op txns, leases attached and revoked, empty values, binary keys.
func hashSeed() []step {
	return steps(
		seed("a", "1", "b", "2", "a", "3", "\x00bin\xff", "\x01\x02"),
		[]step{
			putStep("", &pb.PutRequest{Key: []byte("empty"), Value: nil}),
			delStep("", &pb.DeleteRangeRequest{Key: []byte("b")}),
			txnStep("txn", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("t1", "x"), opPut("t2", "y"), opDel("a", "", false)}}),
			grantStep(0x500, 600),
			putStep("", &pb.PutRequest{Key: []byte("l1"), Value: []byte("v"), Lease: 0x500}),
			putStep("", &pb.PutRequest{Key: []byte("l2"), Value: []byte("v"), Lease: 0x500}),
			grantStep(0x501, 600),
			putStep("", &pb.PutRequest{Key: []byte("l3"), Value: []byte("v"), Lease: 0x501}),
			revokeStep(fixedLease(0x500)),
			putStep("", &pb.PutRequest{Key: []byte("t1"), Value: []byte("x2"), PrevKv: true}),
			putStep("", &pb.PutRequest{Key: []byte("l3"), IgnoreValue: true, IgnoreLease: true}),
			delStep("", &pb.DeleteRangeRequest{Key: []byte("t"), RangeEnd: prefixEnd("t")}),
			putStep("", &pb.PutRequest{Key: []byte("a"), Value: []byte("reborn")}),
		},
	)
}

// TestHashKV checks that the same history gives the same HashKV: the hash
// covers the raw "key" bucket (revision keys, marshalled mvccpb.KeyValue
// values), so equal hashes mean byte-identical MVCC history.
func TestHashKV(t *testing.T) {
	runScenarios(t, []scenario{
		{"hashkv", steps(hashSeed(), []step{
			getAll(),
			hashKVStep(0),
			hashKVStep(1),
			hashKVStep(5),
			hashKVStep(9),
			hashKVStep(15),
			hashKVStep(16),
			hashKVStep(17), // future
			compactStep(9, true),
			hashKVStep(0),
			hashKVStep(9),
			hashKVStep(8), // compacted
			hashKVStep(12),
			compactStep(16, true),
			hashKVStep(0),
			hashKVStep(16),
		})},
	})
}
