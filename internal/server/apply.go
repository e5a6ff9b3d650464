package server

import (
	"bytes"
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/lease"
	"github.com/dyad-db/dyad/internal/mvcc"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

// proposal is one log entry waiting to be applied, and its caller.
type proposal struct {
	req  *pb.InternalRaftRequest
	done chan applyResult // buffered: the applier never blocks on it; nil for forwarded writes
	// origin and reqID identify a write forwarded by the replica (origin
	// 0: this node's own client).
	origin uint64
	reqID  uint64
	// merge, when set, makes this the merge entry after a split brain
	// (req is nil): the store jumps to this revision and compacts there.
	merge int64
}

type applyResult struct {
	resp any
	err  error
	// physical, when set, reports the end of a physical compaction that
	// the caller asked to wait for.
	physical <-chan error
}

// mvccEvent is one watch event produced by applying an entry.
type mvccEvent = mvccpb.Event

// maxBatch bounds one group commit.
const maxBatch = 1024

// propose hands req to the applier (or, on a replica, to the primary) and
// waits for its result.
func (s *Server) propose(ctx context.Context, req *pb.InternalRaftRequest) (any, error) {
	return s.proposeVia(ctx, req, true)
}

// proposeLocal is propose for what only this node's leadership may log
// (lease expiry, decided on this node's timings): it is never forwarded.
func (s *Server) proposeLocal(ctx context.Context, req *pb.InternalRaftRequest) (any, error) {
	return s.proposeVia(ctx, req, false)
}

func (s *Server) proposeVia(ctx context.Context, req *pb.InternalRaftRequest, mayForward bool) (any, error) {
	if err := s.fatalErr(); err != nil {
		return nil, rpctypes.ErrGRPCStopped
	}
	s.m.ProposalsPending.Inc()
	defer s.m.ProposalsPending.Dec()
	var r applyResult
	for try := 0; ; try++ {
		var err error
		if s.repl != nil && !s.Role().Leads() && mayForward {
			s.awaitLeader(ctx)
		}
		if s.repl != nil && !s.Role().Leads() {
			if !mayForward || s.Role() != repl.RoleReplica || !s.HasLeader() {
				return nil, rpctypes.ErrGRPCNoLeader
			}
			r, err = s.forward(ctx, req)
		} else {
			r, err = s.proposeHere(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		// Never applied: the node's role changed first (a hand-over).
		// Go again in the new role.
		if r.err != errRedirect || !mayForward || try == 2 {
			break
		}
	}
	if r.err == errRedirect {
		r.err = rpctypes.ErrGRPCNoLeader
	}
	if r.err != nil {
		s.m.ProposalsFailed.Inc()
		return nil, r.err
	}
	if r.physical != nil {
		select {
		case err := <-r.physical:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctxErr(ctx)
		}
	}
	return r.resp, nil
}

// proposeHere hands req to this node's applier and waits for its result.
func (s *Server) proposeHere(ctx context.Context, req *pb.InternalRaftRequest) (applyResult, error) {
	p := &proposal{req: req, done: make(chan applyResult, 1)}
	select {
	case s.proposals <- p:
	case <-ctx.Done():
		return applyResult{}, ctxErr(ctx)
	case <-s.stopped:
		return applyResult{}, errStopped
	}
	select {
	case r := <-p.done:
		return r, nil
	case <-s.stopped:
		// The entry may or may not have been applied: say so, never guess.
		return applyResult{}, rpctypes.ErrGRPCTimeout
	case <-ctx.Done():
		return applyResult{}, ctxErr(ctx)
	}
}

// awaitLeader waits, while a hand-over from this node is under way, until
// the node leads again or follows a primary whose lease it holds; it
// returns at once otherwise.
func (s *Server) awaitLeader(ctx context.Context) {
	t := time.NewTicker(s.repl.cfg.Lease / 32)
	defer t.Stop()
	for s.handingOver() {
		if role := s.Role(); role.Leads() || role == repl.RoleReplica && s.HasLeader() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.stopped:
			return
		case <-t.C:
		}
	}
}

func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return rpctypes.ErrGRPCTimeout
	}
	return rpctypes.ErrGRPCCanceled
}

