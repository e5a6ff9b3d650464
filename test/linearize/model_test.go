package linearize

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// end is the return time of unknown outcomes in the hand-written histories:
// after every other timestamp used below.
const end = 1000

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func kv(val string, create, mod, ver int64) KV {
	return KV{Value: val, CreateRev: create, ModRev: mod, Version: ver}
}

func put(c int, call, ret int64, key, val string, rev int64) porcupine.Operation {
	return op(c, call, ret, Input{Kind: OpPut, Key: key, Value: val}, Output{Rev: rev})
}

func putUnknown(c int, call int64, key, val string) porcupine.Operation {
	return op(c, call, end, Input{Kind: OpPut, Key: key, Value: val}, Output{Unknown: true})
}

func get(c int, call, ret int64, key string, v KV, rev int64) porcupine.Operation {
	return op(c, call, ret, Input{Kind: OpGet, Key: key}, Output{Rev: rev, Found: true, KV: v})
}

func getAbsent(c int, call, ret int64, key string, rev int64) porcupine.Operation {
	return op(c, call, ret, Input{Kind: OpGet, Key: key}, Output{Rev: rev})
}

func del(c int, call, ret int64, key string, deleted, rev int64) porcupine.Operation {
	return op(c, call, ret, Input{Kind: OpDelete, Key: key}, Output{Rev: rev, Deleted: deleted})
}

func delUnknown(c int, call int64, key string) porcupine.Operation {
	return op(c, call, end, Input{Kind: OpDelete, Key: key}, Output{Unknown: true})
}

func casOK(c int, call, ret int64, key string, modRev int64, val string, rev int64) porcupine.Operation {
	return op(c, call, ret, Input{Kind: OpCAS, Key: key, Value: val, ModRev: modRev}, Output{Rev: rev, Succeeded: true})
}

// casFailed: the compare failed; the else branch read cur (absent if nil).
func casFailed(c int, call, ret int64, key string, modRev int64, val string, cur *KV, rev int64) porcupine.Operation {
	out := Output{Rev: rev}
	if cur != nil {
		out.Found, out.KV = true, *cur
	}
	return op(c, call, ret, Input{Kind: OpCAS, Key: key, Value: val, ModRev: modRev}, out)
}

func casUnknown(c int, call int64, key string, modRev int64, val string) porcupine.Operation {
	return op(c, call, end, Input{Kind: OpCAS, Key: key, Value: val, ModRev: modRev}, Output{Unknown: true})
}

func ptr(v KV) *KV { return &v }

func leased(v KV, lease int64) KV { v.Lease = lease; return v }

func putLease(c int, call, ret int64, key, val string, lease, rev int64) porcupine.Operation {
	return op(c, call, ret, Input{Kind: OpPutLease, Key: key, Value: val, Lease: lease}, Output{Rev: rev})
}

func revoke(c int, call, ret int64, lease, rev int64) porcupine.Operation {
	return op(c, call, ret, Input{Kind: OpRevoke, Lease: lease}, Output{Rev: rev})
}

// rng is a range over prefix that returned the key/KV pairs kvs.
func rng(c int, call, ret int64, prefix string, rev int64, kvs ...any) porcupine.Operation {
	out := Output{Rev: rev}
	for i := 0; i+1 < len(kvs); i += 2 {
		out.Keys = append(out.Keys, kvs[i].(string))
		out.KVs = append(out.KVs, kvs[i+1].(KV))
	}
	return op(c, call, ret, Input{Kind: OpRange, Key: prefix}, out)
}

