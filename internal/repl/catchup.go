package repl

// Catch-up and snapshot resync (docs/ARCHITECTURE.md, "Catch-up"): the
// replica asks, the leader's driver answers from its log or data file, and
// only an answer to the outstanding request is acted upon. A late one may
// describe a log position or a state this node has left since.

// nextReqID returns a new catch-up or snapshot request ID.
func (n *Node) nextReqID() uint64 {
	n.reqSeq++
	return n.reqSeq
}

// askCatchup asks the leader for the entries after the last one this node
// holds. It abandons a snapshot being requested or received. A request
// for the same position as the outstanding one continues its series.
func (n *Node) askCatchup() {
	pr := n.peer
	n.endResync()
	req := CatchupReq{From: n.last + 1}
	switch {
	case n.probe.active():
		req = n.probe.req(n.epochs)
	case n.last > 0:
		// The epoch stored with the entry itself (the history may place
		// it in a later solo epoch that adopted it).
		req.Prev = n.lastEpoch
	}
	id := n.nextReqID()
	if pr.Catchup.Req == 0 || pr.catchupPos != req {
		pr.Catchup.First = id
	}
	pr.Catchup.Req, pr.catchupPos = id, req
	pr.asked = n.now
	n.send(Message{Kind: KindCatchupReq, Term: id, Index: req.From, Catchup: req})
}

// askSnapshot asks the leader for a snapshot of its data file that holds
// at least the entries up to floor. Until it is installed (or abandoned)
// the replica is not verified and holds no read lease (Status.Resyncing).
// A request repeated with the same floor continues the series.
func (n *Node) askSnapshot(floor uint64) {
	pr := n.peer
	n.dropIncoming()
	id := n.nextReqID()
	if pr.Snap.Req == 0 || pr.snapMin != floor {
		pr.Snap.First = id
	}
	pr.Snap.Req, pr.snapMin = id, floor
	pr.Catchup.Req = 0
	n.unverify()
	pr.asked = n.now
	n.send(Message{Kind: KindSnapReq, Term: id, Index: floor})
}

// endResync forgets the outstanding snapshot request and any snapshot
// being received.
func (n *Node) endResync() {
	n.dropIncoming()
	n.peer.Snap.Req = 0
}

// dropIncoming abandons a snapshot being received.
func (n *Node) dropIncoming() {
	if n.peer.snapID != 0 {
		n.peer.snapID = 0
		n.rd.DropSnapshot = true
	}
}

// stepEntries takes live entries or a catch-up answer (replica).
func (n *Node) stepEntries(m *Message) {
	if n.role != RoleReplica {
		return
	}
	pr := n.peer // m is from it (Admit)
	if m.Kind == KindCatchup {
		if !pr.Catchup.answers(m.Term) {
			n.rd.Counters.StaleAnswers++ // not an answer to the outstanding request
			return
		}
		pr.Catchup.Req = 0
		if n.probe.active() {
			n.probeAnswered(m.Flags == 0)
			return
		}
		if m.Flags != 0 {
			n.catchupRefused(m)
			return
		}
	}
	n.followEntries(m.Entries, m.Kind == KindCatchup)
}

// followEntries takes entries from the leader, in order, to persist.
func (n *Node) followEntries(es []Entry, fromCatchup bool) {
	if fromCatchup {
		// The leader checked the epoch of this node's entry before the
		// first one asked for. Only an answer to the outstanding request
		// gets here: an older one may have checked a log this node no
		// longer has.
		n.verified = true
	}
	i := 0
	for i < len(es) && es[i].Index <= n.last {
		i++ // already held (catch-up overlapping the live stream)
	}
	es = es[i:]
	if len(es) == 0 {
		return // caught up
	}
	if !n.verified || es[0].Index != n.last+1 {
		// Not yet known to be a prefix of the leader's log, or a gap:
		// the live stream ran ahead. Fetch from the log; not while
		// merging after a split brain (the leader would only say again
		// that the logs diverged: the snapshot after the merge comes
		// next).
		if n.peer.Catchup.Req == 0 && n.peer.Snap.Req == 0 && n.mergeRev == 0 && n.dropAt == 0 {
			n.askCatchup()
		}
		return
	}
	if !fromCatchup && es[0].Epoch.Term < n.following.Term {
		// Live samples of an epoch older than the one this replica
		// follows (an earlier leader's, still in flight): dropped, and
		// a gap they leave is fetched from the leader's log. The floor
		// is the followed epoch, not this node's own newest one: a node
		// that led an epoch of its own in a newer term (a restart that
		// led alone without hearing the peer, then yielded) would
		// otherwise drop every entry of its lower-term leader, catch-up
		// answers included, and never catch up. A catch-up answer is
		// the leader's own log after an entry it checked, whatever
		// epochs it spans.
		return
	}
	shared := n.sharedIdx() // before this batch
	var put []EpochRecord
	for _, e := range es {
		if e.Epoch != n.epoch {
			put = append(put, EpochRecord{Epoch: e.Epoch, Start: e.Index})
			n.epoch = e.Epoch
		}
	}
	if len(put) > 0 {
		kept, dropped := TrimEpochs(append(n.epochs[:len(n.epochs):len(n.epochs)], put...), shared)
		n.epochs = kept
		hs := &n.rd.HardState
		hs.Put = append(hs.Put, put...)
		hs.Drop = append(hs.Drop, dropped...)
		hs.Term = n.epoch.Term
		n.maxTerm = max(n.maxTerm, n.epoch.Term)
	}
	lastE := es[len(es)-1]
	n.last, n.lastEpoch, n.lastSolo = lastE.Index, lastE.Epoch, lastE.Solo
	n.rd.Entries = append(n.rd.Entries, es...)
	n.unapplied = append(n.unapplied, es...)
	if fromCatchup {
		n.catchupAt = n.last
	}
}

