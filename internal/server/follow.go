package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/failpoint"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

// onMessage handles one received message in the apply loop.
func (s *Server) onMessage(ctx context.Context, m *transport.Message) {
	if !s.accept(m) {
		return
	}
	r := s.repl
	switch m.Kind {
	case repl.KindHeartbeat:
		hb, err := repl.DecodeHeartbeat(m.Payload)
		if err != nil {
			return
		}
		now := r.det.Now()
		if r.det.Ended(hb.Run) {
			return // sent by a run of the peer that has ended
		}
		if r.peerSeen && hb.Run == r.peer.Run && hb.SentAt < r.peer.SentAt && (hb.Run != 0 || r.peer.SentAt-hb.SentAt < int64(r.cfg.Lease)) {
			// Overtaken by a newer one of the same run (heartbeats travel
			// best effort). Without runs (an older peer), a much older
			// SentAt is a restarted peer's new clock.
			return
		}
		r.peerID.Store(m.From)
		r.det.Heard(&hb, m.Received)
		r.peer, r.peerSeen = hb, true
		r.holdOff = ""
		if r.det.PeerDeaf(&hb, m.Received) {
			r.holdOff = "the peer does not hear this node"
		}
		if hb.MaxTerm > r.maxTerm {
			r.maxTerm = hb.MaxTerm
		}
		r.leaseUntil.Store(r.det.LeaseUntil())
		s.evaluate(ctx, now)
	case repl.KindAck:
		if s.Role() == repl.RoleSolo && m.Index > r.mark.acked && r.mark.epoch == s.currentEpoch() {
			r.mark.acked = m.Index // progress of a replica catching up (caughtUp)
		}
		if s.Role() == repl.RolePrimary && m.Index > r.ackIdx {
			if failpoint.Hit(failpoint.BeforeRelease) != nil {
				return // an injected error loses the ack; a later one covers it
			}
			r.ackIdx = m.Index
			s.releaseCommitted()
		}
	case repl.KindEntries, repl.KindCatchup:
		if s.Role() != repl.RoleReplica {
			return
		}
		if m.Kind == repl.KindCatchup {
			r.catchupReq = 0 // answered (accept checked it answers it)
			if m.Flags != 0 {
				s.onCatchupRefused(m)
				return
			}
		}
		es, err := repl.DecodeEntries(m.Payload)
		if err != nil {
			s.log.Error("bad entries from peer", "err", err)
			return
		}
		var later []*transport.Message
		if m.Kind == repl.KindEntries {
			// Apply every live batch already waiting in one commit, as the
			// leader does with proposals; other messages follow after.
			es, later = s.gatherEntries(es)
		}
		s.followEntries(es, m.Kind == repl.KindCatchup)
		for _, m := range later {
			s.onMessage(ctx, m)
		}
	case repl.KindForward:
		f, err := repl.DecodeForward(m.Payload)
		if err != nil {
			return
		}
		s.onForward(m.From, f)
	case repl.KindReply:
		rp, err := repl.DecodeReply(m.Payload)
		if err != nil {
			return
		}
		s.mu.Lock()
		c := r.kaWait[rp.ReqID]
		delete(r.kaWait, rp.ReqID)
		s.mu.Unlock()
		if c != nil {
			c <- rp
		}
	case repl.KindCatchupReq, repl.KindSnapReq:
		if !s.Role().Leads() {
			return
		}
		job := catchupJob{id: m.Term, snapshot: m.Kind == repl.KindSnapReq}
		if !job.snapshot {
			c, err := repl.DecodeCatchupReq(m.Payload)
			if err != nil {
				return
			}
			job.req = c
		}
		select {
		case r.catchupc <- job:
		default: // the requester asks again
		}
	case repl.KindSnapChunk:
		if s.Role() == repl.RoleReplica {
			s.onSnapChunk(m)
		}
	case repl.KindMergeReq:
		e := repl.Entry{Data: m.Payload}
		if rev, err := e.MergeRev(); err == nil {
			s.onMergeReq(rev)
		}
	case repl.KindLeaving:
		// Only from the peer's current run: a late message of an earlier
		// run must not end a later synchronous epoch (the later run may
		// hold a read lease in it). The run, not the term, names it: the
		// replica learns a new epoch's term from heartbeats, a tick after
		// the epoch starts, and a message naming the older term is as
		// good. A sender without runs names the epoch's term.
		current := len(m.Payload) == 8 && binary.BigEndian.Uint64(m.Payload) == r.det.PeerRun()
		if len(m.Payload) == 0 {
			current = m.Term == s.currentEpoch().Term
		}
		if !current {
			return
		}
		// The run's heartbeats still in flight are stale: the peer is
		// gone until a new run is heard.
		r.det.PeerLeft()
		r.peerSeen = false
		if s.Role() == repl.RolePrimary {
			s.goSolo("the replica is stopping")
		}
	case repl.KindHandover:
		s.onHandover(m)
	case repl.KindHandoverAck:
		s.onHandoverAck(m)
	}
}

