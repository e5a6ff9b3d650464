package server

import (
	"fmt"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/conflict"
	"github.com/dyad-db/dyad/internal/mvcc"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
	"github.com/dyad-db/dyad/internal/storage"
)

// Split brain: both nodes acknowledged writes alone while they could not
// talk. The rules (docs/ARCHITECTURE.md, "Split brain"):
//
//  1. When two leaders meet, the one that acknowledged nothing alone
//     yields; if both did (or neither), the node outside the preferred
//     zone yields (repl.YieldAfterSplit). The yielding node follows the
//     other and asks for catch-up.
//  2. The leader answers that the logs diverged. If the follower's suffix
//     holds no write it acknowledged alone, it is simply replaced.
//     Otherwise this is a split brain: the follower writes its diverged
//     entries and the final state of every key they changed to a conflict
//     set, durably, before anything else (onSplitBrain).
//  3. With --split-brain-policy manual it then waits for `dyad resolve
//     accept`. Otherwise, or once accepted, it asks the leader to merge:
//     the leader logs a merge entry that jumps its revision above both
//     sides' maxima and compacts there, and cancels every watch.
//  4. Once the leader's revision is past the follower's, the follower
//     resyncs from a snapshot (which cancels its watches too) and is the
//     replica again. Its revisions never ran backwards: the snapshot is
//     newer than anything it served.
//
// All of it runs in the apply loop.

// onSplitBrain keeps this node's diverged writes as conflict records,
// durably, before the core lets anything replace them (Ready.SplitBrain).
func (s *Server) onSplitBrain(sb *repl.SplitBrain) {
	r := s.repl
	path, set, created, err := s.exportConflicts(sb.Leader)
	if err != nil {
		s.fail(fmt.Errorf("writing the conflict records of a split brain: %w", err))
		r.node.ConflictsKept(false, err)
		return
	}
	r.conflictSet = path
	if created {
		s.m.SplitBrains.Inc()
		s.m.ConflictKeys.Add(float64(len(set.Keys)))
		s.log.Error("split brain: this node acknowledged writes alone that the leader's history does not have; they are kept as conflict records (see dyad resolve)",
			"conflict-set", path, "diverged-entries", len(set.Entries), "keys", len(set.Keys), "diverged-after-index", set.DivergedAt, "incomplete", set.Incomplete)
	}
	r.node.ConflictsKept(conflict.Accepted(path), nil)
}

// exportConflicts writes the conflict set of this node's diverged suffix
// (once per split brain: a repeat finds the file and returns it).
func (s *Server) exportConflicts(leader []repl.EpochRecord) (path string, set *conflict.Set, created bool, err error) {
	r := s.repl
	epochs := r.node.Epochs()
	d := repl.Divergence(epochs, leader, s.appliedIdx)
	own := repl.Last(epochs).Epoch
	name := fmt.Sprintf("split-%012d-%016x-after-%d.json", own.Term, s.memberID, d)
	dir := conflict.Dir(s.cfg.DataDir)
	if old, err := conflict.Load(dir + "/" + name); err == nil {
		return dir + "/" + name, old, false, nil
	}
	_, cur, compacted := s.store.Revs()
	set = &conflict.Set{Version: conflict.FormatVersion, Created: time.Now().UTC(), Member: formatID(s.memberID),
		Winner: repl.Last(leader).Epoch.String(), DivergedAt: d, LoserRevision: cur}
	var notes []string
	base := int64(-1)
	err = s.be.View(func(tx storage.ReadTx) error {
		first, _, err := replstore.Bounds(tx)
		if err != nil {
			return err
		}
		if d == 0 {
			base = 1
		} else if e, ok, err := replstore.Get(tx, d); err != nil {
			return err
		} else if ok {
			base = e.Rev
		}
		from := d + 1
		if first > from {
			notes = append(notes, fmt.Sprintf("the log was trimmed: diverged entries %d to %d are not listed", from, first-1))
			from = first
		}
		for from <= s.appliedIdx {
			es, err := replstore.Read(tx, from, 4<<20)
			if err != nil || len(es) == 0 {
				return err
			}
			for i := range es {
				if es[i].Index > s.appliedIdx {
					break
				}
				set.Entries = append(set.Entries, conflictEntry(&es[i]))
			}
			from = es[len(es)-1].Index + 1
		}
		return nil
	})
	if err != nil {
		return "", nil, false, err
	}
	if base < 0 {
		// The revision at the divergence point is unknown: list every key
		// changed since the compaction point (more than diverged, never
		// less).
		base = compacted
		notes = append(notes, fmt.Sprintf("the revision at index %d is unknown; keys changed since revision %d are listed, some of which the winner also has", d, base))
	}
	set.BaseRevision = base
	keys, note, err := s.changedKeys(base, cur, compacted)
	if err != nil {
		return "", nil, false, err
	}
	if note != "" {
		notes = append(notes, note)
	}
	set.Keys = keys
	for i, n := range notes {
		if i > 0 {
			set.Incomplete += "; "
		}
		set.Incomplete += n
	}
	path, err = conflict.Save(dir, name, set)
	return path, set, err == nil, err
}

