package api

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The checks below reproduce etcd's own request validation, so that a bad
// request gets the same gRPC code and message from dyad as from etcd.

func checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDelete(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

func checkTxn(r *pb.TxnRequest, maxOps int) error {
	n := len(r.Compare)
	if len(r.Success) > n {
		n = len(r.Success)
	}
	if len(r.Failure) > n {
		n = len(r.Failure)
	}
	if n > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			// etcd gives nested txns what is left of the budget.
			if err := checkOp(op, maxOps-n); err != nil {
				return err
			}
		}
	}
	if _, _, err := checkIntervals(r.Success); err != nil {
		return err
	}
	if _, _, err := checkIntervals(r.Failure); err != nil {
		return err
	}
	return nil
}

func checkOp(op *pb.RequestOp, maxOps int) error {
	switch v := op.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		if v.RequestRange == nil {
			return rpctypes.ErrGRPCKeyNotFound
		}
		return checkRange(v.RequestRange)
	case *pb.RequestOp_RequestPut:
		if v.RequestPut == nil {
			return rpctypes.ErrGRPCKeyNotFound
		}
		return checkPut(v.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		if v.RequestDeleteRange == nil {
			return rpctypes.ErrGRPCKeyNotFound
		}
		return checkDelete(v.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		if v.RequestTxn == nil {
			return rpctypes.ErrGRPCKeyNotFound
		}
		return checkTxn(v.RequestTxn, maxOps)
	}
	// etcd answers an empty op this way.
	return rpctypes.ErrGRPCKeyNotFound
}

// interval is [start, end); end nil is a single key, end "" (from "\x00")
// is unbounded.
type interval struct {
	start, end []byte
	unbounded  bool
}

func newInterval(key, end []byte) interval {
	if len(end) == 1 && end[0] == 0 {
		return interval{start: key, unbounded: true}
	}
	if len(end) == 0 {
		return interval{start: key}
	}
	return interval{start: key, end: end}
}

func (iv interval) contains(k []byte) bool {
	if iv.unbounded {
		return bytes.Compare(k, iv.start) >= 0
	}
	if iv.end == nil {
		return bytes.Equal(k, iv.start)
	}
	return bytes.Compare(k, iv.start) >= 0 && bytes.Compare(k, iv.end) < 0
}

type intervals []interval

func (s intervals) hit(k []byte) bool {
	for _, iv := range s {
		if iv.contains(k) {
			return true
		}
	}
	return false
}

// checkIntervals enforces etcd's rule that one branch of a txn (with its
// nested txns) may not put a key twice, nor put a key it also deletes. The
// two branches of a nested txn exclude each other, so they may overlap.
func checkIntervals(ops []*pb.RequestOp) (map[string]struct{}, intervals, error) {
	var dels intervals
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			dels = append(dels, newInterval(d.Key, d.RangeEnd))
		}
	}
	puts := map[string]struct{}{}
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.Success)
		if err != nil {
			return nil, dels, err
		}
		putsElse, delsElse, err := checkIntervals(t.Failure)
		if err != nil {
			return nil, dels, err
		}
		for k := range putsThen {
			if _, dup := puts[k]; dup || dels.hit([]byte(k)) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, dup := puts[k]; dup {
				if _, fromThen := putsThen[k]; !fromThen {
					return nil, dels, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if dels.hit([]byte(k)) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if _, dup := puts[k]; dup || dels.hit(p.Key) {
			return nil, dels, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}