// gatherEntries appends to es the live entries of the messages already
// waiting in the inbox (up to maxBatch entries), and returns the other
// messages it took, in order.
func (s *Server) gatherEntries(es []repl.Entry) ([]repl.Entry, []*transport.Message) {
	var later []*transport.Message
	for len(es) < maxBatch {
		select {
		case m := <-s.repl.inbox:
			if m.Kind != repl.KindEntries {
				later = append(later, m)
				continue
			}
			if !s.accept(m) {
				continue
			}
			more, err := repl.DecodeEntries(m.Payload)
			if err != nil || len(more) == 0 || more[0].Index != es[len(es)-1].Index+1 {
				later = append(later, m) // not contiguous: handled on its own
				continue
			}
			es = append(es, more...)
		default:
			return es, later
		}
	}
	return es, later
}

// onForward takes a request forwarded by the replica.
func (s *Server) onForward(from uint64, f repl.Forward) {
	r := s.repl
	switch f.Op {
	case repl.ForwardKeepAlive:
		rp := repl.Reply{ReqID: f.ReqID}
		// A primary without its role lease answers as LeaseRenew does.
		if !s.Role().Leads() || s.Role() == repl.RolePrimary && !s.HasLeader() {
			rp.Err = repl.ReplyNotPrimary
		} else if len(f.Data) == 8 {
			ttl, err := s.lessor.Renew(int64(binary.BigEndian.Uint64(f.Data)))
			rp.TTL = ttl
			if err != nil {
				rp.Err = repl.ReplyLeaseNotFound
			}
		}
		r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindReply, Payload: rp.Encode()})
	case repl.ForwardWrite:
		if !s.Role().Leads() || !r.dedup.add(from, f.ReqID) {
			return // the replica's caller times out; a duplicate is dropped
		}
		req := &pb.InternalRaftRequest{}
		if err := req.Unmarshal(f.Data); err != nil {
			return
		}
		r.fwdq = append(r.fwdq, &proposal{req: req, origin: from, reqID: f.ReqID})
	}
}

// followEntries applies entries received from the primary, in order.
func (s *Server) followEntries(es []repl.Entry, fromCatchup bool) {
	r := s.repl
	if fromCatchup {
		// The leader checked the epoch of our entry before the first one
		// asked for. Only an answer to the outstanding request gets here:
		// an older one may have checked a log this node no longer has.
		r.verified = true
	}
	i := 0
	for i < len(es) && es[i].Index <= s.appliedIdx {
		i++ // already applied (catch-up overlapping the live stream)
	}
	es = es[i:]
	if len(es) == 0 {
		if fromCatchup {
			return // caught up
		}
		return
	}
	if !r.verified || es[0].Index != s.appliedIdx+1 {
		// Not yet known to be a prefix of the leader's log, or a gap:
		// the live stream ran ahead of us. Fetch from the log.
		if r.catchupReq == 0 && r.snapReq == 0 {
			s.askCatchup()
		}
		return
	}
	if es[0].Epoch.Term < s.currentEpoch().Term {
		return // an old epoch's samples
	}
	if fromCatchup {
		if err := failpoint.Hit(failpoint.CatchupApply); err != nil {
			s.fail(err)
			return
		}
	}
	if err := s.applyFollowed(es); err != nil {
		s.fail(err)
		return
	}
	// An injected error before the ack drops it, as a lost message would.
	if failpoint.Hit(failpoint.BeforeAck) == nil {
		r.tr.Send(&transport.Message{Class: transport.Ack, Kind: repl.KindAck, Index: s.appliedIdx})
		_ = failpoint.Hit(failpoint.AfterAck) // an error here has nothing left to undo
	}
	if fromCatchup {
		s.askCatchup() // the next chunk, or an empty answer when caught up
	}
}

