package server

import (
	"encoding/binary"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/failpoint"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

// onMessage handles one received message in the apply loop: forwarded
// writes and keep-alive replies here, every protocol message through the
// core. It releases m (transport.Message.Release) once handled unless what
// the node keeps of it aliases the payload (keepsPayload).
func (s *Server) onMessage(m *transport.Message) {
	if !keepsPayload(m) {
		defer m.Release()
	}
	r := s.repl
	switch m.Kind {
	case repl.KindForward, repl.KindReply:
		// The driver's own kinds: the core only admits them (Step
		// admits the rest).
		if !r.node.Admit(&repl.Message{Kind: m.Kind, From: m.From, To: m.To, Version: m.Version, Index: m.Index}) {
			s.handleReady() // counts the refusal
			return
		}
	}
	switch m.Kind {
	case repl.KindForward:
		f, err := repl.DecodeForward(m.Payload)
		if err != nil {
			return
		}
		s.onForward(m.From, f)
		return
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
		return
	case repl.KindAck:
		if failpoint.Hit(failpoint.BeforeRelease) != nil {
			return // an injected error loses the ack; a later one covers it
		}
	case repl.KindEntries:
		// Take every live batch already waiting before carrying out the
		// Ready: the replica applies them in one commit, as the leader
		// does with proposals. Other messages follow after.
		if !s.stepMessage(m) {
			return
		}
		later := s.gatherEntries()
		s.handleReady()
		for _, m := range later {
			s.onMessage(m)
		}
		return
	}
	if s.stepMessage(m) {
		s.handleReady()
	}
	r.fromCatchup = false // a catch-up answer the core did not take
}

// keepsPayload reports whether what the node keeps of m aliases its
// payload, so that m must never be released (its receive buffer is then
// the garbage collector's, not the transport's to reuse): entries (live or
// caught up) go into the log, the journal and the store as decoded, with
// Data aliasing the payload; a snapshot chunk is written as it is; a
// forwarded write's data is queued for the next batch. Every other kind
// decodes into values (decodeMessage) or is read at once, and is released
// once handled; TestReleasedKindsDoNotAlias checks each against its
// decoder, so a decoder that starts to alias fails there. An unknown kind
// is kept, to be safe.
func keepsPayload(m *transport.Message) bool {
	switch m.Kind {
	case repl.KindAck, repl.KindHeartbeat, repl.KindReply, repl.KindCatchupReq, repl.KindSnapReq,
		repl.KindMergeReq, repl.KindHandover, repl.KindHandoverAck, repl.KindLeaving:
		return false
	case repl.KindCatchup:
		return m.Flags == 0 // entries; with a flag, epochs or nothing
	}
	return true
}

// stepMessage decodes m and gives it to the core; false if it does not
// decode.
func (s *Server) stepMessage(m *transport.Message) bool {
	r := s.repl
	cm, err := decodeMessage(m)
	if m.Kind == repl.KindCatchup && m.Flags == 0 {
		r.fromCatchup = err == nil && len(cm.Entries) > 0
	}
	if err != nil {
		s.log.Debug("undecodable replication message", "kind", m.Kind, "err", err)
		return false
	}
	r.node.Step(cm)
	return true
}

// decodeMessage is the core's message for m. Entries, Chunk and a
// forward's data alias m.Payload (keepsPayload).
func decodeMessage(m *transport.Message) (repl.Message, error) {
	cm := repl.Message{Kind: m.Kind, From: m.From, To: m.To, Version: m.Version, Term: m.Term, Index: m.Index, Flags: m.Flags, Received: m.Received}
	var err error
	switch m.Kind {
	case repl.KindHeartbeat:
		cm.Heartbeat, err = repl.DecodeHeartbeat(m.Payload)
	case repl.KindEntries:
		cm.Entries, err = repl.DecodeEntries(m.Payload)
	case repl.KindCatchup:
		switch {
		case m.Flags&repl.FlagDiverged != 0:
			cm.Epochs, err = repl.DecodeEpochs(m.Payload)
		case m.Flags == 0:
			cm.Entries, err = repl.DecodeEntries(m.Payload)
		}
	case repl.KindCatchupReq:
		cm.Catchup, err = repl.DecodeCatchupReq(m.Payload)
	case repl.KindSnapChunk:
		cm.Chunk = m.Payload
	case repl.KindMergeReq:
		e := repl.Entry{Data: m.Payload}
		cm.MergeRev, err = e.MergeRev()
	case repl.KindHandover, repl.KindHandoverAck:
		cm.Handover, err = repl.DecodeHandover(m.Payload)
	case repl.KindLeaving:
		switch len(m.Payload) {
		case 0: // a sender without runs
		case 8:
			cm.Run = binary.BigEndian.Uint64(m.Payload)
		default:
			err = repl.ErrDecode
		}
	}
	return cm, err
}

// gatherEntries steps the live entries of the messages already waiting in
// the inbox (up to maxBatch entries), and returns the other messages it
// took, in order.
func (s *Server) gatherEntries() []*transport.Message {
	var later []*transport.Message
	for n := 0; n < maxBatch; n++ {
		select {
		case m := <-s.repl.inbox:
			if m.Kind != repl.KindEntries || len(later) > 0 {
				later = append(later, m) // keep the order behind any other message
				continue
			}
			s.stepMessage(m)
		default:
			return later
		}
	}
	return later
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

// applyFollowed applies and persists entries as the replica, with the hard
// state hs (the epoch records they start). Without a hard state (and
// without a merge) the entries are applied without a data-file commit and
// made durable by the journal (journal.go): the journal holds entries
// only, so a hard state must never ride on it, and such a batch, like a
// merge, is committed synchronously in one transaction. journaled: the
// entries are in the journal already (journalFollowed, which takes only
// entries without a hard state or a merge), so they are only applied.
func (s *Server) applyFollowed(es []repl.Entry, hs *repl.HardState, journaled bool) error {
	r := s.repl
	results := make([]applyResult, len(es))
	revs := make([]int64, len(es))
	evsOf := make([][]mvccEvent, len(es))
	jobOf := make([]*compactJob, len(es))
	_, before, _ := s.store.Revs()
	fn := func(tx storage.WriteTx) error {
		for i := range es {
			res, evs, job, rev, err := s.applyEntry(tx, &es[i])
			if err != nil {
				return err
			}
			if job != nil {
				res.physical = job.done
			}
			results[i], revs[i], evsOf[i], jobOf[i] = res, rev, evs, job
		}
		if err := putHardState(tx, hs); err != nil {
			return err
		}
		if err := replstore.PutCommitBound(tx, r.commitKept); err != nil {
			return err
		}
		last := es[len(es)-1].Index
		return tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(last))
	}
	var err error
	switch {
	case journaled:
		// Durable already (journalFollowed): only the apply is left.
		err = s.be.Apply(fn)
	case hs.IsEmpty() && !hasMerge(es):
		if err = s.be.Apply(fn); err == nil {
			err = s.journalBatch(es)
		}
	default:
		err = s.be.Update(fn)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.appliedIdx = es[len(es)-1].Index
	s.epoch = es[len(es)-1].Epoch
	if hs.Term != 0 {
		s.term.Store(hs.Term)
	}
	s.mu.Unlock()
	s.m.ProposalsApplied.Add(float64(len(es)))
	// Applied and durable here, but shown (and forwarded writes
	// answered) only once the commit index covers them: the primary may
	// not have flushed them yet (unshown.go).
	s.mu.Lock()
	for i := range es {
		u := unshown{index: es[i].Index, from: before + 1, rev: revs[i], events: evsOf[i], job: jobOf[i], merge: es[i].Merge}
		before = revs[i]
		if es[i].Origin == s.memberID && es[i].ReqID != 0 {
			if p := r.fwdWait[es[i].ReqID]; p != nil {
				delete(r.fwdWait, es[i].ReqID)
				u.fwd, u.result = p, results[i]
			}
		}
		r.unshown = append(r.unshown, u)
	}
	s.mu.Unlock()
	return nil
}

// releaseCommitted answers every leader batch up to the commit index, and
// returns how many callers it answered.
func (s *Server) releaseCommitted(commit uint64) (answered int) {
	r := s.repl
	role := s.Role()
	if !role.Leads() {
		return 0 // not leading: nothing of ours is acknowledged any more
	}
	n := 0
	for _, p := range r.inflight {
		if p.last > commit {
			break
		}
		if role == repl.RolePrimary {
			s.observeAckRoundTrip(time.Duration(r.clock.Now() - p.at))
		}
		answered += s.release(p)
		n++
	}
	r.inflight = r.inflight[n:]
	return answered
}

// release makes a committed batch visible and answers its callers, and
// returns how many it answered.
func (s *Server) release(p *pending) (answered int) {
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
			answered++
		}
	}
	return answered
}

// hasMerge reports whether es holds a merge entry.
func hasMerge(es []repl.Entry) bool {
	for i := range es {
		if es[i].Merge {
			return true
		}
	}
	return false
}
