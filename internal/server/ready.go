package server

import (
	"encoding/binary"
	"runtime"

	"github.com/dyad-db/dyad/internal/failpoint"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

// handleReady carries out everything the core has decided, one Ready at a
// time, in the order repl.Ready gives: drop a suffix, persist, send,
// release, then the
// rest (slow effects go off the loop and come back as inputs). Called by
// the apply loop after every input it gives the core.
//
// A leader's own batch is the exception to "persist, then send" when the
// pair speaks ProtocolV3 or later (Node.SendsBeforeFlush): leadBatch calls
// this with the batch's transaction still open, so the entries go to the
// replica while the primary's flush runs, and the two zones flush at once
// (the core commits the lower of the two durable indexes). What else
// goes out then claims nothing of the batch: heartbeats carry the
// persisted index and the commit index, neither past the last flush; a
// replica's ack is sent only by Persisted, after its own flush.
func (s *Server) handleReady() {
	r := s.repl
	for r.node.HasReady() {
		rd := r.node.Ready()
		s.narrowGrant(rd.ReadGrant) // before any effect of rd (repl.ReadGrant)
		// journaled: entries a replica made durable in the last Ready and
		// has not applied yet (journalFollowed); their ack is in this
		// one. They are applied once it is sent, and before any other
		// effect of this Ready that could touch the store or the journal.
		journaled := r.journaled
		r.journaled = nil
		if journaled != nil && (rd.Truncate != 0 || len(rd.Entries) > 0 || !rd.HardState.IsEmpty()) {
			if s.applyJournaled(journaled) != nil {
				s.revokeGrant()
				r.node.Advance()
				return // the node stops (fail)
			}
			journaled = nil
		}
		if rd.Truncate != 0 && s.truncateSuffix(rd.Truncate) != nil {
			s.revokeGrant()
			r.node.Advance()
			return // the node stops (fail)
		}
		if s.persistReady(&rd) != nil {
			s.revokeGrant()
			r.node.Advance()
			return // the node stops (fail); nothing of this Ready is sent
		}
		// Heartbeats wait for the release when the Ready changes no role
		// (lateHeartbeats): the one a new commit index makes is then
		// not on the path of the write it acknowledges.
		// The Ready's messages join the turn's outbox (sendCore). Entries
		// and an ack are on a write's path: they go out now, with
		// whatever the turn queued before them, in one SendAll, before
		// this node's flush (sendProposed) or the replica's apply
		// (applyJournaled). So do a role change's, which keeps "persist,
		// send, release". The rest (late heartbeats, control) goes out
		// with the turn (applier).
		late := lateHeartbeats(&rd)
		now, acked := !late, false
		for i := range rd.Messages {
			m := &rd.Messages[i]
			if late && m.Kind == repl.KindHeartbeat {
				continue
			}
			queued := s.sendCore(m)
			now = now || m.Kind == repl.KindEntries || queued && m.Kind == repl.KindAck
			acked = acked || queued && m.Kind == repl.KindAck
		}
		if now {
			s.flushSends()
		}
		if acked {
			_ = failpoint.Hit(failpoint.AfterAck) // an error here has nothing left to undo
		}
		if journaled != nil && s.applyJournaled(journaled) != nil {
			s.revokeGrant()
			r.node.Advance()
			return // the node stops (fail)
		}
		// The counters and a role change that keeps or starts leadership
		// (going solo, promotion) come before the release, so that a
		// write acknowledged alone is never seen before the node says it
		// leads alone. A step-down comes after it: what the core
		// committed was acknowledged even if the node steps down in the
		// same Ready (a hand-over, once the replica acknowledged
		// everything), and the step-down fails only what is left.
		s.countCore(rd.Counters)
		rc := rd.RoleChange
		if rc != nil && !rc.SteppedDown {
			s.applyRoleChange(rc)
		}
		answered := s.releaseCommitted(rd.Commit)
		s.showCommitted(rd.Commit)
		s.repl.commitKept = rd.Commit
		if late {
			if answered == 1 && hasHeartbeat(&rd) {
				// A lone writer's handler, just readied by the release,
				// waits in this thread's run queue until the loop
				// blocks (Go runs a goroutine readied by a channel send
				// next on the sender's P, which the loop keeps), and the
				// heartbeat's send at the end of the turn (flushSends) is
				// a cgo call of tens of µs. Yield, so that the answer
				// goes out first. Only for
				// one caller: with many, the loop would wait behind all
				// of their handlers, and it is what bounds their
				// throughput.
				runtime.Gosched()
			}
			for i := range rd.Messages {
				if rd.Messages[i].Kind == repl.KindHeartbeat {
					s.sendCore(&rd.Messages[i])
				}
			}
		}
		if rc != nil && rc.SteppedDown {
			s.applyRoleChange(rc)
		}
		s.publish()
		s.answerReads(rd.ReadStates)
		s.publishGrant(rd.ReadGrant)
		if st := rd.Stuck; st != nil {
			why := *st
			r.stuckWhy.Store(&why)
		}
		if rd.Protocol != nil {
			s.setProtocol(*rd.Protocol)
		}
		for _, sr := range rd.Serve {
			job := catchupJob{id: sr.ID, snapshot: sr.Snapshot, req: sr.Catchup}
			select {
			case r.catchupc <- job:
			default: // the requester asks again
			}
		}
		if rd.Fence {
			r.fenceReq <- struct{}{} // never blocks: the core asks for one fence at a time
			s.log.Warn("primary lost: running the fence command before promoting")
		}
		if rd.DropSnapshot {
			s.dropIncoming()
		}
		for _, c := range rd.Snapshot {
			s.onSnapChunk(c)
		}
		if rd.SplitBrain != nil {
			s.onSplitBrain(rd.SplitBrain)
		}
		if rd.Merge != 0 {
			s.onMergeReq(rd.Merge)
		}
		if res := rd.HandoverResult; res != nil {
			s.onHandoverResult(res)
		}
		r.node.Advance()
	}
	if r.journaled != nil {
		// Persisted sent nothing (cannot happen: a replica acks what it
		// persists); never leave the entries unapplied past this call.
		es := r.journaled
		r.journaled = nil
		if s.applyJournaled(es) == nil {
			s.handleReady()
		}
	}
}

// lateHeartbeats reports whether the heartbeats of rd go out after its
// release instead of with its other messages. A primary's commit index
// moves when the replica's ack comes in, and the core answers with a
// heartbeat that tells the replica the new index (so that it shows the
// entries); sent first, that heartbeat's write to the transport (a cgo
// call into Cyclone, which sends it on the caller's thread) stood between
// the ack and the callers it releases. The release needs nothing of it:
// the callers' entries are durable on both nodes once the core commits
// them, and a replica that learns the index later shows them later, never
// wrongly (a linearizable read there waits for the commit index to cover
// what it held when the read came). A heartbeat is a datagram on a topic
// of its own (best effort), ordered against no other message, so nothing
// on the wire depends on when in the Ready it goes. A Ready that changes
// the role keeps the order of "persist, send, release": a heartbeat then
// announces the new role, and the rules around a role change (above) are
// written for that order.
func lateHeartbeats(rd *repl.Ready) bool {
	return rd.RoleChange == nil
}

// hasHeartbeat reports whether rd sends a heartbeat.
func hasHeartbeat(rd *repl.Ready) bool {
	for i := range rd.Messages {
		if rd.Messages[i].Kind == repl.KindHeartbeat {
			return true
		}
	}
	return false
}

// sendProposed carries out the Ready of a batch the leader has just
// proposed, up to last, while the batch's own transaction is still open
// (leadBatch): the entries go to the replica before this node's flush.
// The loop runs handleReady after every input it gives the core, so this
// Ready holds only what Propose added (the entries and their message);
// nothing in it touches the backend, whose write transaction this
// goroutine holds. The core counts the entries towards the commit index
// only once leadBatch reports them Persisted, after the flush.
func (s *Server) sendProposed(last uint64) {
	r := s.repl
	r.flushing = last
	s.handleReady()
	r.flushing = 0
}

// persistReady writes the hard state and the entries of rd that are not
// yet durable. A leader's own entries are applied and persisted with their
// batch (leadBatch, whose transaction may still be open: r.flushing); a
// replica's are applied and persisted here, with the epoch records, in one
// transaction, and reported at once, so that its ack always follows its
// own flush.
func (s *Server) persistReady(rd *repl.Ready) error {
	r := s.repl
	var es []repl.Entry
	for _, e := range rd.Entries {
		if e.Index > max(s.appliedIdx, r.flushing) {
			es = append(es, e)
		}
	}
	hs := rd.HardState
	if len(es) == 0 {
		if hs.IsEmpty() {
			return nil
		}
		err := s.be.Update(func(tx storage.WriteTx) error { return putHardState(tx, &hs) })
		if err != nil {
			s.fail(err)
			return err
		}
		if hs.Term != 0 {
			s.term.Store(hs.Term)
		}
		return nil
	}
	if r.fromCatchup {
		r.fromCatchup = false
		if err := failpoint.Hit(failpoint.CatchupApply); err != nil {
			s.fail(err)
			return err
		}
	}
	if s.journalAhead(es, &hs) {
		return s.journalFollowed(es)
	}
	if err := s.applyFollowed(es, &hs, false); err != nil {
		s.fail(err)
		return err
	}
	_, rev, _ := s.store.Revs()
	r.node.Persisted(s.appliedIdx, rev)
	r.node.Applied(s.appliedIdx)
	return nil
}

// journalFollowed makes a replica's entries durable before it applies
// them: it appends them to the journal (one fdatasync) and reports them
// Persisted, with the revision the leader recorded after the last one
// (applying them makes exactly that revision, or fails). The core then
// acknowledges them in the next Ready, and handleReady applies them once
// that ack is sent (applyJournaled): applying into the store's memory
// is nothing the ack promises, so it no longer delays it. A restart in
// between replays them from the journal, as any journaled batch.
func (s *Server) journalFollowed(es []repl.Entry) error {
	r := s.repl
	if err := s.appendJournal(es); err != nil {
		s.fail(err)
		return err
	}
	last := es[len(es)-1]
	r.node.Persisted(last.Index, last.Rev)
	r.journaled = es
	return nil
}

// applyJournaled applies entries journalFollowed made durable, and keeps
// the journal under its bound once they are in the store.
func (s *Server) applyJournaled(es []repl.Entry) error {
	r := s.repl
	err := s.applyFollowed(es, &repl.HardState{}, true)
	if err == nil {
		err = s.boundJournal(es[len(es)-1].Index)
	}
	if err != nil {
		s.fail(err)
		return err
	}
	r.node.Applied(s.appliedIdx)
	return nil
}

// putHardState writes the core's hard state in tx.
func putHardState(tx storage.WriteTx, hs *repl.HardState) error {
	for _, d := range hs.Drop {
		if err := replstore.DeleteEpoch(tx, d.Epoch); err != nil {
			return err
		}
	}
	for _, p := range hs.Put {
		if err := replstore.PutEpoch(tx, p); err != nil {
			return err
		}
	}
	if hs.Followed != 0 {
		if err := replstore.PutFollowed(tx, hs.Followed); err != nil {
			return err
		}
	}
	if hs.Term != 0 {
		return tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(hs.Term))
	}
	return nil
}