func (s *Server) fatalErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// applier is the single writer and, in a pair, the replication loop: it
// takes client proposals while leading, applies entries from the primary
// while following, handles acks and heartbeats, and runs the role rules.
// Heartbeats come from here so that a stuck apply loop stops them.
func (s *Server) applier(ctx context.Context) error {
	defer close(s.stopped)
	var tick <-chan time.Time
	var inbox <-chan *transport.Message
	var handoverc <-chan *handover
	var fenced <-chan error
	var recvReady <-chan struct{} // a batching transport has messages (inbox.go)
	if s.repl != nil {
		t := time.NewTicker(s.repl.cfg.Lease / 8)
		defer t.Stop()
		tick, inbox, handoverc, fenced = t.C, s.repl.inbox, s.repl.handoverc, s.repl.fenceRes
		recvReady = s.repl.recvReady()
	}
	for {
		if s.repl != nil {
			s.repl.resumeRecv()
		}
		handing := s.repl != nil && s.repl.handover != nil
		if handing {
			s.progressHandover()
			handing = s.repl.handover != nil
		}
		if err := s.fatalErr(); err != nil && !handing {
			// A primary that cannot persist has handed over what both
			// nodes hold (or could not); it stops now.
			s.failQueuedWith(rpctypes.ErrGRPCStopped)
			return err
		}
		props := s.proposals
		if s.repl != nil && !s.Role().Leads() {
			props = nil
			s.failQueued()
		}
		if handing {
			props = nil // no new batch: they wait for the new primary
		}
		if s.repl != nil && len(s.repl.fwdq) > 0 && s.Role().Leads() && !handing {
			// Forwarded writes share a group commit like local ones:
			// gather what else has arrived before committing.
			s.drainInbox(ctx, maxBatch)
			s.leadBatch(nil)
			continue
		}
		select {
		case <-ctx.Done():
			s.leave()
			return nil
		case p := <-props:
			s.leadBatch(p)
		case m := <-inbox:
			s.onMessage(ctx, m)
		case <-tick:
			s.onTick(ctx)
			s.m.Ticks.Inc()
		case h := <-handoverc:
			s.startHandover(h)
		case err := <-fenced:
			s.onFenced(ctx, err)
		case <-recvReady:
			// Taken by resumeRecv at the top of the next turn.
		}
	}
}

// drainInbox handles up to n messages that are already waiting.
func (s *Server) drainInbox(ctx context.Context, n int) {
	for i := 0; i < n && len(s.repl.fwdq) < maxBatch; i++ {
		select {
		case m := <-s.repl.inbox:
			s.onMessage(ctx, m)
		default:
			return
		}
	}
}

// failQueued hands back the proposals queued while the node stopped
// leading: none of them was applied, so they may go to the new primary.
func (s *Server) failQueued() { s.failQueuedWith(errRedirect) }

func (s *Server) failQueuedWith(err error) {
	for {
		select {
		case p := <-s.proposals:
			p.done <- applyResult{err: err}
		default:
			return
		}
	}
}