func TestModel(t *testing.T) {
	cases := []struct {
		name string
		init *State // nil: empty store at revision 1
		ops  []porcupine.Operation
		want bool
	}{
		// ---- legal histories ----
		{name: "sequential put get delete", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			get(0, 3, 4, "a", kv("v1", 2, 2, 1), 2),
			put(0, 5, 6, "a", "v2", 3),
			get(0, 7, 8, "a", kv("v2", 2, 3, 2), 3),
			del(0, 9, 10, "a", 1, 4),
			getAbsent(0, 11, 12, "a", 4),
			put(0, 13, 14, "a", "v3", 5),
			get(0, 15, 16, "a", kv("v3", 5, 5, 1), 5), // recreated: new create revision, version 1
		}},
		{name: "delete of nothing keeps the revision", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			del(0, 3, 4, "b", 0, 2),
			get(0, 5, 6, "a", kv("v1", 2, 2, 1), 2),
		}},
		{name: "concurrent puts ordered by their revisions", want: true, ops: []porcupine.Operation{
			put(0, 1, 10, "a", "x", 3), // called first, applied second
			put(1, 2, 9, "a", "y", 2),
			get(2, 11, 12, "a", kv("x", 2, 3, 2), 3),
		}},
		{name: "read concurrent with a write sees old or new", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "old", 2),
			put(1, 3, 10, "a", "new", 3),
			get(2, 4, 5, "a", kv("old", 2, 2, 1), 2),
			get(3, 6, 7, "a", kv("new", 2, 3, 2), 3),
		}},
		{name: "revisions are global across keys", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "1", 2),
			put(1, 3, 4, "b", "2", 3),
			get(0, 5, 6, "a", kv("1", 2, 2, 1), 3),
		}},
		{name: "cas success and stale cas failure", want: true, ops: []porcupine.Operation{
			casOK(0, 1, 2, "a", 0, "created", 2), // create if absent
			casFailed(1, 3, 4, "a", 0, "again", ptr(kv("created", 2, 2, 1)), 2),
			casOK(0, 5, 6, "a", 2, "updated", 3),
			casFailed(1, 7, 8, "a", 2, "stale", ptr(kv("updated", 2, 3, 2)), 3),
		}},
		{name: "concurrent cas on one revision: one wins", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v", 2),
			casOK(1, 3, 6, "a", 2, "x", 3),
			casFailed(2, 4, 7, "a", 2, "y", ptr(kv("x", 2, 3, 2)), 3),
		}},
		{name: "initial state from ReadState", want: true,
			init: NewState(10, map[string]KV{"a": kv("pre", 7, 9, 3)}),
			ops: []porcupine.Operation{
				get(0, 1, 2, "a", kv("pre", 7, 9, 3), 10),
				casOK(0, 3, 4, "a", 9, "post", 11),
				get(0, 5, 6, "a", kv("post", 7, 11, 4), 11),
			}},
		{name: "unknown put that took effect", want: true, ops: []porcupine.Operation{
			putUnknown(0, 1, "a", "maybe"),
			get(1, 5, 6, "a", kv("maybe", 2, 2, 1), 2),
			put(1, 7, 8, "b", "z", 3),
		}},
		{name: "unknown put that did not take effect", want: true, ops: []porcupine.Operation{
			putUnknown(0, 1, "a", "maybe"),
			getAbsent(1, 5, 6, "a", 1),
			put(1, 7, 8, "b", "z", 2),
			getAbsent(1, 9, 10, "a", 2),
		}},
		{name: "unknown put applied after later writes", want: true, ops: []porcupine.Operation{
			putUnknown(0, 1, "a", "late"),
			put(1, 2, 3, "a", "early", 2),
			get(1, 4, 5, "a", kv("early", 2, 2, 1), 2),
			get(1, 6, 7, "a", kv("late", 2, 3, 2), 3),
		}},
		{name: "unknown cas took effect, another did not", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v", 2),
			casUnknown(1, 3, "a", 2, "won"),
			casUnknown(2, 3, "a", 2, "lost"), // compare fails after "won": no effect
			get(0, 10, 11, "a", kv("won", 2, 3, 2), 3),
		}},
		{name: "unknown delete that did and did not take effect", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v", 2),
			put(0, 3, 4, "b", "w", 3),
			delUnknown(1, 5, "a"),
			delUnknown(2, 5, "b"),
			getAbsent(0, 10, 11, "a", 4),
			get(0, 12, 13, "b", kv("w", 3, 3, 1), 4),
		}},

		// ---- violations ----
		{name: "stale read after a completed write", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			put(0, 3, 4, "a", "v2", 3),
			get(1, 5, 6, "a", kv("v1", 2, 2, 1), 2),
		}},
		{name: "stale value under a current header revision", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			put(0, 3, 4, "a", "v2", 3),
			get(1, 5, 6, "a", kv("v1", 2, 2, 1), 3),
		}},
		{name: "header revision runs backwards between reads", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			put(0, 3, 4, "b", "w", 3),
			get(1, 5, 6, "a", kv("v1", 2, 2, 1), 3),
			get(1, 7, 8, "a", kv("v1", 2, 2, 1), 2),
		}},
		{name: "write revision skips", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			put(0, 3, 4, "a", "v2", 4),
		}},
		{name: "two writes share a revision", want: false, ops: []porcupine.Operation{
			put(0, 1, 5, "a", "x", 2),
			put(1, 1, 5, "b", "y", 2),
		}},
		{name: "delete of nothing bumps the revision", want: false, ops: []porcupine.Operation{
			del(0, 1, 2, "a", 0, 2),
		}},
		{name: "lost acknowledged write", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			put(0, 3, 4, "b", "w", 3),
			getAbsent(1, 5, 6, "a", 3),
		}},
		{name: "lost acknowledged delete", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v1", 2),
			del(0, 3, 4, "a", 1, 3),
			get(1, 5, 6, "a", kv("v1", 2, 2, 1), 3),
		}},
		{name: "two cas succeed on the same revision", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v", 2),
			casOK(1, 3, 6, "a", 2, "x", 3),
			casOK(2, 4, 7, "a", 2, "y", 4),
		}},
		{name: "cas fails although the compare held", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v", 2),
			casFailed(1, 3, 4, "a", 2, "x", ptr(kv("v", 2, 2, 1)), 2),
		}},
		{name: "value from nowhere (a dropped failure took effect)", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v", 2),
			get(1, 3, 4, "a", kv("never-written", 2, 3, 2), 3),
		}},
		{name: "wrong version", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "a", "v", 2),
			put(0, 3, 4, "a", "w", 3),
			get(0, 5, 6, "a", kv("w", 2, 3, 1), 3),
		}},
		{name: "unknown write seen, then unseen", want: false, ops: []porcupine.Operation{
			putUnknown(0, 1, "a", "maybe"),
			get(1, 5, 6, "a", kv("maybe", 2, 2, 1), 2),
			getAbsent(1, 7, 8, "a", 2),
		}},
		{name: "unknown write cannot take a revision twice", want: false, ops: []porcupine.Operation{
			putUnknown(0, 1, "a", "maybe"),
			put(1, 2, 3, "b", "x", 2),
			get(1, 4, 5, "a", kv("maybe", 2, 2, 1), 3),
		}},

		// ---- ranges and leases ----
		{name: "range sees every key of the prefix at one revision", want: true, ops: []porcupine.Operation{
			put(0, 1, 2, "p/a", "1", 2),
			put(0, 3, 4, "p/b", "2", 3),
			put(0, 5, 6, "q", "3", 4),
			rng(1, 7, 8, "p/", 4, "p/a", kv("1", 2, 2, 1), "p/b", kv("2", 3, 3, 1)),
		}},
		{name: "range missing a key", want: false, ops: []porcupine.Operation{
			put(0, 1, 2, "p/a", "1", 2),
			put(0, 3, 4, "p/b", "2", 3),
			rng(1, 5, 6, "p/", 3, "p/b", kv("2", 3, 3, 1)),
		}},
		{name: "revoke deletes the lease's keys in one revision", want: true, ops: []porcupine.Operation{
			putLease(0, 1, 2, "a", "1", 7, 2),
			putLease(0, 3, 4, "b", "2", 7, 3),
			put(0, 5, 6, "c", "3", 4),
			revoke(1, 7, 8, 7, 5),
			getAbsent(1, 9, 10, "a", 5),
			get(1, 11, 12, "c", kv("3", 4, 4, 1), 5),
		}},
		{name: "revoke of a lease without keys keeps the revision", want: true, ops: []porcupine.Operation{
			putLease(0, 1, 2, "a", "1", 7, 2),
			put(0, 3, 4, "a", "2", 3), // detaches a from lease 7
			revoke(1, 5, 6, 7, 3),
			get(1, 7, 8, "a", leased(kv("2", 2, 3, 2), 0), 3),
		}},
		{name: "a key survives its lease's revoke", want: false, ops: []porcupine.Operation{
			putLease(0, 1, 2, "a", "1", 7, 2),
			revoke(1, 3, 4, 7, 3),
			get(1, 5, 6, "a", leased(kv("1", 2, 2, 1), 7), 3),
		}},
		{name: "read reports the wrong lease", want: false, ops: []porcupine.Operation{
			putLease(0, 1, 2, "a", "1", 7, 2),
			get(1, 3, 4, "a", kv("1", 2, 2, 1), 2),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ops := tc.ops
			if tc.init != nil {
				ops = append([]porcupine.Operation{InitOperation(tc.init)}, ops...)
			}
			res := porcupine.CheckOperationsTimeout(Model(), ops, 10*time.Second)
			want := porcupine.Illegal
			if tc.want {
				want = porcupine.Ok
			}
			if res != want {
				var b strings.Builder
				for _, o := range ops {
					fmt.Fprintf(&b, "  %s\n", describeOp(o))
				}
				t.Fatalf("check = %s, want %s; history:\n%s", res, want, b.String())
			}
		})
	}
}

