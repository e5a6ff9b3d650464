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
	"github.com/dyad-db/dyad/internal/storage"
)

// apply applies one entry. A returned error is a storage failure; request
// failures travel in applyResult.err.
func (s *Server) apply(tx storage.WriteTx, req *pb.InternalRaftRequest) (applyResult, []mvccpb.Event, *compactJob, error) {
	var r applyResult
	if noSpaceRefuses(req) && s.noSpaceOn() {
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
		match, err := compare(w.Range, c)
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
func compare(read rangeFunc, c *pb.Compare) (bool, error) {
	rr, err := read(c.Key, c.RangeEnd, mvcc.RangeOptions{})
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
		s.noSpace.Store(s.alarms[pb.AlarmType_NOSPACE])
		s.mu.Unlock()
		resp.Alarms = []*pb.AlarmMember{am}
		s.log.Warn("alarm raised", "alarm", a.Alarm.String())
	case pb.AlarmRequest_DEACTIVATE:
		s.mu.Lock()
		was := s.alarms[a.Alarm]
		delete(s.alarms, a.Alarm)
		s.noSpace.Store(s.alarms[pb.AlarmType_NOSPACE])
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