// leadBatch applies one group commit as the leader: first (if any), the
// forwarded writes, and whatever else is queued, up to maxBatch.
func (s *Server) leadBatch(first *proposal) {
	if s.repl != nil && !s.Role().Leads() {
		// The role changed while messages were handled (a step-down):
		// nothing may be logged in the old epoch. Not applied: say so.
		s.repl.fwdq = nil
		if first != nil {
			first.done <- applyResult{err: errRedirect}
		}
		s.failQueued()
		return
	}
	batch := make([]*proposal, 0, 16)
	if s.repl != nil {
		batch = append(batch, s.repl.fwdq...)
		s.repl.fwdq = nil
	}
	if first != nil {
		batch = append(batch, first)
	}
drain:
	for len(batch) < maxBatch {
		select {
		case p := <-s.proposals:
			batch = append(batch, p)
		default:
			break drain
		}
	}
	if len(batch) == 0 {
		return
	}
	results := make([]applyResult, 0, len(batch))
	var events []mvccpb.Event
	var jobs []compactJob
	var entries []repl.Entry
	merged := false
	idx := s.appliedIdx
	epoch := s.currentEpoch()
	solo := s.Role() == repl.RoleSolo
	now := time.Now().UnixNano()
	_, before, _ := s.store.Revs()
	err := s.be.Update(func(tx storage.WriteTx) error {
		for _, p := range batch {
			idx++
			var r applyResult
			var evs []mvccpb.Event
			var job *compactJob
			var err error
			if p.merge != 0 {
				job, err = s.applyMerge(tx, p.merge)
				merged = true
			} else {
				r, evs, job, err = s.apply(tx, p.req)
			}
			if err != nil {
				return err // storage failure: abort the whole batch
			}
			if job != nil {
				jobs = append(jobs, *job)
				r.physical = job.done
			}
			results = append(results, r)
			events = append(events, evs...)
			if s.repl != nil {
				var data []byte
				if p.merge != 0 {
					data = repl.MergeData(p.merge)
				} else if data, err = p.req.Marshal(); err != nil {
					return err
				}
				origin := p.origin
				if origin == 0 {
					origin = s.memberID
				}
				_, rev, _ := s.store.Revs()
				e := repl.Entry{Index: idx, Epoch: epoch, Origin: origin, ReqID: p.reqID, Time: now, Solo: solo, Merge: p.merge != 0, Rev: rev, Data: data}
				if err := repl.Append(tx, &e); err != nil {
					return err
				}
				entries = append(entries, e)
			}
		}
		if err := tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(idx)); err != nil {
			return err
		}
		return tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(s.term.Load()))
	})
	if err != nil {
		// Memory may be ahead of disk now. Refuse everything and stop;
		// the restart rebuilds from what is durable. Nobody in this
		// batch was told "success"; none of it was published. A
		// synchronous primary hands over what is durable on both nodes.
		s.fail(err)
		for _, p := range batch {
			if p.done != nil {
				p.done <- applyResult{err: rpctypes.ErrGRPCStopped}
			}
		}
		if s.repl != nil {
			s.handOverAfterFailure()
		}
		return
	}
	s.mu.Lock()
	s.appliedIdx = idx
	s.mu.Unlock()
	s.m.ProposalsApplied.Add(float64(len(batch)))
	s.m.BatchSize.Observe(float64(len(batch)))
	_, cur, _ := s.store.Revs()
	p := &pending{last: idx, from: before + 1, rev: cur, events: events, batch: batch, results: results, jobs: jobs, merged: merged}
	if s.repl == nil {
		s.release(p)
		return
	}
	// Published only once durable here, so whatever the replica applies
	// is on both disks: the replica's applied index is committed.
	msg := &transport.Message{Class: transport.Log, Kind: repl.KindEntries, Term: epoch.Term, Index: entries[0].Index, Payload: repl.EncodeEntries(entries)}
	if err := s.repl.tr.Send(msg); err != nil {
		// Not lost: the replica sees the gap and fetches it from the log.
		s.log.Warn("entries not sent; the replica will catch up", "first", entries[0].Index, "err", err)
	}
	p.at = s.repl.det.Now()
	s.repl.inflight = append(s.repl.inflight, p)
	s.releaseCommitted()
}