// sendCore queues a message of the core in the turn's outbox (r.out),
// which flushSends sends; false if it queued nothing (a kind the wire does
// not carry, or an ack an injected error drops).
func (s *Server) sendCore(m *repl.Message) bool {
	r := s.repl
	tm := &transport.Message{Kind: m.Kind, Version: m.Version, To: m.To, Term: m.Term, Index: m.Index, Flags: m.Flags}
	switch m.Kind {
	case repl.KindHeartbeat:
		tm.Class, tm.Payload = transport.Heartbeat, m.Heartbeat.Encode()
	case repl.KindEntries:
		tm.Class, tm.Payload = transport.Log, repl.EncodeEntries(m.Entries)
	case repl.KindAck:
		tm.Class = transport.Ack
		// An injected error before the ack drops it, as a lost message
		// would.
		if failpoint.Hit(failpoint.BeforeAck) != nil {
			return false
		}
	case repl.KindCatchupReq:
		tm.Class, tm.Payload = transport.Control, m.Catchup.Encode()
	case repl.KindSnapReq:
		tm.Class = transport.Control
	case repl.KindMergeReq:
		tm.Class, tm.Payload = transport.Control, repl.MergeData(m.MergeRev)
	case repl.KindHandover, repl.KindHandoverAck:
		tm.Class, tm.Payload = transport.Control, m.Handover.Encode()
	case repl.KindLeaving:
		tm.Class, tm.Payload = transport.Control, binary.BigEndian.AppendUint64(nil, m.Run)
	default:
		return false
	}
	r.out = append(r.out, tm)
	return true
}

