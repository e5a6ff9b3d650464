package linearize

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Outcome classifies how an operation ended.
type Outcome int

const (
	// OK: the operation completed and its response is recorded.
	OK Outcome = iota
	// Failed: the error guarantees the operation had no effect; it is
	// dropped from the history as if it had never been issued.
	Failed
	// Unknown: the operation may or may not have taken effect; it is kept
	// with an "unknown" output and a return time at the end of the history.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Classify sorts a clientv3 error into OK, Failed or Unknown. Unknown is the
// safe default: it can hide a violation but never invent one, while Failed
// asserts "this had no effect" and so makes the checker stricter. An error is
// Failed only when it guarantees that nothing was applied:
//
//   - gRPC codes that etcd returns while validating or refusing a request,
//     before it is proposed or applied: InvalidArgument (empty key, request
//     too large, too many txn ops, duplicate key, ...), FailedPrecondition,
//     OutOfRange, NotFound, AlreadyExists, PermissionDenied,
//     Unauthenticated, Unimplemented;
//   - ResourceExhausted with etcd's "database space exceeded" (NOSPACE
//     refuses the write at apply time, leaving the key space untouched) or
//     "too many requests", or gRPC's client-side "trying to send message
//     larger than max" (never sent);
//   - Unavailable "etcdserver: no leader": dyad's contract is that a node
//     without a valid primary rejects the request before doing anything
//     (etcd behaves the same for requests carrying WithRequireLeader);
//   - Unavailable raised by the client before sending: "there is no address
//     available", "there is no connection available", and dial failures
//     ("Error while dialing", "connection refused").
//
// Everything else is Unknown, notably: context deadline exceeded or
// canceled, "etcdserver: request timed out" (and its "possibly due to ..."
// variants), "leader changed", "server stopped", broken transports ("error
// reading from server", "transport is closing"), Internal, Unknown and
// DataLoss.
func Classify(err error) Outcome {
	if err == nil {
		return OK
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Unknown
	}
	var code codes.Code
	var desc string
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code, desc = ee.Code(), ee.Error()
	} else if s, ok := status.FromError(err); ok {
		code, desc = s.Code(), s.Message()
	} else {
		return Unknown
	}
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.NotFound,
		codes.AlreadyExists, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return Failed
	case codes.ResourceExhausted:
		if desc == rpctypes.ErrGRPCNoSpace.Error() || strings.HasSuffix(desc, "mvcc: database space exceeded") ||
			strings.HasSuffix(desc, "etcdserver: too many requests") ||
			strings.Contains(desc, "trying to send message larger than max") {
			return Failed
		}
	case codes.Unavailable:
		if strings.HasSuffix(desc, "etcdserver: no leader") ||
			strings.Contains(desc, "there is no address available") ||
			strings.Contains(desc, "there is no connection available") ||
			strings.Contains(desc, "Error while dialing") ||
			strings.Contains(desc, "connection refused") {
			return Failed
		}
	}
	return Unknown
}

// Recorder collects one history. All methods are safe for concurrent use.
// Timestamps are nanoseconds since NewRecorder on the monotonic clock.
type Recorder struct {
	start time.Time
	init  *State

	mu      sync.Mutex
	ops     []porcupine.Operation // completed with a known result
	unknown []porcupine.Operation // outcome unknown; Return set by Operations
	pending map[*Pending]struct{}
	last    int64 // latest timestamp handed out
	failed  int   // definite failures dropped
	errs    map[string]int
}

// maxErrorKinds bounds the distinct error messages Errors keeps.
const maxErrorKinds = 64

// NewRecorder starts a history whose operations begin from init (nil means
// EmptyState: a fresh store at revision 1).
func NewRecorder(init *State) *Recorder {
	if init == nil {
		init = EmptyState()
	}
	return &Recorder{start: time.Now(), init: init, pending: make(map[*Pending]struct{}), errs: make(map[string]int)}
}

// Pending is an operation that was called and has not returned yet.
type Pending struct {
	r      *Recorder
	client int
	in     Input
	call   int64
}

func (r *Recorder) now() int64 {
	t := time.Since(r.start).Nanoseconds()
	r.mu.Lock()
	if t > r.last {
		r.last = t
	}
	r.mu.Unlock()
	return t
}

// Call records the invocation of in by client (a small non-negative id; the
// visualization draws one row per client). Take it immediately before
// sending the request.
func (r *Recorder) Call(client int, in Input) *Pending {
	p := &Pending{r: r, client: client, in: in}
	p.call = r.now()
	r.mu.Lock()
	r.pending[p] = struct{}{}
	r.mu.Unlock()
	return p
}

