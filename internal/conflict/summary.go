package conflict

import (
	"fmt"
	"strconv"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Summarize describes a logged request in one line for `dyad resolve`.
func Summarize(req *pb.InternalRaftRequest) string {
	switch {
	case req.Put != nil:
		return fmt.Sprintf("put %s (%d bytes)%s", strconv.Quote(string(req.Put.Key)), len(req.Put.Value), leaseNote(req.Put.Lease))
	case req.DeleteRange != nil:
		return "delete " + keyRange(req.DeleteRange.Key, req.DeleteRange.RangeEnd)
	case req.Txn != nil:
		var ops []string
		for _, o := range append(append([]*pb.RequestOp(nil), req.Txn.Success...), req.Txn.Failure...) {
			switch {
			case o.GetRequestPut() != nil:
				ops = append(ops, "put "+strconv.Quote(string(o.GetRequestPut().Key)))
			case o.GetRequestDeleteRange() != nil:
				d := o.GetRequestDeleteRange()
				ops = append(ops, "delete "+keyRange(d.Key, d.RangeEnd))
			case o.GetRequestTxn() != nil:
				ops = append(ops, "txn")
			}
		}
		return fmt.Sprintf("txn (%d compares; writes: %s)", len(req.Txn.Compare), strings.Join(ops, ", "))
	case req.LeaseGrant != nil:
		return fmt.Sprintf("lease grant %x ttl %ds", req.LeaseGrant.ID, req.LeaseGrant.TTL)
	case req.LeaseRevoke != nil:
		return fmt.Sprintf("lease revoke %x", req.LeaseRevoke.ID)
	case req.Compaction != nil:
		return fmt.Sprintf("compact at %d", req.Compaction.Revision)
	case req.Alarm != nil:
		return fmt.Sprintf("alarm %s %s", req.Alarm.Action, req.Alarm.Alarm)
	}
	return "other request"
}

func leaseNote(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf(" with lease %x", id)
}

func keyRange(key, end []byte) string {
	switch {
	case len(end) == 0:
		return strconv.Quote(string(key))
	case len(end) == 1 && end[0] == 0:
		return "from " + strconv.Quote(string(key)) + " on"
	}
	return "[" + strconv.Quote(string(key)) + ", " + strconv.Quote(string(end)) + ")"
}