// apply applies one entry. A returned error is a storage failure; request
// failures travel in applyResult.err.
func (s *Server) apply(tx storage.WriteTx, req *pb.InternalRaftRequest) (applyResult, []mvccpb.Event, *compactJob, error) {
	var r applyResult
	if noSpaceRefuses(req) && s.alarmOn(pb.AlarmType_NOSPACE) {
		// The alarm is a log entry, so both nodes refuse the same
		// entries (etcd's capped applier).
		r.err = rpctypes.ErrGRPCNoSpace
		return r, nil, nil, nil
	}
	switch {
	case req.Put != nil:
		w := s.store.Write(tx)
		resp, err := s.applyPut(w, req.Put)
		if err != nil {
			return r, nil, nil, err
		}
		r.resp, r.err = resp.resp, resp.err
		s.m.Puts.Inc()
		return r, w.Changes(), nil, nil
	case req.DeleteRange != nil:
		w := s.store.Write(tx)
		resp, err := s.applyDelete(w, req.DeleteRange)
		if err != nil {
			return r, nil, nil, err
		}
		r.resp = resp
		s.m.Deletes.Inc()
		return r, w.Changes(), nil, nil
	case req.Txn != nil:
		w := s.store.Write(tx)
		resp, rerr, err := s.applyTxn(w, req.Txn)
		if err != nil {
			return r, nil, nil, err
		}
		r.resp, r.err = resp, rerr
		s.m.Txns.Inc()
		return r, w.Changes(), nil, nil
	case req.Compaction != nil:
		c, err := s.store.Compact(tx, req.Compaction.Revision)
		if err != nil {
			r.err = toGRPC(err)
			return r, nil, nil, nil
		}
		job := &compactJob{c: c}
		if req.Compaction.Physical {
			done := make(chan error, 1)
			job.done = done
		}
		_, cur, _ := s.store.Revs()
		r.resp = &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: cur}}
		return r, nil, job, nil
	case req.LeaseGrant != nil:
		ttl, err := s.lessor.Grant(tx, req.LeaseGrant.ID, req.LeaseGrant.TTL)
		if err == lease.ErrExists || err == lease.ErrTTLTooLarge {
			r.err = toGRPC(err)
			return r, nil, nil, nil
		}
		if err != nil {
			return r, nil, nil, err
		}
		_, cur, _ := s.store.Revs()
		r.resp = &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: cur}, ID: req.LeaseGrant.ID, TTL: ttl}
		return r, nil, nil, nil
	case req.LeaseRevoke != nil:
		keys, err := s.lessor.Revoke(tx, req.LeaseRevoke.ID)
		if err == lease.ErrNotFound {
			r.err = rpctypes.ErrGRPCLeaseNotFound
			return r, nil, nil, nil
		}
		if err != nil {
			return r, nil, nil, err
		}
		// All of the lease's keys go in one revision.
		w := s.store.Write(tx)
		for _, k := range keys {
			if _, err := w.DeleteRange(k, nil); err != nil {
				return r, nil, nil, err
			}
		}
		r.resp = &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: w.Rev()}}
		return r, w.Changes(), nil, nil
	case req.Alarm != nil:
		resp, err := s.applyAlarm(tx, req.Alarm)
		if err != nil {
			return r, nil, nil, err
		}
		r.resp = resp
		return r, nil, nil, nil
	}
	resp, rerr, err := s.auth.Apply(tx, req)
	if err != nil {
		return r, nil, nil, err
	}
	if resp == nil && rerr == nil {
		r.err = fmt.Errorf("dyad: unsupported log entry")
		return r, nil, nil, nil
	}
	r.resp, r.err = resp, rerr
	return r, nil, nil, nil
}

type putResult struct {
	resp *pb.PutResponse
	err  error
}

// applyPut returns request failures in putResult.err and storage failures as
// error.
func (s *Server) applyPut(w *mvcc.WriteTxn, p *pb.PutRequest) (putResult, error) {
	if err := s.checkPut(w, p); err != nil {
		return putResult{err: err}, nil
	}
	resp, err := s.execPut(w, p)
	return putResult{resp: resp}, err
}

// checkPut validates a put against the state inside w.
func (s *Server) checkPut(w *mvcc.WriteTxn, p *pb.PutRequest) error {
	if p.Lease != 0 && !p.IgnoreLease && !s.lessor.Exists(p.Lease) {
		return rpctypes.ErrGRPCLeaseNotFound
	}
	if p.IgnoreValue || p.IgnoreLease {
		prev, err := w.Get(p.Key)
		if err != nil {
			return toGRPC(err)
		}
		if prev == nil {
			return rpctypes.ErrGRPCKeyNotFound
		}
	}
	return nil
}

