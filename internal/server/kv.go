package server

import (
	"context"
	"errors"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/lease"
	"github.com/dyad-db/dyad/internal/mvcc"
)

// toGRPC maps internal errors to etcd's gRPC errors.
func toGRPC(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, lease.ErrNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, lease.ErrExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, lease.ErrTTLTooLarge):
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	return err
}

type rangeFunc func(key, end []byte, ro mvcc.RangeOptions) (mvcc.RangeResult, error)

// rangeKV answers a RangeRequest exactly as etcd's applier does: filters,
// sorting and limit applied after the read, Count ignoring them, and the
// header at the store's revision.
func rangeKV(read rangeFunc, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	limit := r.Limit
	if r.SortOrder != pb.RangeRequest_NONE || r.MinModRevision != 0 || r.MaxModRevision != 0 ||
		r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		limit = 0 // fetch everything; filter, sort and cut afterwards
	}
	if limit > 0 {
		limit++ // one more than asked tells whether there is more
	}
	res, err := read(r.Key, r.RangeEnd, mvcc.RangeOptions{Limit: limit, Rev: r.Revision, Count: r.CountOnly})
	if err != nil {
		return nil, toGRPC(err)
	}
	kvs := res.KVs
	prune := func(drop func(*mvccpb.KeyValue) bool) {
		j := 0
		for i := range kvs {
			if !drop(&kvs[i]) {
				kvs[j] = kvs[i]
				j++
			}
		}
		kvs = kvs[:j]
	}
	if r.MaxModRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision > r.MaxModRevision })
	}
	if r.MinModRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision < r.MinModRevision })
	}
	if r.MaxCreateRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision > r.MaxCreateRevision })
	}
	if r.MinCreateRevision != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision < r.MinCreateRevision })
	}
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	} else if r.SortTarget == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND {
		order = pb.RangeRequest_NONE // already in key order
	}
	if order != pb.RangeRequest_NONE {
		var less func(a, b *mvccpb.KeyValue) bool
		switch r.SortTarget {
		case pb.RangeRequest_KEY:
			less = func(a, b *mvccpb.KeyValue) bool { return string(a.Key) < string(b.Key) }
		case pb.RangeRequest_VERSION:
			less = func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
		case pb.RangeRequest_CREATE:
			less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
		case pb.RangeRequest_MOD:
			less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
		case pb.RangeRequest_VALUE:
			less = func(a, b *mvccpb.KeyValue) bool { return string(a.Value) < string(b.Value) }
		}
		var srt sort.Interface = kvSorter{kvs, less}
		if order == pb.RangeRequest_DESCEND {
			srt = sort.Reverse(srt)
		}
		sort.Sort(srt) // the same algorithm as etcd, so ties come out alike
	}
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: int64(res.Rev)}, Count: int64(res.Count)}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs = kvs[:r.Limit]
		resp.More = true
	}
	if len(kvs) > 0 {
		resp.Kvs = make([]*mvccpb.KeyValue, len(kvs))
		for i := range kvs {
			if r.KeysOnly {
				kvs[i].Value = nil
			}
			resp.Kvs[i] = &kvs[i]
		}
	}
	return resp, nil
}

type kvSorter struct {
	kvs  []mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (k kvSorter) Len() int           { return len(k.kvs) }
func (k kvSorter) Swap(i, j int)      { k.kvs[i], k.kvs[j] = k.kvs[j], k.kvs[i] }
func (k kvSorter) Less(i, j int) bool { return k.less(&k.kvs[i], &k.kvs[j]) }

// Range serves a read. Linearizable and serializable reads are the same on a
// single node: every acknowledged write is readable before it is
// acknowledged. In a pair see linearizable.
func (s *Server) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	s.m.Ranges.Inc()
	if !r.Serializable {
		if err := s.linearizable(ctx); err != nil {
			return nil, err
		}
	}
	resp, err := rangeKV(func(key, end []byte, ro mvcc.RangeOptions) (mvcc.RangeResult, error) {
		res, _, err := s.store.Range(key, end, ro)
		return res, err
	}, r)
	if err != nil {
		return nil, err
	}
	s.FillHeader(resp.Header)
	return resp, nil
}

// Put writes a key.
func (s *Server) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := s.checkSpace(len(r.Key) + len(r.Value)); err != nil {
		return nil, err
	}
	resp, err := s.propose(ctx, &pb.InternalRaftRequest{Put: r})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.PutResponse)
	s.FillHeader(out.Header)
	return out, nil
}

// DeleteRange deletes keys.
func (s *Server) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := s.propose(ctx, &pb.InternalRaftRequest{DeleteRange: r})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.DeleteRangeResponse)
	s.FillHeader(out.Header)
	return out, nil
}

// Txn runs a transaction through the log, except one that cannot write (a
// read-only txn, or one whose compares fail with a failure branch that
// only reads): that one is a linearizable read (txnAsRead). A txn served
// as a read counts in etcd_mvcc_txn_total of the member that serves it,
// as a logged one counts on each member that applies it.
func (s *Server) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if txnHasPut(r) {
		if err := s.checkSpace(r.Size()); err != nil {
			return nil, err
		}
	}
	if out, ok := s.txnAsRead(ctx, r); ok {
		s.m.Txns.Inc()
		s.FillHeader(out.Header)
		return out, nil
	}
	resp, err := s.propose(ctx, &pb.InternalRaftRequest{Txn: r})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.TxnResponse)
	s.FillHeader(out.Header)
	return out, nil
}

func txnHasPut(t *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if op.GetRequestPut() != nil {
				return true
			}
			if nt := op.GetRequestTxn(); nt != nil && txnHasPut(nt) {
				return true
			}
		}
	}
	return false
}

// Compact compacts the history up to r.Revision.
func (s *Server) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := s.propose(ctx, &pb.InternalRaftRequest{Compaction: r})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.CompactionResponse)
	s.FillHeader(out.Header)
	return out, nil
}

// checkSpace refuses writes that would grow the store past its quota, and
// raises the NOSPACE alarm the first time, as etcd does. It runs on every
// write's own goroutine, so it takes no lock, and reads the size noted at
// most noteSizeEvery ago (dbSizeForQuota), as etcd's is the one of its
// newest backend commit.
func (s *Server) checkSpace(cost int) error {
	if s.noSpaceOn() {
		return rpctypes.ErrGRPCNoSpace
	}
	q := s.cfg.QuotaBackendBytes
	if q <= 0 {
		return nil
	}
	// etcd's estimate: the key and value plus bookkeeping per entry.
	if s.dbSizeForQuota()+int64(cost)+256 <= q {
		return nil
	}
	_, err := s.propose(context.Background(), &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: s.memberID, Alarm: pb.AlarmType_NOSPACE}})
	if err != nil {
		s.log.Error("raising NOSPACE alarm failed", "err", err)
	}
	return rpctypes.ErrGRPCNoSpace
}

// linearizable makes a read linearizable in a pair (brief: "Reads and
// headers"): the protocol core decides whether and when it may be served
// (readIndex; the rules are internal/repl's reads.go).
func (s *Server) linearizable(ctx context.Context) error {
	if s.repl == nil {
		return nil
	}
	if s.fatalErr() != nil {
		// Its storage failed: the node is leaving the pair.
		return rpctypes.ErrGRPCStopped
	}
	return s.readIndex(ctx)
}