// fakeTB captures what Check reports. Methods Check does not use panic via
// the nil embedded interface.
type fakeTB struct {
	testing.TB
	name string
	mu   sync.Mutex
	errs []string
	logs []string
}

func (f *fakeTB) Helper()      {}
func (f *fakeTB) Name() string { return f.name }
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

// vizPath extracts the visualization path from a Check failure message.
func vizPath(t *testing.T, msg string) string {
	t.Helper()
	i := strings.LastIndex(msg, ": ")
	p := strings.TrimSpace(msg[i+2:])
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("visualization %q not written: %v\nmessage: %s", p, err, msg)
	}
	return p
}

func TestCheckReportsIllegalWithVisualization(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envKeepLogs, dir)
	rec := NewRecorder(nil)
	rec.Call(0, Input{Kind: OpPut, Key: "a", Value: "v1"}).Return(Output{Rev: 2})
	rec.Call(0, Input{Kind: OpPut, Key: "a", Value: "v2"}).Return(Output{Rev: 3})
	rec.Call(1, Input{Kind: OpGet, Key: "a"}).Return(Output{Rev: 2, Found: true, KV: kv("v1", 2, 2, 1)})
	ft := &fakeTB{name: "TestX/sub case"}
	if Check(ft, rec.Operations(), 10*time.Second) {
		t.Fatal("Check passed a stale read")
	}
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "NOT linearizable") {
		t.Fatalf("errors = %q", ft.errs)
	}
	msg := ft.errs[0]
	for _, want := range []string{`put(a, "v2") -> rev 3`, `get(a) -> "v1" mod=2`, "state then: rev 3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("explanation lacks %q:\n%s", want, msg)
		}
	}
	p := vizPath(t, msg)
	if filepath.Dir(p) != dir {
		t.Errorf("visualization in %s, want in $%s=%s", p, envKeepLogs, dir)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), "<html") {
		t.Errorf("visualization is not HTML: %.200s", b)
	}
}