func (s *Server) execPut(w *mvcc.WriteTxn, p *pb.PutRequest) (*pb.PutResponse, error) {
	val, leaseID := p.Value, p.Lease
	if p.IgnoreValue || p.IgnoreLease {
		prev, err := w.Get(p.Key)
		if err != nil {
			return nil, err
		}
		if prev == nil {
			return nil, fmt.Errorf("put: key vanished between check and apply")
		}
		if p.IgnoreValue {
			val = prev.Value
		}
		if p.IgnoreLease {
			leaseID = prev.Lease
		}
	}
	prev, err := w.Put(p.Key, val, leaseID)
	if err != nil {
		return nil, err
	}
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: w.Rev()}}
	if p.PrevKv && prev != nil {
		resp.PrevKv = prev
	}
	return resp, nil
}

func (s *Server) applyDelete(w *mvcc.WriteTxn, d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	deleted, err := w.DeleteRange(d.Key, d.RangeEnd)
	if err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{Revision: w.Rev()}, Deleted: int64(len(deleted))}
	if d.PrevKv {
		for i := range deleted {
			resp.PrevKvs = append(resp.PrevKvs, &deleted[i])
		}
	}
	return resp, nil
}

// txnPath records which branch each (nested) txn takes, decided against the
// state before any of the txn's writes, as etcd does.
type txnPath struct {
	success bool
	nested  []*txnPath // one per RequestTxn op of the taken branch, in order
}

func (s *Server) evalPath(w *mvcc.WriteTxn, t *pb.TxnRequest) (*txnPath, error) {
	ok := true
	for _, c := range t.Compare {
		match, err := compare(w, c)
		if err != nil {
			return nil, err
		}
		if !match {
			ok = false
			break
		}
	}
	path := &txnPath{success: ok}
	for _, op := range branch(t, ok) {
		if nt := op.GetRequestTxn(); nt != nil {
			np, err := s.evalPath(w, nt)
			if err != nil {
				return nil, err
			}
			path.nested = append(path.nested, np)
		}
	}
	return path, nil
}

func branch(t *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return t.Success
	}
	return t.Failure
}

// checkPath validates every op on the taken path before anything is written.
func (s *Server) checkPath(w *mvcc.WriteTxn, t *pb.TxnRequest, path *txnPath) error {
	_, _, compacted := s.store.Revs()
	cur := w.Rev()
	n := 0
	for _, op := range branch(t, path.success) {
		switch {
		case op.GetRequestRange() != nil:
			r := op.GetRequestRange()
			if r.Revision > cur {
				return rpctypes.ErrGRPCFutureRev
			}
			if r.Revision > 0 && r.Revision < compacted {
				return rpctypes.ErrGRPCCompacted
			}
		case op.GetRequestPut() != nil:
			if err := s.checkPut(w, op.GetRequestPut()); err != nil {
				return err
			}
		case op.GetRequestTxn() != nil:
			if err := s.checkPath(w, op.GetRequestTxn(), path.nested[n]); err != nil {
				return err
			}
			n++
		}
	}
	return nil
}

// applyTxn returns (response, request error, storage error).
func (s *Server) applyTxn(w *mvcc.WriteTxn, t *pb.TxnRequest) (*pb.TxnResponse, error, error) {
	path, err := s.evalPath(w, t)
	if err != nil {
		return nil, toGRPC(err), nil
	}
	if err := s.checkPath(w, t, path); err != nil {
		return nil, err, nil
	}
	resp, err := s.execTxn(w, t, path)
	if err != nil {
		return nil, nil, err
	}
	resp.Header = &pb.ResponseHeader{Revision: w.Rev()}
	return resp, nil, nil
}

func (s *Server) execTxn(w *mvcc.WriteTxn, t *pb.TxnRequest, path *txnPath) (*pb.TxnResponse, error) {
	ops := branch(t, path.success)
	resp := &pb.TxnResponse{Succeeded: path.success, Responses: make([]*pb.ResponseOp, 0, len(ops))}
	n := 0
	for _, op := range ops {
		switch {
		case op.GetRequestRange() != nil:
			rr, err := rangeKV(w.Range, op.GetRequestRange())
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}})
		case op.GetRequestPut() != nil:
			pr, err := s.execPut(w, op.GetRequestPut())
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}})
		case op.GetRequestDeleteRange() != nil:
			dr, err := s.applyDelete(w, op.GetRequestDeleteRange())
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}})
		case op.GetRequestTxn() != nil:
			tr, err := s.execTxn(w, op.GetRequestTxn(), path.nested[n])
			if err != nil {
				return nil, err
			}
			n++
			// etcd leaves a nested txn's header empty; only the outer
			// response gets the revision.
			tr.Header = &pb.ResponseHeader{}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}})
		default:
			// An empty RequestOp: etcd answers it with an empty ResponseOp.
			resp.Responses = append(resp.Responses, &pb.ResponseOp{})
		}
	}
	return resp, nil
}

