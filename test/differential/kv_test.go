package differential

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// rangeSeed builds a history with several versions, a deletion, equal
// versions and equal values (to expose tie order in sorts) and a key with
// high bytes. Resulting keys (rev = create/mod, ver):
//
//	a     "11"  c2  m5  v2        b/x   "bx"  c6  m6  v1
//	ab    "z"   c8  m8  v1        c     "333" c4  m10 v3
//	b     "2"   c3  m3  v1        e     "bx"  c12 m12 v1
//	"\xfe\xff" "hi" c13 m13 v1    (b/y: put at 7, deleted at 11)
func rangeSeed() []step {
	return steps(
		seed("a", "1", "b", "2", "c", "3", "a", "11", "b/x", "bx", "b/y", "by", "ab", "z", "c", "33", "c", "333"),
		[]step{delStep("", &pb.DeleteRangeRequest{Key: []byte("b/y")})},
		seed("e", "bx", "\xfe\xff", "hi"),
	)
}

func TestRange(t *testing.T) {
	var sorts []step
	orders := []pb.RangeRequest_SortOrder{pb.RangeRequest_NONE, pb.RangeRequest_ASCEND, pb.RangeRequest_DESCEND}
	targets := []pb.RangeRequest_SortTarget{pb.RangeRequest_KEY, pb.RangeRequest_VERSION, pb.RangeRequest_CREATE, pb.RangeRequest_MOD, pb.RangeRequest_VALUE}
	for _, o := range orders {
		for _, tg := range targets {
			r := all()
			r.SortOrder, r.SortTarget = o, tg
			sorts = append(sorts, rangeStep("", r))
			rl := all()
			rl.SortOrder, rl.SortTarget, rl.Limit = o, tg, 3
			sorts = append(sorts, rangeStep("", rl))
		}
	}
	with := func(f func(r *pb.RangeRequest)) *pb.RangeRequest {
		r := all()
		f(r)
		return r
	}
	runScenarios(t, []scenario{
		{"keys-and-ranges", steps(rangeSeed(), []step{
			getKey("a"),
			getKey("zz"),
			getKey("b/y"),
			getKey("\x00"),
			rangeStep("prefix b", &pb.RangeRequest{Key: []byte("b"), RangeEnd: prefixEnd("b")}),
			rangeStep("prefix b/", &pb.RangeRequest{Key: []byte("b/"), RangeEnd: prefixEnd("b/")}),
			rangeStep("prefix \\xfe", &pb.RangeRequest{Key: []byte("\xfe"), RangeEnd: prefixEnd("\xfe")}),
			getAll(),
			rangeStep("from-key b", &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte{0}}),
			rangeStep("[a, c)", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c")}),
			rangeStep("[c, a) (end before key)", &pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte("a")}),
			rangeStep("[a, a) (end equals key)", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("a")}),
			rangeStep("empty key", &pb.RangeRequest{}),
			rangeStep("empty key with range_end \\x00", &pb.RangeRequest{RangeEnd: []byte{0}}),
		})},
		{"limit-count-more", steps(rangeSeed(), []step{
			rangeStep("all limit 1", with(func(r *pb.RangeRequest) { r.Limit = 1 })),
			rangeStep("all limit 2", with(func(r *pb.RangeRequest) { r.Limit = 2 })),
			rangeStep("all limit 7 (= count)", with(func(r *pb.RangeRequest) { r.Limit = 7 })),
			rangeStep("all limit 8 (> count)", with(func(r *pb.RangeRequest) { r.Limit = 8 })),
			rangeStep("all limit -1", with(func(r *pb.RangeRequest) { r.Limit = -1 })),
			rangeStep("prefix b limit 1", &pb.RangeRequest{Key: []byte("b"), RangeEnd: prefixEnd("b"), Limit: 1}),
			rangeStep("keys_only", with(func(r *pb.RangeRequest) { r.KeysOnly = true })),
			rangeStep("keys_only limit 2", with(func(r *pb.RangeRequest) { r.KeysOnly, r.Limit = true, 2 })),
			rangeStep("count_only", with(func(r *pb.RangeRequest) { r.CountOnly = true })),
			rangeStep("count_only limit 1", with(func(r *pb.RangeRequest) { r.CountOnly, r.Limit = true, 1 })),
			rangeStep("count_only keys_only", with(func(r *pb.RangeRequest) { r.CountOnly, r.KeysOnly = true, true })),
			rangeStep("count_only prefix b", &pb.RangeRequest{Key: []byte("b"), RangeEnd: prefixEnd("b"), CountOnly: true}),
			rangeStep("count_only single missing key", &pb.RangeRequest{Key: []byte("zz"), CountOnly: true}),
			rangeStep("serializable", with(func(r *pb.RangeRequest) { r.Serializable = true })),
			rangeStep("serializable rev 5 limit 2", with(func(r *pb.RangeRequest) { r.Serializable, r.Revision, r.Limit = true, 5, 2 })),
		})},
		{"sort", steps(rangeSeed(), sorts)},
		{"revisions", steps(rangeSeed(), []step{
			rangeStep("all rev 1", with(func(r *pb.RangeRequest) { r.Revision = 1 })),
			rangeStep("all rev 4", with(func(r *pb.RangeRequest) { r.Revision = 4 })),
			rangeStep("all rev 7", with(func(r *pb.RangeRequest) { r.Revision = 7 })),
			rangeStep("all rev 10", with(func(r *pb.RangeRequest) { r.Revision = 10 })),
			rangeStep("all rev 11", with(func(r *pb.RangeRequest) { r.Revision = 11 })),
			rangeStep("all rev 13 (current)", with(func(r *pb.RangeRequest) { r.Revision = 13 })),
			rangeStep("all rev 14 (future)", with(func(r *pb.RangeRequest) { r.Revision = 14 })),
			rangeStep("all rev 100 (future)", with(func(r *pb.RangeRequest) { r.Revision = 100 })),
			rangeStep("all rev -1", with(func(r *pb.RangeRequest) { r.Revision = -1 })),
			rangeStep("b/y rev 7", &pb.RangeRequest{Key: []byte("b/y"), Revision: 7}),
			rangeStep("b/y rev 11", &pb.RangeRequest{Key: []byte("b/y"), Revision: 11}),
			rangeStep("c rev 9", &pb.RangeRequest{Key: []byte("c"), Revision: 9}),
			rangeStep("all rev 7 limit 1", with(func(r *pb.RangeRequest) { r.Revision, r.Limit = 7, 1 })),
			rangeStep("all rev 7 count_only", with(func(r *pb.RangeRequest) { r.Revision, r.CountOnly = 7, true })),
			rangeStep("all rev 7 sort mod desc", with(func(r *pb.RangeRequest) {
				r.Revision, r.SortOrder, r.SortTarget = 7, pb.RangeRequest_DESCEND, pb.RangeRequest_MOD
			})),
		})},
		{"mod-create-filters", steps(rangeSeed(), []step{
			rangeStep("min_mod 6", with(func(r *pb.RangeRequest) { r.MinModRevision = 6 })),
			rangeStep("max_mod 8", with(func(r *pb.RangeRequest) { r.MaxModRevision = 8 })),
			rangeStep("min_create 4", with(func(r *pb.RangeRequest) { r.MinCreateRevision = 4 })),
			rangeStep("max_create 6", with(func(r *pb.RangeRequest) { r.MaxCreateRevision = 6 })),
			rangeStep("min_mod 5 max_mod 10", with(func(r *pb.RangeRequest) { r.MinModRevision, r.MaxModRevision = 5, 10 })),
			rangeStep("min_create 3 max_create 8", with(func(r *pb.RangeRequest) { r.MinCreateRevision, r.MaxCreateRevision = 3, 8 })),
			rangeStep("min_mod 6 limit 1", with(func(r *pb.RangeRequest) { r.MinModRevision, r.Limit = 6, 1 })),
			rangeStep("max_create 4 limit 5", with(func(r *pb.RangeRequest) { r.MaxCreateRevision, r.Limit = 4, 5 })),
			rangeStep("min_mod 6 count_only", with(func(r *pb.RangeRequest) { r.MinModRevision, r.CountOnly = 6, true })),
			rangeStep("min_mod 6 keys_only", with(func(r *pb.RangeRequest) { r.MinModRevision, r.KeysOnly = 6, true })),
			rangeStep("min_create 3 sort create desc limit 2", with(func(r *pb.RangeRequest) {
				r.MinCreateRevision, r.SortOrder, r.SortTarget, r.Limit = 3, pb.RangeRequest_DESCEND, pb.RangeRequest_CREATE, 2
			})),
			rangeStep("max_mod 8 rev 7", with(func(r *pb.RangeRequest) { r.MaxModRevision, r.Revision = 8, 7 })),
			rangeStep("min_mod 100 (nothing)", with(func(r *pb.RangeRequest) { r.MinModRevision = 100 })),
			rangeStep("max_mod -1", with(func(r *pb.RangeRequest) { r.MaxModRevision = -1 })),
		})},
	})
}