// TestCheckTimeoutIsFailure: a check that cannot finish in time must fail.
// The history has many concurrent unknown writes and an impossible read, so
// proving it illegal means exploring every subset of the unknown writes.
func TestCheckTimeoutIsFailure(t *testing.T) {
	t.Setenv(envKeepLogs, t.TempDir())
	var ops []porcupine.Operation
	for i := 0; i < 40; i++ {
		ops = append(ops, putUnknown(i, 1, fmt.Sprintf("k%d", i), "v"))
	}
	ops = append(ops, get(40, 2, 3, "x", kv("impossible", 2, 2, 1), 2))
	ft := &fakeTB{name: "timeout"}
	if Check(ft, ops, 200*time.Millisecond) {
		t.Fatal("Check passed")
	}
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "did not finish within 200ms") {
		t.Fatalf("errors = %q", ft.errs)
	}
	vizPath(t, ft.errs[0])
}

func TestCheckOK(t *testing.T) {
	rec := NewRecorder(nil)
	rec.Call(0, Input{Kind: OpPut, Key: "a", Value: "v1"}).Return(Output{Rev: 2})
	ft := &fakeTB{name: "ok"}
	if !Check(ft, rec.Operations(), time.Minute) || len(ft.errs) != 0 {
		t.Fatalf("Check of a legal history failed: %q", ft.errs)
	}
}

