package differential

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// watchSeed: 12 events over revisions 2..10.
//
//	2 put a   3 put b   4 put a   5 del a
//	6 txn: put c, put d, del b     7 put e (lease)   8 put f (lease)
//	9 revoke: del e, del f         10 put a
func watchSeed() []step {
	return []step{
		putStep("", &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}),
		putStep("", &pb.PutRequest{Key: []byte("b"), Value: []byte("1")}),
		putStep("", &pb.PutRequest{Key: []byte("a"), Value: []byte("2")}),
		delStep("", &pb.DeleteRangeRequest{Key: []byte("a")}),
		txnStep("txn put c, put d, del b", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("c", "1"), opPut("d", "1"), opDel("b", "", false)}}),
		grantStep(0x300, 600),
		putStep("", &pb.PutRequest{Key: []byte("e"), Value: []byte("1"), Lease: 0x300}),
		putStep("", &pb.PutRequest{Key: []byte("f"), Value: []byte("1"), Lease: 0x300}),
		revokeStep(fixedLease(0x300)),
		putStep("", &pb.PutRequest{Key: []byte("a"), Value: []byte("3")}),
	}
}

func replay(name string, c *pb.WatchCreateRequest, events int) step {
	return watchStep(name, func(w *watchSession) {
		w.create(c)
		if events == 0 {
			w.expect("created", untilResponses(1))
			return
		}
		w.expect("events", untilEvents(events))
	})
}

func putNote(w *watchSession, key, val string) {
	resp, err := w.s.kv.Put(w.ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(val)})
	w.note("put "+key+"="+val, render(w.s, resp, err))
}