func TestPut(t *testing.T) {
	big := strings.Repeat("x", 3<<19+1024) // 1.5 MiB + 1 KiB: over --max-request-bytes, under gRPC's limit
	runScenarios(t, []scenario{
		{"put", []step{
			putStep("", &pb.PutRequest{Key: []byte("k1"), Value: []byte("v1")}),
			putStep("", &pb.PutRequest{Key: []byte("k1"), Value: []byte("v2"), PrevKv: true}),
			putStep("", &pb.PutRequest{Key: []byte("k2"), Value: []byte("x"), PrevKv: true}),
			putStep("empty value", &pb.PutRequest{Key: []byte("k2"), PrevKv: true}),
			putStep("binary key", &pb.PutRequest{Key: []byte("\x00\x01\xff"), Value: []byte("\x00")}),
			grantStep(0x100, 600),
			putStep("", &pb.PutRequest{Key: []byte("k3"), Value: []byte("l"), Lease: 0x100, PrevKv: true}),
			getKey("k3"),
			putStep("unknown lease", &pb.PutRequest{Key: []byte("k4"), Value: []byte("v"), Lease: 0x999}),
			putStep("unknown lease on existing key", &pb.PutRequest{Key: []byte("k1"), Value: []byte("v"), Lease: 0x999}),
			putStep("ignore_value (lease dropped since ignore_lease unset)", &pb.PutRequest{Key: []byte("k3"), IgnoreValue: true, PrevKv: true}),
			getKey("k3"),
			putStep("", &pb.PutRequest{Key: []byte("k3"), Value: []byte("v"), Lease: 0x100}),
			putStep("ignore_lease", &pb.PutRequest{Key: []byte("k3"), Value: []byte("new"), IgnoreLease: true, PrevKv: true}),
			getKey("k3"),
			putStep("ignore_value+ignore_lease", &pb.PutRequest{Key: []byte("k3"), IgnoreValue: true, IgnoreLease: true, PrevKv: true}),
			getKey("k3"),
			putStep("ignore_value with new lease", &pb.PutRequest{Key: []byte("k1"), IgnoreValue: true, Lease: 0x100}),
			getKey("k1"),
			putStep("ignore_value on missing key", &pb.PutRequest{Key: []byte("nope"), IgnoreValue: true}),
			putStep("ignore_lease on missing key", &pb.PutRequest{Key: []byte("nope"), Value: []byte("v"), IgnoreLease: true}),
			putStep("ignore_value with a value", &pb.PutRequest{Key: []byte("k1"), Value: []byte("x"), IgnoreValue: true}),
			putStep("ignore_lease with a lease", &pb.PutRequest{Key: []byte("k1"), Value: []byte("x"), Lease: 0x100, IgnoreLease: true}),
			putStep("ignore_value with a value on missing key", &pb.PutRequest{Key: []byte("nope"), Value: []byte("x"), IgnoreValue: true}),
			putStep("empty key", &pb.PutRequest{Value: []byte("v")}),
			putStep("empty key with ignore_value", &pb.PutRequest{IgnoreValue: true}),
			step{"put 1.5 MiB+1 KiB value", putStep("", &pb.PutRequest{Key: []byte("big"), Value: []byte(big)}).do},
			getAll(),
			timeToLiveStep(fixedLease(0x100), true, 600),
			rangeStep("all rev 3", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 3}),
		}},
		{"ignore-value-after-delete", []step{
			putStep("", &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}),
			delStep("", &pb.DeleteRangeRequest{Key: []byte("k")}),
			putStep("ignore_value on deleted key", &pb.PutRequest{Key: []byte("k"), IgnoreValue: true}),
			putStep("ignore_lease on deleted key", &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), IgnoreLease: true}),
			putStep("", &pb.PutRequest{Key: []byte("k"), Value: []byte("again"), PrevKv: true}),
			getAll(),
		}},
	})
}