// flushSends sends the messages the loop has queued (r.out) with one
// SendAll, in the order they were queued, so that in a participant with
// write batching (ddsnet, dds.Config.WriteBatch) the messages of a class
// share datagrams and one flush. A message the transport refuses is
// logged and dropped, as a refused Send was; the ones after it are still
// sent. Called on the apply loop only (it owns r.out): at the end of every
// turn and wherever a Ready's messages must leave at once (handleReady).
func (s *Server) flushSends() {
	r := s.repl
	if r == nil || len(r.out) == 0 {
		return
	}
	for ms := r.out; len(ms) > 0; {
		n, err := transport.SendAll(r.tr, ms)
		if err == nil || n >= len(ms) {
			break
		}
		s.log.Debug("replication message not sent", "kind", ms[n].Kind, "err", err)
		ms = ms[n+1:]
	}
	clear(r.out)
	r.out = r.out[:0]
}

// countCore adds the core's counters to the metrics.
func (s *Server) countCore(c repl.Counters) {
	s.m.StaleAnswers.Add(float64(c.StaleAnswers))
	s.m.Failovers.Add(float64(c.Failovers))
	s.m.FalseFailovers.Add(float64(c.FalseFailovers))
	s.m.SoloEntered.Add(float64(c.SoloEntered))
	s.countRefusals(&c)
}
