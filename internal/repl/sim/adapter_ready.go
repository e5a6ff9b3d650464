package sim

import (
	"strings"

	"github.com/dyad-db/dyad/internal/repl"
)

// The adapter's Ready loop: carrying out what the core asks (persist,
// send, apply, answer, serve, fence, keep conflicts, merge) in the order
// the driver does, and applying committed entries to the store.

// process carries out every Ready of the core, as the driver does. It
// reports whether any did more than send heartbeats.
func (n *node) process() bool {
	busy := false
	for n.n != nil && n.n.HasReady() {
		rd := n.n.Ready()
		n.narrowGrant(rd.ReadGrant)
		n.n.Advance()
		if n.carryOut(&rd) {
			busy = true
		}
		n.widenGrant(rd.ReadGrant)
	}
	return busy
}

func (n *node) carryOut(rd *repl.Ready) bool {
	w := n.w
	busy := !rd.HardState.IsEmpty() || len(rd.Entries) > 0 || len(rd.CommittedEntries) > 0 || len(rd.ReadStates) > 0 ||
		rd.RoleChange != nil || len(rd.Serve) > 0 || len(rd.Snapshot) > 0 || rd.SplitBrain != nil || rd.Merge != 0 || rd.Stuck != nil || rd.Fence
	if rd.Truncate != 0 {
		busy = true
		n.truncate(rd.Truncate)
	}
	n.persist(rd)
	for _, m := range rd.Messages {
		busy = busy || m.Kind != repl.KindHeartbeat
		for to := range w.parties {
			if to != n.idx && (m.To == 0 || m.To == uint64(to+1)) {
				w.net.Send(Packet{From: n.idx, To: to, Payload: m})
			}
		}
	}
	if len(rd.CommittedEntries) > 0 {
		// After a restart the core hands out only entries it took in this
		// run: the ones on disk between Applied and the first of them are
		// replayed from the log (the WAL replay after consistent_index).
		for i := n.applied + 1; i < rd.CommittedEntries[0].Index; i++ {
			if e, ok := n.disk.At(i); ok {
				n.apply(e)
			}
		}
	}
	for _, e := range rd.CommittedEntries {
		n.apply(e)
	}
	if len(rd.CommittedEntries) > 0 {
		n.n.Applied(n.applied)
	}
	for _, r := range rd.ReadStates {
		op := n.reads[r.ID]
		delete(n.reads, r.ID)
		if op == nil {
			continue
		}
		if r.Refused {
			w.finish(op, Output{}, true)
			continue
		}
		n.ready = append(n.ready, released{op: op, index: r.Index})
	}
	n.serveReads()
	if rc := rd.RoleChange; rc != nil {
		w.tracef("node %d: %s -> %s: %s (epoch %s)", n.idx, rc.From, rc.To, rc.Reason, rc.Epoch)
		n.checkRoleChange(rc)
		w.roles = append(w.roles, RoleEvent{At: w.q.Now(), Node: n.idx, From: rc.From.String(), To: rc.To.String(), Reason: rc.Reason})
		if rc.SteppedDown || rc.LeftReplica {
			for _, id := range sortedKeys(n.puts) {
				w.finish(n.puts[id], Output{Unknown: true}, true) // "request timed out"
				delete(n.puts, id)
			}
		}
	}
	if rd.Stuck != nil {
		w.tracef("node %d stuck: %q", n.idx, *rd.Stuck)
	}
	w.stats.SplitBrains += rd.Counters.SplitBrains
	if rd.Fence {
		n.runFence()
	}
	if res := rd.HandoverResult; res != nil {
		n.handoverDone(res)
	}
	for _, s := range rd.Serve {
		n.serve(s)
	}
	for _, c := range rd.Snapshot {
		if c.Last {
			n.install(c)
		}
	}
	if sb := rd.SplitBrain; sb != nil {
		for _, e := range n.disk.Log()[min(sb.DivergedAt, uint64(n.disk.Len())):] {
			if e.ReqID != 0 {
				w.check.Conflict(n.idx, e.ReqID)
			}
		}
		w.tracef("node %d keeps its writes after index %d as conflict records", n.idx, sb.DivergedAt)
		n.n.ConflictsKept(false, nil)
	}
	if rd.Merge != 0 {
		target := max(rd.Merge, n.lastRev()) + 1
		w.tracef("node %d merges above revision %d", n.idx, target-1)
		_ = n.n.Propose([]repl.Entry{{Merge: true, Data: repl.MergeData(target), Rev: target, Time: n.now()}})
	}
	return busy
}

// apply applies a committed entry to the store and answers its client if
// this node took it.
func (n *node) apply(e repl.Entry) {
	w := n.w
	if e.Index <= n.applied {
		return
	}
	if e.Index != n.applied+1 {
		w.check.Fail("driver", "node %d asked to apply entry %d after %d", n.idx, e.Index, n.applied)
		return
	}
	if !e.Merge && e.Rev != n.rev+1 {
		w.check.Fail("revision-gap", "node %d applies entry %d at revision %d after revision %d", n.idx, e.Index, e.Rev, n.rev)
	}
	key := n.applyKV(e)
	n.applied, n.disk.Applied = e.Index, e.Index
	id := e.ReqID
	if e.Merge {
		id = mergeID | uint64(n.rev)
	}
	w.check.Applied(n.idx, e.Index, id, n.rev, EpochID{Term: e.Epoch.Term, Node: e.Epoch.Node}, e.Solo)
	if e.Origin == n.id {
		if op := n.puts[e.ReqID]; op != nil {
			delete(n.puts, e.ReqID)
			if w.finish(op, Output{Rev: e.Rev}, false) {
				w.check.Ack(n.idx, e.ReqID, e.Index, key, e.Rev, EpochID{Term: e.Epoch.Term, Node: e.Epoch.Node}, e.Solo)
			}
		}
	}
}

// applyKV changes the store; it returns the key written ("" for a merge).
func (n *node) applyKV(e repl.Entry) string {
	if e.Merge {
		if rev, err := e.MergeRev(); err == nil && rev > n.rev {
			n.rev = rev
		}
		return ""
	}
	key, value, _ := strings.Cut(string(e.Data), "\x00")
	n.kv[key] = kvAt{value: value, modRev: e.Rev}
	n.rev = e.Rev
	return key
}

// serveReads answers released reads whose index is applied.
func (n *node) serveReads() {
	k := 0
	for _, r := range n.ready {
		if r.index > n.applied {
			n.ready[k] = r
			k++
			continue
		}
		kv, ok := n.kv[r.op.in.Key]
		r.op.leads = n.n.Role().Leads()
		n.w.finish(r.op, Output{Rev: n.rev, Found: ok, Value: kv.value, ModRev: kv.modRev}, false)
	}
	n.ready = n.ready[:k]
}
