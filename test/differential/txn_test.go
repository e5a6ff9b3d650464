package differential

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func opPut(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func opPutReq(r *pb.PutRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r}}
}

func opGet(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
}

func opRange(r *pb.RangeRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
}

func opDel(k, end string, prev bool) *pb.RequestOp {
	r := &pb.DeleteRangeRequest{Key: []byte(k), PrevKv: prev}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}
}

func opTxn(t *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
}

func cmpVersion(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_VERSION, Result: r, TargetUnion: &pb.Compare_Version{Version: v}}
}

func cmpCreate(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_CREATE, Result: r, TargetUnion: &pb.Compare_CreateRevision{CreateRevision: v}}
}

func cmpMod(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_MOD, Result: r, TargetUnion: &pb.Compare_ModRevision{ModRevision: v}}
}

func cmpValue(k string, r pb.Compare_CompareResult, v string) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_VALUE, Result: r, TargetUnion: &pb.Compare_Value{Value: []byte(v)}}
}

func cmpLease(k string, r pb.Compare_CompareResult, v int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_LEASE, Result: r, TargetUnion: &pb.Compare_Lease{Lease: v}}
}

func withEnd(c *pb.Compare, end string) *pb.Compare {
	c.RangeEnd = []byte(end)
	return c
}

var results = []pb.Compare_CompareResult{pb.Compare_EQUAL, pb.Compare_GREATER, pb.Compare_LESS, pb.Compare_NOT_EQUAL}

// cmpTxn is a read-only txn whose two branches read different keys, so the
// response shows which branch ran.
func cmpTxn(cs ...*pb.Compare) step {
	name := "txn if"
	for _, c := range cs {
		name += " " + c.String()
	}
	return txnStep(name, &pb.TxnRequest{Compare: cs, Success: []*pb.RequestOp{opGet("then")}, Failure: []*pb.RequestOp{opGet("else")}})
}

// txnSeed: x v2 c2 m3 "20"; y v1 c4 m4 "5"; z "zz" c5 m5 lease 0x200;
// p/1 "a" c6; p/2 "b" c7; then "then" and "else" markers at 8 and 9.
func txnSeed() []step {
	return steps(
		seed("x", "10", "x", "20", "y", "5"),
		[]step{
			grantStep(0x200, 600),
			putStep("", &pb.PutRequest{Key: []byte("z"), Value: []byte("zz"), Lease: 0x200}),
		},
		seed("p/1", "a", "p/2", "b", "then", "T", "else", "E"),
	)
}

func TestTxnCompare(t *testing.T) {
	var each []step
	for _, r := range results {
		for _, v := range []int64{1, 2, 3} {
			each = append(each, cmpTxn(cmpVersion("x", r, v)), cmpTxn(cmpCreate("x", r, v)))
		}
		for _, v := range []int64{2, 3, 4} {
			each = append(each, cmpTxn(cmpMod("x", r, v)))
		}
		for _, v := range []string{"10", "20", "30", "", "2", "200"} {
			each = append(each, cmpTxn(cmpValue("x", r, v)))
		}
		for _, v := range []int64{0x1ff, 0x200, 0x201} {
			each = append(each, cmpTxn(cmpLease("z", r, v)))
		}
		for _, v := range []int64{0, 1} {
			each = append(each, cmpTxn(cmpLease("x", r, v)))
		}
	}
	var missing, ranges []step
	for _, r := range results {
		missing = append(missing,
			cmpTxn(cmpVersion("missing", r, 0)),
			cmpTxn(cmpCreate("missing", r, 0)),
			cmpTxn(cmpMod("missing", r, 1)),
			cmpTxn(cmpLease("missing", r, 0)),
			cmpTxn(cmpValue("missing", r, "")),
			cmpTxn(cmpValue("missing", r, "x")),
		)
		ranges = append(ranges,
			cmpTxn(withEnd(cmpVersion("p/", r, 1), string(prefixEnd("p/")))),
			cmpTxn(withEnd(cmpValue("p/", r, "a"), string(prefixEnd("p/")))),
			cmpTxn(withEnd(cmpMod("p/", r, 7), string(prefixEnd("p/")))),
			cmpTxn(withEnd(cmpCreate("p/", r, 6), string(prefixEnd("p/")))),
			cmpTxn(withEnd(cmpLease("p/", r, 0), string(prefixEnd("p/")))),
			cmpTxn(withEnd(cmpVersion("q/", r, 0), string(prefixEnd("q/")))), // empty range
			cmpTxn(withEnd(cmpValue("q/", r, ""), string(prefixEnd("q/")))),
			cmpTxn(withEnd(cmpMod("x", r, 3), "\x00")), // from-key x: x, y, z
			cmpTxn(withEnd(cmpVersion("\x00", r, 1), "\x00")),
		)
	}
	runScenarios(t, []scenario{
		{"each-target-and-result", steps(txnSeed(), each)},
		{"missing-keys-and-ranges", steps(txnSeed(), missing, ranges, []step{
			txnStep("no compares", &pb.TxnRequest{Success: []*pb.RequestOp{opGet("then")}, Failure: []*pb.RequestOp{opGet("else")}}),
			cmpTxn(cmpVersion("x", pb.Compare_EQUAL, 2), cmpValue("y", pb.Compare_EQUAL, "5")),
			cmpTxn(cmpVersion("x", pb.Compare_EQUAL, 2), cmpValue("y", pb.Compare_EQUAL, "6")),
			txnStep("compare with empty key", &pb.TxnRequest{Compare: []*pb.Compare{cmpVersion("", pb.Compare_EQUAL, 0)}}),
			txnStep("empty txn", &pb.TxnRequest{}),
			getAll(),
		})},
	})
}

