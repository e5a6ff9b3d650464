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
	"github.com/dyad-db/dyad/internal/transport"
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

// onSplitBrain handles a follower's log that holds writes it acknowledged
// alone and the leader does not have.
func (s *Server) onSplitBrain(leader []repl.EpochRecord) {
	r := s.repl
	path, set, created, err := s.exportConflicts(leader)
	if err != nil {
		s.fail(fmt.Errorf("writing the conflict records of a split brain: %w", err))
		return
	}
	r.conflictSet = path
	if created {
		s.m.SplitBrains.Inc()
		s.m.ConflictKeys.Add(float64(len(set.Keys)))
		s.log.Error("split brain: this node acknowledged writes alone that the leader's history does not have; they are kept as conflict records (see dyad resolve)",
			"conflict-set", path, "diverged-entries", len(set.Entries), "keys", len(set.Keys), "diverged-after-index", set.DivergedAt, "incomplete", set.Incomplete)
	}
	if r.cfg.ManualSplitBrain && !conflict.Accepted(path) {
		s.setStuck("split brain (policy manual): this node stopped serving; inspect its conflict records and run dyad resolve accept (docs/OPERATIONS.md, split brain)")
		s.setRole(repl.RoleWaiting, r.stuck)
		return
	}
	_, cur, _ := s.store.Revs()
	r.mergeRev = cur
	s.askMerge()
}

// exportConflicts writes the conflict set of this node's diverged suffix
// (once per split brain: a repeat finds the file and returns it).
func (s *Server) exportConflicts(leader []repl.EpochRecord) (path string, set *conflict.Set, created bool, err error) {
	r := s.repl
	d := repl.Divergence(r.epochs, leader, s.appliedIdx)
	own := repl.Last(r.epochs).Epoch
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

// askMerge asks the leader to merge past this node's revision.
func (s *Server) askMerge() {
	r := s.repl
	r.mergeAsked = r.clock.Now()
	m := &transport.Message{Class: transport.Control, Kind: repl.KindMergeReq, Payload: repl.MergeData(r.mergeRev)}
	if err := r.tr.Send(m); err != nil {
		s.log.Warn("merge request not sent", "err", err)
	}
}

// onMergeReq: the leader logs the merge entry for a follower that lost a
// split brain and had reached revision rev. Repeats of a request already
// served (rev below the last jump) are ignored.
func (s *Server) onMergeReq(rev int64) {
	r := s.repl
	if !s.Role().Leads() || rev < r.mergedAbove {
		return
	}
	_, cur, _ := s.store.Revs()
	target := max(rev, cur) + 1
	r.mergedAbove = target
	s.log.Warn("merging after a split brain: the revision jumps above both sides' and history below it is compacted",
		"peer-revision", rev, "revision", cur, "merge-revision", target)
	s.leadBatch(&proposal{merge: target})
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

// splitBrainTick runs every tick: it notices the operator's acceptance of
// a split brain held by the manual policy, and drives the loser's merge.
func (s *Server) splitBrainTick(now int64) {
	r := s.repl
	if r.stuck != "" && r.conflictSet != "" && conflict.Accepted(r.conflictSet) {
		s.log.Warn("split brain accepted by the operator: giving up this node's diverged history, which stays in its conflict records", "conflict-set", r.conflictSet)
		s.setStuck("") // the role rules follow the leader again
	}
	if r.mergeRev == 0 || s.Role() != repl.RoleReplica {
		return
	}
	if s.peerFresh(now) && r.peer.Role.Leads() && r.peer.Rev > r.mergeRev {
		r.mergeRev = 0
		// No index floor: this node's diverged suffix goes (it is in the
		// conflict records), and only a snapshot asked for from here on,
		// taken after the merge, is accepted.
		s.askSnapshot(0)
		return
	}
	if now-r.mergeAsked > int64(r.cfg.Lease) {
		s.askMerge()
	}
}

// setStuck records why this node waits for an operator ("" when it no
// longer does); Status reports it among its errors.
func (s *Server) setStuck(why string) {
	s.repl.stuck = why
	s.repl.stuckWhy.Store(&why)
}

// splitLeaders applies rule 1 when this node leads alone and hears its
// peer lead too. A node that should win but keeps hearing its peer lead
// for 3 leases yields anyway: the peer evidently does not hear it (a
// one-way link), and only the side that hears can end the split.
func (s *Server) splitLeaders(now int64) {
	r := s.repl
	from := repl.SoloFrom(r.epochs, s.memberID)
	wrote := from != 0 && s.appliedIdx >= from
	peerWrote := r.peer.WroteSolo()
	if r.bothLeadSince == 0 {
		s.countFalseFailover(now) // the peer promoted while this node led
	}
	if repl.YieldAfterSplit(wrote, peerWrote, r.cfg.Preferred) {
		r.bothLeadSince = 0
		if wrote && peerWrote {
			s.stepDown("split brain: both nodes acknowledged writes alone; the preferred zone's history wins")
		} else {
			s.stepDown("both nodes led while apart; this one yields to the peer")
		}
		r.ledLast = false
		return
	}
	if r.bothLeadSince == 0 {
		r.bothLeadSince = now
		return
	}
	if now-r.bothLeadSince > 3*int64(r.cfg.Lease) {
		r.bothLeadSince = 0
		s.stepDown("the peer keeps leading although this node should: it does not hear this node, so this one yields")
		r.ledLast = false
	}
}