// TestRecorder: concurrent use, unknown outcomes end at the end of the
// history, pending calls count as unknown, definite failures are dropped,
// failed reads are dropped.
func TestRecorder(t *testing.T) {
	rec := NewRecorder(NewState(5, nil))
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Go(func() {
			for i := 0; i < 100; i++ {
				p := rec.Call(c, Input{Kind: OpGet, Key: "a"})
				p.Return(Output{Rev: 5})
			}
		})
	}
	wg.Wait()
	unknown := rec.Call(8, Input{Kind: OpPut, Key: "a", Value: "u"})
	if o := unknown.Finish(Output{}, rpctypes.ErrTimeout); o != Unknown {
		t.Fatalf("request timed out classified %v", o)
	}
	if o := rec.Call(8, Input{Kind: OpPut, Key: "a", Value: "f"}).Finish(Output{}, rpctypes.ErrNoLeader); o != Failed {
		t.Fatalf("no leader classified %v", o)
	}
	if o := rec.Call(8, Input{Kind: OpGet, Key: "a"}).Finish(Output{}, context.DeadlineExceeded); o != Unknown {
		t.Fatalf("deadline classified %v", o)
	}
	rec.Call(9, Input{Kind: OpPut, Key: "a", Value: "inflight"}) // never returns

	st := rec.Stats()
	if st != (Stats{OK: 800, Unknown: 1, Failed: 2, Pending: 1}) {
		t.Fatalf("stats = %v", st)
	}
	ops := rec.Operations()
	if len(ops) != 1+800+2 {
		t.Fatalf("%d operations, want init + 800 + 2 unknown", len(ops))
	}
	if ops[0].Input.(Input).Kind != opInit {
		t.Fatalf("first operation is %v, want init", ops[0].Input)
	}
	var last int64
	for _, o := range ops[1:] {
		if o.Call > o.Return {
			t.Fatalf("operation returns before its call: %+v", o)
		}
		if !o.Output.(Output).Unknown && o.Return > last {
			last = o.Return
		}
	}
	for _, o := range ops[1:] {
		if out := o.Output.(Output); out.Unknown {
			if o.Return <= last {
				t.Fatalf("unknown operation returns at %d, not after the last return %d", o.Return, last)
			}
		}
	}
	if !porcupine.CheckOperations(Model(), ops) {
		t.Fatal("recorded history not linearizable")
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Outcome
	}{
		{nil, OK},
		{context.DeadlineExceeded, Unknown},
		{context.Canceled, Unknown},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), Unknown},
		{rpctypes.ErrTimeout, Unknown},
		{rpctypes.ErrTimeoutDueToLeaderFail, Unknown},
		{rpctypes.ErrTimeoutDueToConnectionLost, Unknown},
		{rpctypes.ErrLeaderChanged, Unknown},
		{rpctypes.ErrStopped, Unknown},
		{rpctypes.ErrGRPCTimeout, Unknown}, // raw status, not yet converted by clientv3
		{status.Error(codes.Unavailable, "error reading from server: EOF"), Unknown},
		{status.Error(codes.Unavailable, "transport is closing"), Unknown},
		{status.Error(codes.Internal, "boom"), Unknown},
		{errors.New("something else"), Unknown},

		{rpctypes.ErrNoLeader, Failed},
		{rpctypes.ErrGRPCNoLeader, Failed},
		{rpctypes.ErrEmptyKey, Failed},
		{rpctypes.ErrRequestTooLarge, Failed},
		{rpctypes.ErrTooManyOps, Failed},
		{rpctypes.ErrNoSpace, Failed},
		{rpctypes.ErrTooManyRequests, Failed},
		{rpctypes.ErrPermissionDenied, Failed},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.1:2379: connect: connection refused"`), Failed},
		{status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (3 vs. 2)"), Failed},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (3 vs. 2)"), Unknown},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