func TestTxnWrites(t *testing.T) {
	many := func(n int, prefix string) []*pb.RequestOp {
		var ops []*pb.RequestOp
		for _, k := range keysFmt(prefix, n) {
			ops = append(ops, opPut(k, "v"))
		}
		return ops
	}
	manyCmp := func(n int) []*pb.Compare {
		var cs []*pb.Compare
		for _, k := range keysFmt("c", n) {
			cs = append(cs, cmpVersion(k, pb.Compare_EQUAL, 0))
		}
		return cs
	}
	dup := func(name string, success, failure []*pb.RequestOp) step {
		return txnStep("duplicate keys: "+name, &pb.TxnRequest{Success: success, Failure: failure})
	}
	runScenarios(t, []scenario{
		{"writes-and-nesting", steps(seed("x", "1", "y", "1"), []step{
			txnStep("two puts in one revision", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("a", "1"), opPut("b", "2")}}),
			getAll(),
			txnStep("read own writes", &pb.TxnRequest{
				Compare: []*pb.Compare{cmpVersion("a", pb.Compare_EQUAL, 1)},
				Success: []*pb.RequestOp{
					opPutReq(&pb.PutRequest{Key: []byte("c"), Value: []byte("3"), PrevKv: true}),
					opGet("c"),
					opDel("a", "", true),
					opGet("a"),
					opPutReq(&pb.PutRequest{Key: []byte("b"), Value: []byte("22"), PrevKv: true}),
					opRange(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD, Limit: 2}),
					opRange(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 3}),
				},
			}),
			getAll(),
			txnStep("failed compare, read-only failure branch (no new revision)", &pb.TxnRequest{
				Compare: []*pb.Compare{cmpValue("x", pb.Compare_EQUAL, "nope")},
				Success: []*pb.RequestOp{opPut("x", "2")},
				Failure: []*pb.RequestOp{opGet("x")},
			}),
			txnStep("failed compare, empty failure branch", &pb.TxnRequest{
				Compare: []*pb.Compare{cmpValue("x", pb.Compare_EQUAL, "nope")},
				Success: []*pb.RequestOp{opPut("x", "2")},
			}),
			txnStep("write txn deleting nothing (no new revision)", &pb.TxnRequest{Success: []*pb.RequestOp{opDel("nothing", "", true), opGet("x")}}),
			getAll(),
			txnStep("failure branch writes", &pb.TxnRequest{
				Compare: []*pb.Compare{cmpVersion("x", pb.Compare_GREATER, 5)},
				Success: []*pb.RequestOp{opPut("s", "1")},
				Failure: []*pb.RequestOp{opPut("f", "1"), opDel("y", "", true)},
			}),
			txnStep("nested", &pb.TxnRequest{
				Compare: []*pb.Compare{cmpVersion("f", pb.Compare_EQUAL, 1)},
				Success: []*pb.RequestOp{
					opTxn(&pb.TxnRequest{
						Compare: []*pb.Compare{cmpVersion("missing", pb.Compare_GREATER, 0)},
						Success: []*pb.RequestOp{opPut("n1", "then")},
						Failure: []*pb.RequestOp{opPut("n1", "else"), opTxn(&pb.TxnRequest{
							Success: []*pb.RequestOp{opPut("n2", "deep"), opGet("n1")},
						})},
					}),
					opPut("n3", "outer"),
					opGet("n2"),
				},
			}),
			getAll(),
			txnStep("nested read-only", &pb.TxnRequest{Success: []*pb.RequestOp{opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opGet("n1")}})}}),
			txnStep("put with unknown lease", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("ok", "1"), opPutReq(&pb.PutRequest{Key: []byte("l"), Value: []byte("v"), Lease: 0x404})}}),
			txnStep("put ignore_value on missing key", &pb.TxnRequest{Success: []*pb.RequestOp{opPutReq(&pb.PutRequest{Key: []byte("nope"), IgnoreValue: true})}}),
			txnStep("put ignore_value with value", &pb.TxnRequest{Success: []*pb.RequestOp{opPutReq(&pb.PutRequest{Key: []byte("x"), Value: []byte("v"), IgnoreValue: true})}}),
			txnStep("put empty key", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("", "v")}}),
			txnStep("range empty key", &pb.TxnRequest{Success: []*pb.RequestOp{opGet("")}}),
			txnStep("delete empty key", &pb.TxnRequest{Failure: []*pb.RequestOp{opDel("", "", false)}}),
			txnStep("empty request op", &pb.TxnRequest{Success: []*pb.RequestOp{{}}}),
			txnStep("range at future revision", &pb.TxnRequest{Success: []*pb.RequestOp{opRange(&pb.RangeRequest{Key: []byte("x"), Revision: 1000})}}),
			txnStep("put then range at future revision", &pb.TxnRequest{Success: []*pb.RequestOp{opPut("w", "1"), opRange(&pb.RangeRequest{Key: []byte("x"), Revision: 1000})}}),
			getAll(),
		})},
		{"duplicate-keys", steps(seed("x", "1"), []step{
			dup("put, put", []*pb.RequestOp{opPut("d", "1"), opPut("d", "2")}, nil),
			dup("put, delete", []*pb.RequestOp{opPut("d", "1"), opDel("d", "", false)}, nil),
			dup("delete range, put inside", []*pb.RequestOp{opDel("a", "z", false), opPut("d", "1")}, nil),
			dup("delete, delete (allowed)", []*pb.RequestOp{opDel("d", "", false), opDel("a", "z", false)}, nil),
			dup("put in success and failure (allowed)", []*pb.RequestOp{opPut("d", "1")}, []*pb.RequestOp{opPut("d", "2")}),
			dup("put and nested put", []*pb.RequestOp{opPut("d", "1"), opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("d", "2")}})}, nil),
			dup("put and nested failure put", []*pb.RequestOp{opPut("d", "1"), opTxn(&pb.TxnRequest{Failure: []*pb.RequestOp{opPut("d", "2")}})}, nil),
			dup("nested then/else same key (allowed)", []*pb.RequestOp{opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("d", "1")}, Failure: []*pb.RequestOp{opPut("d", "2")}})}, nil),
			dup("two nested txns same key", []*pb.RequestOp{
				opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("d", "1")}}),
				opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("d", "2")}}),
			}, nil),
			dup("nested delete covers outer put", []*pb.RequestOp{opPut("d", "1"), opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opDel("a", "z", false)}})}, nil),
			dup("outer delete covers nested put", []*pb.RequestOp{opDel("a", "z", false), opTxn(&pb.TxnRequest{Success: []*pb.RequestOp{opPut("d", "1")}})}, nil),
			dup("put and range (allowed)", []*pb.RequestOp{opPut("d", "1"), opGet("d")}, nil),
			dup("duplicate inside failure", nil, []*pb.RequestOp{opPut("e", "1"), opPut("e", "2")}),
			getAll(),
		})},
		{"too-many-ops", steps(seed("x", "1"), []step{
			{"128 puts (the limit)", txnStep("", &pb.TxnRequest{Success: many(128, "k")}).do},
			{"129 puts in success", txnStep("", &pb.TxnRequest{Success: many(129, "m")}).do},
			{"129 puts in failure", txnStep("", &pb.TxnRequest{Failure: many(129, "m")}).do},
			{"129 compares", txnStep("", &pb.TxnRequest{Compare: manyCmp(129)}).do},
			{"128 compares", txnStep("", &pb.TxnRequest{Compare: manyCmp(128), Success: []*pb.RequestOp{opGet("x")}}).do},
			{"100 puts + nested txn of 28 (nested limit is 128-101=27)", txnStep("", &pb.TxnRequest{Success: append(many(100, "n"), opTxn(&pb.TxnRequest{Success: many(28, "o")}))}).do},
			{"100 puts + nested txn of 27", txnStep("", &pb.TxnRequest{Success: append(many(100, "n"), opTxn(&pb.TxnRequest{Success: many(27, "o")}))}).do},
			rangeStep("count all", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true}),
			rangeStep("o prefix", &pb.RangeRequest{Key: []byte("o"), RangeEnd: prefixEnd("o"), KeysOnly: true, Limit: 3}),
			{fmt.Sprintf("watch the 128-put revision (rev %d)", 3), watchStep("", func(w *watchSession) {
				w.create(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: prefixEnd("k"), StartRevision: 3})
				w.expect("128 events", untilEvents(128))
			}).do},
		})},
	})
}