func TestDeleteRange(t *testing.T) {
	del := func(name, key, end string, prev bool) step {
		r := &pb.DeleteRangeRequest{Key: []byte(key), PrevKv: prev}
		if end != "" {
			r.RangeEnd = []byte(end)
		}
		return delStep(name, r)
	}
	runScenarios(t, []scenario{
		{"delete", steps(seed("a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f/1", "x", "f/2", "y", "g", "7", "a", "1b"), []step{
			del("single a prev_kv", "a", "", true),
			del("missing zz (no-op)", "zz", "", false),
			del("missing zz prev_kv (no-op)", "zz", "", true),
			getAll(),
			putStep("put after no-op deletes gets the next revision", &pb.PutRequest{Key: []byte("h"), Value: []byte("8")}),
			del("[b, d) prev_kv", "b", "d", true),
			del("prefix f/", "f/", string(prefixEnd("f/")), false),
			del("deleted a again (no-op)", "a", "", true),
			del("from-key e", "e", "\x00", true),
			del("[d, b) end before key (no-op)", "d", "b", true),
			del("all prev_kv", "\x00", "\x00", true),
			del("all again (no-op)", "\x00", "\x00", true),
			getAll(),
			putStep("recreate a", &pb.PutRequest{Key: []byte("a"), Value: []byte("new"), PrevKv: true}),
			getAll(),
			rangeStep("all rev 11", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 11}),
			rangeStep("all rev 13", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 13}),
			del("empty key", "", "", false),
			del("empty key with range_end", "", "\x00", false),
			watchStep("replay all events with prev_kv (sub-revision order)", func(w *watchSession) {
				w.create(&pb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: 1, PrevKv: true})
				w.expect("20 events", untilEvents(20))
			}),
		})},
	})
}

// keysFmt returns n distinct keys with a prefix.
func keysFmt(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}