// Return records the response. An Output with Unknown set records an
// operation of unknown outcome. Call it immediately after the response
// arrived, and only once.
func (p *Pending) Return(out Output) {
	ret := p.r.now()
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending[p]; !ok {
		panic("linearize: Pending returned twice")
	}
	delete(r.pending, p)
	op := porcupine.Operation{ClientId: p.client, Input: p.in, Call: p.call, Output: out, Return: ret}
	if out.Unknown {
		r.unknown = append(r.unknown, op)
		return
	}
	r.ops = append(r.ops, op)
}

// Fail drops the operation: it failed in a way that guarantees it had no
// effect (see Classify).
func (p *Pending) Fail() {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending[p]; !ok {
		panic("linearize: Pending returned twice")
	}
	delete(r.pending, p)
	r.failed++
}

// Finish records the outcome of a call that returned out and err: OK records
// out, Failed drops it, Unknown records an unknown output. Reads (OpGet, OpRange)
// that did not succeed are dropped either way: they changed nothing.
func (p *Pending) Finish(out Output, err error) Outcome {
	o := Classify(err)
	if err != nil {
		p.r.noteError(p.in.Kind, o, err)
	}
	switch {
	case o == OK:
		p.Return(out)
	case o == Failed || p.in.Kind == OpGet || p.in.Kind == OpRange:
		p.Fail()
	default:
		p.Return(Output{Unknown: true})
	}
	return o
}

func (r *Recorder) noteError(k OpKind, o Outcome, err error) {
	key := fmt.Sprintf("%v %v: %v", k, o, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.errs[key]; ok || len(r.errs) < maxErrorKinds {
		r.errs[key]++
	}
}

// Errors counts the errors passed to Finish (and so to Put, Get, Delete and
// CAS) by "<kind> <outcome>: <message>", for a test's log. At most 64
// distinct messages are kept.
func (r *Recorder) Errors() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.errs))
	for k, v := range r.errs {
		m[k] = v
	}
	return m
}

// Stats counts the operations recorded so far.
type Stats struct {
	OK, Unknown, Failed, Pending int
}

func (s Stats) String() string {
	return fmt.Sprintf("%d ok, %d unknown, %d failed (dropped), %d pending", s.OK, s.Unknown, s.Failed, s.Pending)
}

// Stats returns the current counts.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{OK: len(r.ops), Unknown: len(r.unknown), Failed: r.failed, Pending: len(r.pending)}
}

// Operations returns the history for Check: the InitOperation for the
// recorder's initial state, every completed operation, and every operation
// of unknown outcome — including those still pending, which are in flight
// and so unknown as well — with its return time at the end of the history
// (one past the latest timestamp). Call it after the clients have stopped.
func (r *Recorder) Operations() []porcupine.Operation {
	end := r.now() + 1
	r.mu.Lock()
	defer r.mu.Unlock()
	h := make([]porcupine.Operation, 0, 1+len(r.ops)+len(r.unknown)+len(r.pending))
	h = append(h, InitOperation(r.init))
	h = append(h, r.ops...)
	for _, op := range r.unknown {
		op.Return = end
		h = append(h, op)
	}
	for p := range r.pending {
		h = append(h, porcupine.Operation{ClientId: p.client, Input: p.in, Call: p.call, Output: Output{Unknown: true}, Return: end})
	}
	return h
}

// Put runs cli.Put(key, value) and records it.
func (r *Recorder) Put(ctx context.Context, cli *clientv3.Client, client int, key, value string) (Output, error) {
	p := r.Call(client, Input{Kind: OpPut, Key: key, Value: value})
	resp, err := cli.Put(ctx, key, value)
	var out Output
	if err == nil {
		out.Rev = resp.Header.Revision
	}
	return p.result(out, err)
}

// Get runs a linearizable cli.Get(key) and records it.
func (r *Recorder) Get(ctx context.Context, cli *clientv3.Client, client int, key string) (Output, error) {
	p := r.Call(client, Input{Kind: OpGet, Key: key})
	resp, err := cli.Get(ctx, key)
	var out Output
	if err == nil {
		out.Rev = resp.Header.Revision
		out.Found, out.KV = readKV(resp.Kvs)
	}
	return p.result(out, err)
}

