package differential

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestLease(t *testing.T) {
	const ttl = 600
	l := fixedLease(0x1234)
	auto := namedLease("auto")
	runScenarios(t, []scenario{
		{"grant-revoke-ttl", []step{
			grantStep(0x1234, ttl),
			grantStep(0x1234, ttl), // duplicate ID
			grantStep(0x1234, 30),  // duplicate ID, other TTL
			grantNamedStep("auto", ttl),
			grantStep(0x10, 1), // below the minimum TTL
			revokeStep(fixedLease(0x10)),
			grantStep(0x11, 0),
			revokeStep(fixedLease(0x11)),
			grantStep(0x12, -5),
			revokeStep(fixedLease(0x12)),
			grantStep(0x13, 9000000001), // above MaxLeaseTTL
			grantStep(0x14, 9000000000), // exactly MaxLeaseTTL
			revokeStep(fixedLease(0x14)),
			putLeaseStep("k1", "v1", l),
			putLeaseStep("k2", "v2", l),
			putLeaseStep("k3", "v3", l),
			putLeaseStep("k4", "v4", auto),
			timeToLiveStep(l, true, ttl),
			timeToLiveStep(l, false, ttl),
			timeToLiveStep(auto, true, ttl),
			timeToLiveStep(fixedLease(0x9999), true, ttl),
			timeToLiveStep(fixedLease(0x9999), false, ttl),
			leasesStep(),
			keepAliveStep(l, ttl),
			keepAliveStep(auto, ttl),
			keepAliveStep(fixedLease(0x9999), ttl),
			grantStep(0x20, ttl),
			revokeStep(fixedLease(0x20)), // no keys: no new revision
			getAll(),
			putLeaseStep("k5", "a", l),
			putLeaseStep("k5", "b", auto), // moves k5 to the other lease
			timeToLiveStep(l, true, ttl),
			timeToLiveStep(auto, true, ttl),
			revokeStep(l), // deletes k1 k2 k3 in one revision
			getAll(),
			revokeStep(l),
			timeToLiveStep(l, true, ttl),
			keepAliveStep(l, ttl),
			putLeaseStep("k6", "v", l),
			txnStep("txn put with revoked lease", &pb.TxnRequest{Success: []*pb.RequestOp{opPutReq(&pb.PutRequest{Key: []byte("k6"), Lease: 0x1234})}}),
			leasesStep(),
			revokeStep(auto),
			leasesStep(),
			getAll(),
			watchStep("replay the two revocations with prev_kv", func(w *watchSession) {
				w.create(&pb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: 8, PrevKv: true})
				w.expect("5 events", untilEvents(5))
			}),
			revokeStep(fixedLease(0)),
			timeToLiveStep(fixedLease(0), false, ttl),
		}},
		{"lease-in-txn-and-reattach", []step{
			grantStep(0x40, ttl),
			grantStep(0x41, ttl),
			txnStep("txn puts with two leases", &pb.TxnRequest{Success: []*pb.RequestOp{
				opPutReq(&pb.PutRequest{Key: []byte("a"), Value: []byte("1"), Lease: 0x40}),
				opPutReq(&pb.PutRequest{Key: []byte("b"), Value: []byte("2"), Lease: 0x41}),
				opPutReq(&pb.PutRequest{Key: []byte("c"), Value: []byte("3"), Lease: 0x40}),
			}}),
			cmpTxn(cmpLease("a", pb.Compare_EQUAL, 0x40)),
			putStep("ignore_lease keeps lease", &pb.PutRequest{Key: []byte("a"), Value: []byte("11"), IgnoreLease: true}),
			putStep("put without lease detaches", &pb.PutRequest{Key: []byte("c"), Value: []byte("33")}),
			timeToLiveStep(fixedLease(0x40), true, ttl),
			delStep("delete b detaches it", &pb.DeleteRangeRequest{Key: []byte("b")}),
			timeToLiveStep(fixedLease(0x41), true, ttl),
			revokeStep(fixedLease(0x40)),
			revokeStep(fixedLease(0x41)),
			getAll(),
		}},
	})
}