// compare evaluates one txn compare as etcd does: over a range every key
// must match; a missing key compares as zero values, except that a value
// compare on a missing key is always false.
func compare(w *mvcc.WriteTxn, c *pb.Compare) (bool, error) {
	rr, err := w.Range(c.Key, c.RangeEnd, mvcc.RangeOptions{})
	if err != nil {
		return false, err
	}
	if len(rr.KVs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return compareKV(c, &mvccpb.KeyValue{}), nil
	}
	for i := range rr.KVs {
		if !compareKV(c, &rr.KVs[i]) {
			return false, nil
		}
	}
	return true, nil
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var res int
	switch c.Target {
	case pb.Compare_VALUE:
		v := []byte{}
		if tv, ok := c.TargetUnion.(*pb.Compare_Value); ok && tv != nil {
			v = tv.Value
		}
		res = bytes.Compare(kv.Value, v)
	case pb.Compare_CREATE:
		res = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		res = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		res = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		res = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return res == 0
	case pb.Compare_NOT_EQUAL:
		return res != 0
	case pb.Compare_GREATER:
		return res > 0
	case pb.Compare_LESS:
		return res < 0
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// noSpaceRefuses reports the entries the NOSPACE alarm refuses: puts, txns
// with a put, and lease grants (deletes and compaction still pass).
func noSpaceRefuses(req *pb.InternalRaftRequest) bool {
	return req.Put != nil || req.LeaseGrant != nil || req.Txn != nil && txnHasPut(req.Txn)
}

func (s *Server) applyAlarm(tx storage.WriteTx, a *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{}}
	mid := a.MemberID
	if mid == 0 {
		mid = s.memberID
	}
	am := &pb.AlarmMember{MemberID: mid, Alarm: a.Alarm}
	key, err := am.Marshal()
	if err != nil {
		return nil, err
	}
	switch a.Action {
	case pb.AlarmRequest_GET:
		resp.Alarms = s.Alarms()
	case pb.AlarmRequest_ACTIVATE:
		if a.Alarm == pb.AlarmType_NONE {
			break
		}
		if err := tx.Put(storage.BucketAlarm, key, nil); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.alarms[a.Alarm] = true
		s.mu.Unlock()
		resp.Alarms = []*pb.AlarmMember{am}
		s.log.Warn("alarm raised", "alarm", a.Alarm.String())
	case pb.AlarmRequest_DEACTIVATE:
		s.mu.Lock()
		was := s.alarms[a.Alarm]
		delete(s.alarms, a.Alarm)
		s.mu.Unlock()
		// Alarms are replicated: either node may have raised this one,
		// under its own member ID, and each node lists it under its own.
		// Disarming clears it for every member, so that it does not come
		// back from the bucket on the next start.
		if err := deleteAlarms(tx, a.Alarm); err != nil {
			return nil, err
		}
		if was {
			resp.Alarms = []*pb.AlarmMember{am}
			s.log.Info("alarm cleared", "alarm", a.Alarm.String())
		}
	}
	_, cur, _ := s.store.Revs()
	resp.Header.Revision = cur
	return resp, nil
}

// leaseExpiry revokes expired leases through the log.
func (s *Server) leaseExpiry(ctx context.Context) error {
	every(ctx, 250*time.Millisecond, func() {
		if !s.Role().Leads() {
			return // the leader revokes expired leases through the log
		}
		for _, id := range s.lessor.Expired(64) {
			_, err := s.proposeLocal(ctx, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}})
			if err != nil && err != rpctypes.ErrGRPCLeaseNotFound {
				s.lessor.Unmark(id)
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("lease expiry failed; will retry", "lease", id, "err", err)
			}
		}
	})
	return nil
}
