package robustness

import (
	"fmt"

	"github.com/anishathalye/porcupine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/conflict"
	"github.com/dyad-db/dyad/test/linearize"
)

// ackedWrite is a write a client saw acknowledged: it happened at Rev.
type ackedWrite struct {
	Rev    int64
	Key    string
	Value  string
	Delete bool
}

func (w ackedWrite) String() string {
	if w.Delete {
		return fmt.Sprintf("delete(%s)@%d", w.Key, w.Rev)
	}
	return fmt.Sprintf("put(%s=%s)@%d", w.Key, w.Value, w.Rev)
}

// ackedWrites extracts the acknowledged writes of a history: puts,
// successful CAS and deletes that deleted a key. (A revoke's deleted keys
// are not named by its response; its effect is checked by porcupine.)
func ackedWrites(ops []porcupine.Operation) []ackedWrite {
	var ws []ackedWrite
	for _, op := range ops {
		in, out := op.Input.(linearize.Input), op.Output.(linearize.Output)
		if out.Unknown {
			continue
		}
		switch {
		case in.Kind == linearize.OpPut || in.Kind == linearize.OpPutLease ||
			(in.Kind == linearize.OpCAS && out.Succeeded):
			ws = append(ws, ackedWrite{Rev: out.Rev, Key: in.Key, Value: in.Value})
		case in.Kind == linearize.OpDelete && out.Deleted > 0:
			ws = append(ws, ackedWrite{Rev: out.Rev, Key: in.Key, Delete: true})
		}
	}
	return ws
}

// conflictWrites reads the writes kept in the conflict records under
// dataDir, by revision.
func conflictWrites(dataDir string) (map[int64][]ackedWrite, int, error) {
	paths, err := conflict.List(conflict.Dir(dataDir))
	if err != nil {
		return nil, 0, err
	}
	m := map[int64][]ackedWrite{}
	for _, p := range paths {
		set, err := conflict.Load(p)
		if err != nil {
			return nil, 0, err
		}
		for _, e := range set.Entries {
			req := &pb.InternalRaftRequest{}
			if err := req.Unmarshal(e.Request); err != nil {
				return nil, 0, fmt.Errorf("%s: entry %d: %w", p, e.Index, err)
			}
			m[e.Revision] = append(m[e.Revision], requestWrites(e.Revision, req)...)
		}
	}
	return m, len(paths), nil
}

// requestWrites lists the puts and single-key deletes of req.
func requestWrites(rev int64, req *pb.InternalRaftRequest) []ackedWrite {
	var ws []ackedWrite
	addOps := func(ops []*pb.RequestOp) {
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil {
				ws = append(ws, ackedWrite{Rev: rev, Key: string(p.Key), Value: string(p.Value)})
			}
			if d := op.GetRequestDeleteRange(); d != nil {
				ws = append(ws, ackedWrite{Rev: rev, Key: string(d.Key), Delete: true})
			}
		}
	}
	switch {
	case req.Put != nil:
		ws = append(ws, ackedWrite{Rev: rev, Key: string(req.Put.Key), Value: string(req.Put.Value)})
	case req.DeleteRange != nil:
		ws = append(ws, ackedWrite{Rev: rev, Key: string(req.DeleteRange.Key), Delete: true})
	case req.Txn != nil:
		addOps(req.Txn.Success)
		addOps(req.Txn.Failure)
	}
	return ws
}

// lostWrites returns the acknowledged writes found neither in the store's
// history (an event of that key, kind and value at that revision) nor in a
// conflict record (a diverged entry writing it at that revision).
func lostWrites(acked []ackedWrite, history map[int64][]event, conflicts map[int64][]ackedWrite) []ackedWrite {
	var lost []ackedWrite
	for _, w := range acked {
		found := false
		for _, e := range history[w.Rev] {
			if e.Key == w.Key && e.Delete == w.Delete && (w.Delete || e.Value == w.Value) {
				found = true
				break
			}
		}
		for _, c := range conflicts[w.Rev] {
			if c.Key == w.Key && c.Delete == w.Delete && (w.Delete || c.Value == w.Value) {
				found = true
				break
			}
		}
		if !found {
			lost = append(lost, w)
		}
	}
	return lost
}