func TestWatch(t *testing.T) {
	allKeys := func(rev int64) *pb.WatchCreateRequest {
		return &pb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: rev}
	}
	with := func(c *pb.WatchCreateRequest, f func(c *pb.WatchCreateRequest)) *pb.WatchCreateRequest {
		f(c)
		return c
	}
	noPut := pb.WatchCreateRequest_NOPUT
	noDelete := pb.WatchCreateRequest_NODELETE
	runScenarios(t, []scenario{
		{"history", steps(watchSeed(), []step{
			replay("all from 1", allKeys(1), 12),
			replay("all from 1 prev_kv", with(allKeys(1), func(c *pb.WatchCreateRequest) { c.PrevKv = true }), 12),
			replay("all from 1 NOPUT", with(allKeys(1), func(c *pb.WatchCreateRequest) { c.Filters = []pb.WatchCreateRequest_FilterType{noPut} }), 4),
			replay("all from 1 NODELETE prev_kv", with(allKeys(1), func(c *pb.WatchCreateRequest) {
				c.Filters, c.PrevKv = []pb.WatchCreateRequest_FilterType{noDelete}, true
			}), 8),
			replay("all from 1 NOPUT+NODELETE", with(allKeys(1), func(c *pb.WatchCreateRequest) {
				c.Filters = []pb.WatchCreateRequest_FilterType{noPut, noDelete}
			}), 0),
			replay("key a from 2 prev_kv", &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 2, PrevKv: true}, 4),
			replay("[c, e) from 1", &pb.WatchCreateRequest{Key: []byte("c"), RangeEnd: []byte("e"), StartRevision: 1}, 2),
			replay("from-key d from 1", &pb.WatchCreateRequest{Key: []byte("d"), RangeEnd: []byte{0}, StartRevision: 1}, 5),
			replay("all from 6", allKeys(6), 8),
			replay("all from 10 (current)", allKeys(10), 1),
			replay("missing key from 1", &pb.WatchCreateRequest{Key: []byte("zz"), StartRevision: 1}, 0),
		})},
		{"live", steps(watchSeed(), []step{
			watchStep("from now, prev_kv, then put and delete", func(w *watchSession) {
				w.create(&pb.WatchCreateRequest{Key: []byte("g"), PrevKv: true})
				w.expect("created", untilResponses(1))
				putNote(w, "g", "1")
				w.expect("put event", untilEvents(1))
				resp, err := w.s.kv.DeleteRange(w.ctx, &pb.DeleteRangeRequest{Key: []byte("g")})
				w.note("delete g", render(w.s, resp, err))
				w.expect("delete event", untilEvents(1))
			}),
			watchStep("from next revision", func(w *watchSession) {
				w.create(allKeys(13))
				w.expect("created", untilResponses(1))
				putNote(w, "h", "1")
				w.expect("event", untilEvents(1))
			}),
			watchStep("from a far future revision", func(w *watchSession) {
				w.create(allKeys(100))
				w.expect("created", untilResponses(1))
				putNote(w, "i", "1")
			}),
			watchStep("several watches on one stream, chosen IDs, cancel, progress", func(w *watchSession) {
				w.create(&pb.WatchCreateRequest{Key: []byte("m1")})
				w.expect("created m1", untilResponses(1))
				w.create(&pb.WatchCreateRequest{Key: []byte("m2"), WatchId: 7})
				w.expect("created m2 as 7", untilResponses(1))
				w.create(&pb.WatchCreateRequest{Key: []byte("m3")})
				w.expect("created m3", untilResponses(1))
				w.create(&pb.WatchCreateRequest{Key: []byte("m4"), WatchId: 7})
				w.expect("duplicate watch ID 7", untilResponses(1))
				w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 7}}})
				w.expect("canceled 7", untilResponses(1))
				w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 42}}})
				w.expectNothing("cancel of unknown ID 42")
				w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
				w.expect("progress", untilResponses(1))
				putNote(w, "m1", "1")
				w.expect("m1 event", untilEvents(1))
				putNote(w, "m2", "1")
				putNote(w, "m3", "1")
				w.expect("m3 event", untilEvents(1))
			}),
			watchStep("progress request on a stream without watchers (etcd answers nothing)", func(w *watchSession) {
				w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
				w.expectNothing("progress")
			}),
			watchStep("empty key", func(w *watchSession) {
				w.create(&pb.WatchCreateRequest{})
				w.expect("answer", untilResponses(1))
			}),
		})},
		{"compacted-at-a-tombstone", steps(
			seed("a", "1", "b", "1"),
			[]step{
				delStep("", &pb.DeleteRangeRequest{Key: []byte("a")}), // rev 4
				compactStep(4, true),
				replay("all from 4 (the tombstone is at the compaction revision)", allKeys(4), 1),
				replay("key a from 4 prev_kv", &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 4, PrevKv: true}, 1),
				rangeStep("a at rev 4", &pb.RangeRequest{Key: []byte("a"), Revision: 4}),
				hashKVStep(0),
				putStep("", &pb.PutRequest{Key: []byte("a"), Value: []byte("2")}),
				compactStep(5, true),
				replay("all from 5", allKeys(5), 1),
				hashKVStep(0),
			},
		)},
		{"compacted", steps(
			seed("a", "1", "a", "2", "b", "1", "a", "3"),
			[]step{delStep("", &pb.DeleteRangeRequest{Key: []byte("b")})},
			seed("c", "1"),
			[]step{
				compactStep(5, true),
				watchStep("all from 1 (compacted), wait for cancel", func(w *watchSession) {
					w.create(allKeys(1))
					w.expect("canceled", untilCanceled)
				}),
				watchStep("all from 4 (compacted), wait for cancel", func(w *watchSession) {
					w.create(allKeys(4))
					w.expect("canceled", untilCanceled)
				}),
				watchStep("key b from 2 prev_kv (compacted)", func(w *watchSession) {
					w.create(&pb.WatchCreateRequest{Key: []byte("b"), StartRevision: 2, PrevKv: true})
					w.expect("canceled", untilCanceled)
				}),
				replay("all from 5 (the compaction revision) prev_kv", with(allKeys(5), func(c *pb.WatchCreateRequest) { c.PrevKv = true }), 3),
				replay("all from 6 prev_kv", with(allKeys(6), func(c *pb.WatchCreateRequest) { c.PrevKv = true }), 2),
				compactStep(7, true),
				watchStep("all from 6 after compacting 7", func(w *watchSession) {
					w.create(allKeys(6))
					w.expect("canceled", untilCanceled)
				}),
				watchStep("from now prev_kv, then overwrite a", func(w *watchSession) {
					w.create(&pb.WatchCreateRequest{Key: []byte("a"), PrevKv: true})
					w.expect("created", untilResponses(1))
					putNote(w, "a", "4")
					w.expect("event", untilEvents(1))
				}),
			},
		)},
	})
}