// conflictEntry describes one diverged log entry.
func conflictEntry(e *repl.Entry) conflict.Entry {
	ce := conflict.Entry{Index: e.Index, Epoch: e.Epoch.String(), Time: time.Unix(0, e.Time).UTC(), Revision: e.Rev}
	if e.Merge {
		ce.Summary = "merge after an earlier split brain"
		return ce
	}
	ce.Request = append([]byte(nil), e.Data...)
	var req pb.InternalRaftRequest
	if err := req.Unmarshal(e.Data); err != nil {
		ce.Summary = "undecodable request: " + err.Error()
	} else {
		ce.Summary = conflict.Summarize(&req)
	}
	return ce
}

// changedKeys returns the final state of every key changed in (base, cur].
// Where the history below compacted is gone, live keys modified after base
// are still found; deletions there are not (they remain among the
// entries), which the returned note says.
func (s *Server) changedKeys(base, cur, compacted int64) ([]conflict.Key, string, error) {
	keys := map[string]conflict.Key{}
	note := ""
	from := base + 1
	if from < compacted {
		note = fmt.Sprintf("history from revision %d to %d was compacted: keys deleted there are not listed as keys (their deletes are among the entries)", from, compacted)
		res, _, err := s.store.Range([]byte{0}, []byte{0}, mvcc.RangeOptions{})
		if err != nil {
			return nil, "", err
		}
		for _, kv := range res.KVs {
			if kv.ModRevision > base {
				keys[string(kv.Key)] = conflict.Key{Key: kv.Key, Value: kv.Value, ModRevision: kv.ModRevision, Lease: kv.Lease}
			}
		}
		from = compacted
	}
	if from <= cur {
		evs, _, err := s.store.History(from, cur, 0)
		if err != nil {
			return nil, "", err
		}
		for _, ev := range evs {
			k := conflict.Key{Key: ev.Kv.Key, ModRevision: ev.Kv.ModRevision}
			if ev.Type == mvccpb.DELETE {
				k.Deleted = true
			} else {
				k.Value, k.Lease = ev.Kv.Value, ev.Kv.Lease
			}
			keys[string(k.Key)] = k
		}
	}
	out := make([]conflict.Key, 0, len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i].Key) < string(out[j].Key) })
	return out, note, nil
}

// onMergeReq: the core, leading, asks for the merge entry for a follower
// that lost a split brain and had reached revision rev. It goes into the
// next batch.
func (s *Server) onMergeReq(rev int64) {
	r := s.repl
	_, cur, _ := s.store.Revs()
	target := max(rev, cur) + 1
	s.log.Warn("merging after a split brain: the revision jumps above both sides' and history below it is compacted",
		"peer-revision", rev, "revision", cur, "merge-revision", target)
	r.fwdq = append(r.fwdq, &proposal{merge: target})
}

// applyMerge applies a merge entry in the apply transaction: the store
// jumps to rev and compacts there. The caller cancels every watch once
// the batch is visible.
func (s *Server) applyMerge(tx storage.WriteTx, rev int64) (*compactJob, error) {
	if err := s.store.Jump(rev); err != nil {
		return nil, err
	}
	c, err := s.store.Compact(tx, rev)
	if err != nil {
		return nil, err
	}
	return &compactJob{c: c}, nil
}
