package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/mvcc"
)

// A txn that cannot write changes nothing: its answer is the reads of the
// branch its compares choose, at the revision they were decided at. Two
// kinds are such: a txn whose every op, in both branches, is a Range (a
// read-only txn, which etcd serves as a linearizable read too), and one
// whose compares fail while its failure branch only reads. Kubernetes
// sends many of the second kind: every GuaranteedUpdate from a stale
// cache (If ModRevision(k) == seen, Then Put, Else Get) and every Create
// of an existing object fails its compare. Logging them costs a log entry
// carrying the unused put (a journal append and a replication round trip
// of about an object's size), where a linearizable read costs at most the
// wait for writes already in flight.
//
// txnAsRead serves such a txn as a linearizable read. It is linearized at
// the read's point, as a Range would be: everything acknowledged before
// the txn arrived is visible there (linearizable), and a txn that writes
// nothing may take effect at any point inside its call. Whenever the
// answer is not certain to be a read-only one (the compares of a txn
// that may write hold at that point, or reading fails), ok is false and
// the caller logs the txn as before, so the log stays the judge of every
// txn that may write, and of every error.
//
// The compares of a txn that may write are first tried against the state
// already visible here, without waiting: when they hold there, the txn
// very likely writes and is logged at once, so a successful update pays
// nothing for this path.
func (s *Server) txnAsRead(ctx context.Context, t *pb.TxnRequest) (resp *pb.TxnResponse, ok bool) {
	readOnly := onlyRanges(t.Success) && onlyRanges(t.Failure)
	if !readOnly {
		if len(t.Compare) == 0 || !onlyRanges(t.Failure) {
			return nil, false
		}
		if holds, err := s.comparesHoldAt(t, s.store.ReadableRev()); err != nil || holds {
			return nil, false
		}
	}
	if s.linearizable(ctx) != nil {
		// Refused as a read (no read lease here, a hand-over, a stop):
		// the log path gives the answer a logged txn gets, forwarding
		// or refusing by its own rules.
		return nil, false
	}
	// One revision for the compares and the reads, as one logged txn
	// sees one state.
	rev := s.store.ReadableRev()
	holds, err := s.comparesHoldAt(t, rev)
	if err != nil || holds && !readOnly {
		return nil, false
	}
	ops := branch(t, holds)
	resp = &pb.TxnResponse{Succeeded: holds, Header: &pb.ResponseHeader{Revision: rev}, Responses: make([]*pb.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		rr, err := rangeKV(s.rangeAt(rev), op.GetRequestRange())
		if err != nil {
			// A range at its own revision that is compacted or in the
			// future: the log gives the error the logged txn gives.
			return nil, false
		}
		rr.Header.Revision = rev
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}})
	}
	return resp, true
}

// onlyRanges reports whether every op is a Range (an empty branch too).
func onlyRanges(ops []*pb.RequestOp) bool {
	for _, op := range ops {
		if op.GetRequestRange() == nil {
			return false
		}
	}
	return true
}

// rangeAt reads the store at rev unless a request names its own revision.
func (s *Server) rangeAt(rev int64) rangeFunc {
	return func(key, end []byte, ro mvcc.RangeOptions) (mvcc.RangeResult, error) {
		if ro.Rev == 0 {
			ro.Rev = rev
		}
		res, _, err := s.store.Range(key, end, ro)
		return res, err
	}
}

// comparesHoldAt evaluates t's compares against the store at rev.
func (s *Server) comparesHoldAt(t *pb.TxnRequest, rev int64) (bool, error) {
	read := s.rangeAt(rev)
	for _, c := range t.Compare {
		match, err := compare(read, c)
		if err != nil || !match {
			return false, err
		}
	}
	return true, nil
}