// catchupRefused handles a catch-up the leader cannot serve from its log
// (an answer to the outstanding request).
func (n *Node) catchupRefused(m *Message) {
	keep := n.persisted
	if m.Flags&FlagDiverged != 0 {
		if SoloSuffix(n.epochs, m.Epochs, n.cfg.ID, n.persisted) {
			// Writes this node acknowledged alone are not in the leader's
			// history: split brain. They are never truncated before they
			// are kept as conflict records.
			if !n.splitPending {
				n.splitPending = true
				n.rd.SplitBrain = &SplitBrain{Leader: m.Epochs, DivergedAt: Divergence(n.epochs, m.Epochs, n.persisted)}
			}
			return
		}
		// A synchronous suffix that was never acknowledged. It is almost
		// always the last few writes of a primary killed under load:
		// dropped in place (Ready.Truncate), then the node catches up
		// from the leader's log. A snapshot resync costs time in
		// proportion to the data file (about 40 s for 1.4 GB in the
		// failover bench), this the suffix. The driver refuses a suffix
		// whose effects it cannot undo in place (Truncated), and the
		// node then resyncs from a snapshot. With nothing shared (keep
		// 0) the snapshot costs no more.
		keep = Divergence(n.epochs, m.Epochs, n.persisted)
		// Never below this node's commit index: what it committed, its
		// peer holds durably (a replica learns the index from its
		// leader; a solo suffix of its own was handled above), and
		// clients may have seen it. Divergence errs early: a leader that
		// went solo over entries its replica never acknowledged starts
		// its solo epoch at the first of them, while they stay stamped
		// with the epoch they were written in, so a replica that took
		// them from a catch-up answer labels them differently (sim seed
		// 9870 dropped 84 applied entries, and its revision went back).
		keep = max(keep, min(n.commit, n.persisted))
		if keep >= n.last && n.commit < n.last {
			// The histories agree to the end (the leader's may name an
			// epoch past entries it lost in a crash), but the answer
			// says the leader lacks this node's last entry: it was
			// never committed, so it goes, not the whole log to a
			// snapshot that must wait for the leader's log to reach it.
			keep = n.last - 1
		}
		// The commit index may be stale (a restart's bound, kept with
		// the last batch), and Divergence may err early, so the
		// entries above keep may still be the leader's: ask the leader
		// where the logs part before dropping them (probe).
		n.unverify()
		if n.last > keep+1 {
			n.probe = probe{lo: keep, hi: n.last}
			n.askCatchup()
			return
		}
		if n.drop(keep) {
			return
		}
	}
	n.askSnapshot(keep)
}

// drop asks the driver to drop the log after keep in place
// (Ready.Truncate); false when there is nothing to keep or nothing to
// drop (the caller resyncs from a snapshot).
func (n *Node) drop(keep uint64) bool {
	if keep == 0 || keep >= n.persisted {
		return false
	}
	n.unverify()
	n.dropAt = keep
	n.rd.Truncate = keep
	return true
}

// probe is a binary search for the last index at which this node's log
// and the leader's hold the same entry, between lo (the log is known or
// taken to match up to there: Divergence, or the commit index) and hi (a
// mismatch). Each step is an ordinary catch-up request from mid+1 naming
// the epoch this node's history gives mid (CatchupVerdict: the leader
// answers with entries if its entry at mid carries that epoch, otherwise
// FlagDiverged, or FlagLogGone where its log no longer reaches). No new
// message and no leader-side rule, so every version's leader answers it.
//
// Why a history label is a safe question: it equals the epoch stored
// with the entry, except in a range this node adopted when it started an
// epoch of its own (entries it held, stamped with an older epoch, that
// its history places in its new one). An epoch's entries are created by
// its own leader only, one per index, above that range, so no log holds
// an entry at such an index stamped with this node's epoch: the leader
// answers "diverged" there, and the search keeps less, never more. A
// match means the leader holds the entry this node holds at mid, and so
// (as every catch-up assumes) the same log up to there.
type probe struct{ lo, hi uint64 }