// PutLease runs cli.Put(key, value, WithLease(lease)) and records it.
func (r *Recorder) PutLease(ctx context.Context, cli *clientv3.Client, client int, key, value string, lease clientv3.LeaseID) (Output, error) {
	p := r.Call(client, Input{Kind: OpPutLease, Key: key, Value: value, Lease: int64(lease)})
	resp, err := cli.Put(ctx, key, value, clientv3.WithLease(lease))
	var out Output
	if err == nil {
		out.Rev = resp.Header.Revision
	}
	return p.result(out, err)
}

// Range runs a linearizable cli.Get(prefix, WithPrefix()) and records it.
func (r *Recorder) Range(ctx context.Context, cli *clientv3.Client, client int, prefix string) (Output, error) {
	p := r.Call(client, Input{Kind: OpRange, Key: prefix})
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	var out Output
	if err == nil {
		out.Rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			_, v := readKV([]*mvccpb.KeyValue{kv})
			out.Keys = append(out.Keys, string(kv.Key))
			out.KVs = append(out.KVs, v)
		}
	}
	return p.result(out, err)
}

// Revoke runs cli.Revoke(lease) and records it. "lease not found" is an
// unknown outcome here, not a failure: clientv3 retries LeaseRevoke on its
// own (a repeatable RPC) when the connection breaks, so the attempt that
// found no lease may follow one that revoked it.
func (r *Recorder) Revoke(ctx context.Context, cli *clientv3.Client, client int, lease clientv3.LeaseID) (Output, error) {
	p := r.Call(client, Input{Kind: OpRevoke, Lease: int64(lease)})
	resp, err := cli.Revoke(ctx, lease)
	var out Output
	if err == nil {
		out.Rev = resp.Header.Revision
	}
	if errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) {
		r.noteError(OpRevoke, Unknown, err)
		p.Return(Output{Unknown: true})
		return Output{Unknown: true}, err
	}
	return p.result(out, err)
}

// Delete runs cli.Delete(key) and records it.
func (r *Recorder) Delete(ctx context.Context, cli *clientv3.Client, client int, key string) (Output, error) {
	p := r.Call(client, Input{Kind: OpDelete, Key: key})
	resp, err := cli.Delete(ctx, key)
	var out Output
	if err == nil {
		out.Rev = resp.Header.Revision
		out.Deleted = resp.Deleted
	}
	return p.result(out, err)
}

// CAS runs the apiserver's optimistic-concurrency update and records it:
//
//	Txn(If(ModRevision(key) == modRev)).Then(Put(key, value)).Else(Get(key))
//
// modRev 0 means "create only if absent".
func (r *Recorder) CAS(ctx context.Context, cli *clientv3.Client, client int, key string, modRev int64, value string) (Output, error) {
	p := r.Call(client, Input{Kind: OpCAS, Key: key, Value: value, ModRev: modRev})
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
		Then(clientv3.OpPut(key, value)).
		Else(clientv3.OpGet(key)).
		Commit()
	var out Output
	if err == nil {
		out.Rev = resp.Header.Revision
		out.Succeeded = resp.Succeeded
		if !resp.Succeeded {
			if len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
				// A malformed response is recorded so that it cannot match.
				out.Found, out.KV = true, KV{Value: fmt.Sprintf("<bad else branch: %d responses>", len(resp.Responses))}
			} else {
				out.Found, out.KV = readKV(resp.Responses[0].GetResponseRange().Kvs)
			}
		}
	}
	return p.result(out, err)
}

// readKV converts the Kvs of a single-key range. More than one key is a
// server bug; it is recorded as a value no state can match.
func readKV(kvs []*mvccpb.KeyValue) (bool, KV) {
	switch len(kvs) {
	case 0:
		return false, KV{}
	case 1:
		kv := kvs[0]
		return true, KV{Value: string(kv.Value), CreateRev: kv.CreateRevision, ModRev: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
	}
	return true, KV{Value: fmt.Sprintf("<range of one key returned %d keys>", len(kvs))}
}

// result finishes p and returns out (with Unknown set when the outcome is
// unknown) and err unchanged.
func (p *Pending) result(out Output, err error) (Output, error) {
	if p.Finish(out, err) == Unknown {
		out = Output{Unknown: true}
	}
	return out, err
}

// ReadState reads keys and the current revision in one linearizable Txn, for
// NewRecorder: the state a history over those keys starts from.
func ReadState(ctx context.Context, cli *clientv3.Client, keys ...string) (*State, error) {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(k)
	}
	resp, err := cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	kvs := make(map[string]KV)
	for i, rr := range resp.Responses {
		if found, kv := readKV(rr.GetResponseRange().GetKvs()); found {
			kvs[keys[i]] = kv
		}
	}
	return NewState(resp.Header.Revision, kvs), nil
}