// applyFollowed applies and persists entries as the replica.
func (s *Server) applyFollowed(es []repl.Entry) error {
	r := s.repl
	results := make([]applyResult, len(es))
	var events []mvccEvent
	var jobs []compactJob
	epoch := s.currentEpoch()
	merged := false
	var newEpochs []repl.EpochRecord
	_, before, _ := s.store.Revs()
	shared := s.sharedIdx() // before this batch: applied from the leader
	var trimmed []repl.EpochRecord
	err := s.be.Update(func(tx storage.WriteTx) error {
		for i := range es {
			e := &es[i]
			req := &pb.InternalRaftRequest{}
			if !e.Merge {
				if err := req.Unmarshal(e.Data); err != nil {
					return fmt.Errorf("entry %d: %w", e.Index, err)
				}
			}
			if e.Epoch != epoch {
				rec := repl.EpochRecord{Epoch: e.Epoch, Start: e.Index}
				if err := repl.PutEpoch(tx, rec); err != nil {
					return err
				}
				newEpochs = append(newEpochs, rec)
				epoch = e.Epoch
			}
			var res applyResult
			var evs []mvccEvent
			var job *compactJob
			var err error
			if e.Merge {
				var rev int64
				if rev, err = e.MergeRev(); err == nil {
					job, err = s.applyMerge(tx, rev)
				}
				merged = true
			} else {
				res, evs, job, err = s.apply(tx, req)
			}
			if err != nil {
				return err
			}
			if _, rev, _ := s.store.Revs(); e.Rev != 0 && rev != e.Rev {
				return fmt.Errorf("entry %d: revision %d here, %d on the leader: the histories differ", e.Index, rev, e.Rev)
			}
			if job != nil {
				jobs = append(jobs, *job)
				res.physical = job.done
			}
			results[i] = res
			events = append(events, evs...)
			if err := repl.Append(tx, e); err != nil {
				return err
			}
		}
		if len(newEpochs) > 0 {
			var err error
			if trimmed, err = repl.TrimEpochs(tx, append(r.epochs[:len(r.epochs):len(r.epochs)], newEpochs...), shared); err != nil {
				return err
			}
		}
		last := es[len(es)-1].Index
		if err := tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(last)); err != nil {
			return err
		}
		return tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(epoch.Term))
	})
	if err != nil {
		return err
	}
	if len(newEpochs) > 0 {
		r.epochs = trimmed
	}
	r.lastEpoch, r.lastSolo = es[len(es)-1].Epoch, es[len(es)-1].Solo
	s.mu.Lock()
	s.appliedIdx = es[len(es)-1].Index
	s.epoch = epoch
	s.term.Store(epoch.Term)
	if epoch.Term > r.maxTerm {
		r.maxTerm = epoch.Term
	}
	s.mu.Unlock()
	_, cur, _ := s.store.Revs()
	s.store.MarkDurable(cur)
	// Revisions up to before that the hub never got (the batches a
	// step-down dropped, now confirmed by the new primary's log) are
	// visible from now on too: their watchers replay them from history.
	s.hub.NotifyFrom(before+1, cur, events)
	if merged {
		s.hub.Reset()
		s.log.Warn("merged after a split brain: every watch was cancelled as compacted", "revision", cur)
	}
	s.signalVisible()
	for _, j := range jobs {
		s.compactc <- j
	}
	s.m.ProposalsApplied.Add(float64(len(es)))
	s.mu.Lock()
	for i := range es {
		if es[i].Origin != s.memberID || es[i].ReqID == 0 {
			continue
		}
		if p := r.fwdWait[es[i].ReqID]; p != nil {
			delete(r.fwdWait, es[i].ReqID)
			p.done <- results[i]
		}
	}
	s.mu.Unlock()
	return nil
}

// releaseCommitted answers every leader batch the commit rule allows.
func (s *Server) releaseCommitted() {
	r := s.repl
	var commit uint64
	switch s.Role() {
	case repl.RolePrimary:
		commit = r.ackIdx
	case repl.RoleSolo:
		commit = s.appliedIdx
	default:
		return // not leading: nothing of ours is acknowledged any more
	}
	n := 0
	for _, p := range r.inflight {
		if p.last > commit {
			break
		}
		if s.Role() == repl.RolePrimary {
			s.observeAckRoundTrip(time.Duration(r.det.Now() - p.at))
		}
		s.release(p)
		n++
	}
	r.inflight = r.inflight[n:]
}

// release makes a committed batch visible and answers its callers.
func (s *Server) release(p *pending) {
	s.store.MarkDurable(p.rev)
	// From the batch's first revision: batches dropped by a step-down
	// below it become visible with it (their watchers replay them).
	s.hub.NotifyFrom(p.from, p.rev, p.events)
	if p.merged {
		s.hub.Reset()
		s.log.Warn("merged after a split brain: every watch was cancelled as compacted", "revision", p.rev)
	}
	s.signalVisible()
	for _, j := range p.jobs {
		s.compactc <- j
	}
	for i, q := range p.batch {
		if q.done != nil {
			q.done <- p.results[i]
		}
	}
}