func (p probe) active() bool { return p.hi > p.lo+1 }

func (p probe) mid() uint64 { return p.lo + (p.hi-p.lo)/2 }

func (p probe) req(h []EpochRecord) CatchupReq {
	m := p.mid()
	return CatchupReq{From: m + 1, Prev: EpochAt(h, m)}
}

// probeAnswered takes the leader's answer to the outstanding probe
// (match: it served entries after mid) and asks the next one, or drops
// the log after the last match once the search is done. A later role
// change or a new run of the leader forgets the search (unverify).
func (n *Node) probeAnswered(match bool) {
	m := n.probe.mid()
	if match {
		n.probe.lo = m
	} else {
		n.probe.hi = m
	}
	if n.probe.active() {
		n.askCatchup()
		return
	}
	keep := n.probe.lo
	n.probe = probe{}
	if !n.drop(keep) {
		n.askSnapshot(keep)
	}
}

// Truncated reports the outcome of the drop Ready.Truncate asked for: err
// nil, the log now ends at the index asked for and st is the state on
// disk; otherwise nothing changed and the node resyncs from a snapshot
// holding at least that index. Either way a replica fetches from the
// leader next.
func (n *Node) Truncated(st RestartState, err error) {
	keep := n.dropAt
	n.dropAt = 0
	if keep == 0 {
		return // not asked for
	}
	if err != nil {
		if n.role == RoleReplica {
			n.askSnapshot(keep)
		}
		return
	}
	n.epochs = append([]EpochRecord(nil), st.Epochs...)
	n.epoch = Last(st.Epochs).Epoch
	n.last, n.persisted, n.applied = st.Last, st.Last, st.Applied
	n.nextApply, n.rev = st.Applied+1, st.Rev
	n.lastEpoch, n.lastSolo = st.LastEpoch, st.LastSolo
	n.unapplied = nil
	n.catchupAt = 0
	// The dropped entries were never committed: a commit index learnt
	// above st.Applied (a replica's is capped only by what it held) no
	// longer names entries this node holds.
	n.commit = min(n.commit, st.Applied)
	n.handedCommit = min(n.handedCommit, n.commit)
	if n.role == RoleReplica {
		n.askCatchup()
	}
}

// stepServeReq takes a catch-up or snapshot request (leader): the driver
// answers it, addressed to the asker.
func (n *Node) stepServeReq(m *Message) {
	if !n.role.Leads() {
		return
	}
	n.rd.Serve = append(n.rd.Serve, ServeRequest{To: m.From, ID: m.Term, Snapshot: m.Kind == KindSnapReq, Catchup: m.Catchup})
}

// stepSnapChunk takes one chunk of a snapshot. Chunks of any stream but
// the one answering the outstanding request are ignored: a snapshot
// nobody asked for may be older than what this node holds.
func (n *Node) stepSnapChunk(m *Message) {
	if n.role != RoleReplica {
		return
	}
	pr := n.peer // m is from it (Admit)
	first := false
	if pr.snapID == 0 {
		if !pr.Snap.answers(m.Term) || m.Index != 0 {
			n.rd.Counters.StaleAnswers++
			return
		}
		pr.snapID, pr.snapOff, first = m.Term, 0, true
	} else if m.Term != pr.snapID {
		n.rd.Counters.StaleAnswers++
		return
	}
	pr.asked = n.now
	if m.Index != pr.snapOff {
		n.askSnapshot(pr.snapMin) // out of order: ask again
		return
	}
	pr.snapOff += uint64(len(m.Chunk))
	last := m.Flags&FlagLast != 0
	n.rd.Snapshot = append(n.rd.Snapshot, SnapshotChunk{ID: m.Term, Offset: m.Index, Data: m.Chunk, First: first, Last: last, Floor: pr.snapMin})
	if last {
		pr.snapID = 0 // installing: Installed reports the outcome
	}
}

// CatchupVerdict is the leader's rule for answering a catch-up request c
// from its log, which holds [first, last] (first 0: empty); prev is the
// epoch stored with the leader's entry at c.From-1 when it holds it
// (havePrev). It returns 0 (send the entries from c.From on),
// FlagLogGone (the log no longer reaches back: the asker needs a
// snapshot) or FlagDiverged (the asker holds entries the leader's log
// lacks, or another epoch at c.From-1: its log is no prefix of the
// leader's; send the leader's epoch history).
func CatchupVerdict(c CatchupReq, first, last uint64, prev Epoch, havePrev bool) uint32 {
	if c.From <= 1 {
		if first > 1 {
			return FlagLogGone
		}
		return 0
	}
	switch {
	case c.From-1 > last:
		return FlagDiverged // the asker has entries this log lacks
	case first == 0 || c.From-1 < first || !havePrev:
		return FlagLogGone
	case prev != c.Prev:
		return FlagDiverged
	}
	return 0
}
