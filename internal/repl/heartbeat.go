package repl

// Heartbeats, acks and leaving: what times the leases and carries the
// peer's state.

// sendHeartbeat queues this node's heartbeat (every tick).
func (n *Node) sendHeartbeat() {
	var start uint64
	if n.role.Leads() && len(n.epochs) > 0 {
		start = Last(n.epochs).Start
	}
	// The leader withholds its echo (the replica's read lease) while the
	// replica is not synchronous: in solo, once acks are overdue, and in a
	// synchronous epoch until the replica has acknowledged everything
	// before the epoch's start (writes acknowledged while solo). A
	// replica's echo is its primary's role lease; a waiting node grants
	// nothing (its peer may be about to follow it, or to lead).
	grant := n.role == RoleReplica ||
		n.role == RolePrimary && !n.ackOverdue() && n.peer.Match+1 >= start
	hb := Heartbeat{
		Role: n.role, Epoch: n.epoch, Applied: n.persisted, Commit: n.commitIdx(),
		Rev: n.rev, LedLast: n.ledLast, MaxTerm: n.maxTerm, EpochStart: start,
		CatchingUp: n.role == RoleReplica && !n.verified, HeardAgo: n.det.Silence(n.now),
		Run: n.det.Run,
	}
	if grant {
		hb.SentAt, hb.Echo = n.det.Outgoing(n.now)
		hb.EchoRun = n.det.PeerRun()
	} else {
		hb.SentAt = n.now
	}
	if n.role == RoleReplica {
		hb.Epoch = n.following
	}
	if n.role.Leads() {
		hb.SoloFrom = SoloFrom(n.epochs, n.cfg.ID)
	}
	n.send(Message{Kind: KindHeartbeat, Term: hb.Epoch.Term, Index: hb.Applied, Heartbeat: hb})
}

// stepHeartbeat takes the peer's heartbeat and runs the role rules.
func (n *Node) stepHeartbeat(m *Message) {
	hb := m.Heartbeat
	pr := n.peer
	if n.det.Stale(&hb) {
		return // sent by a run of the peer that has ended, or overtaken
	}
	if pr.Heard && hb.Run == pr.Last.Run && hb.SentAt < pr.Last.SentAt && (hb.Run != 0 || pr.Last.SentAt-hb.SentAt < int64(n.cfg.Lease)) {
		// Overtaken by a newer one of the same run (heartbeats travel
		// best effort). Without runs (an older peer), a much older SentAt
		// is a restarted peer's new clock.
		return
	}
	newRun := pr.Heard && hb.Run != 0 && hb.Run != pr.Last.Run
	n.det.HeardFrom(&hb, m.Received, n.grantsLease(&hb))
	pr.Last, pr.Heard = hb, true
	if newRun && n.role == RoleReplica && pr.Snap.Req == 0 && n.mergeRev == 0 && n.dropAt == 0 {
		// The leader restarted: its log may have lost a suffix it had
		// sent before syncing it, which this replica holds. Entries it
		// logs at those indexes now would be taken as already held, and
		// the two logs part unseen. Verify this log again, as after
		// following anew (answers to requests made before describe the
		// earlier run).
		n.unverify()
		pr.Catchup.Req = 0
		n.askCatchup()
	}
	if n.thawed != 0 && n.heardSinceThaw(&hb, m.Received) {
		// The peer has heard this node since its thaw: it either still
		// follows or says it leads (noticeFreeze).
		n.thawed = 0
	}
	n.holdOff = ""
	if n.det.PeerDeaf(&hb, m.Received) {
		n.holdOff = "the peer does not hear this node"
	}
	n.maxTerm = max(n.maxTerm, hb.MaxTerm)
	if n.role == RoleReplica && hb.Role.Leads() && hb.Epoch == n.following {
		// Heartbeats of this run arrive in order (older ones were
		// dropped above), and its durable index never goes back.
		n.leaderDurable = max(n.leaderDurable, hb.Applied)
	}
	if n.role == RoleReplica && n.verified && hb.Role.Leads() && hb.Epoch == n.following && hb.Commit > n.commit {
		// The commit index a replica knows: never past what it holds, and
		// only over entries verified to be its leader's. Until a catch-up
		// answer has confirmed its log as a prefix of the leader's, its
		// suffix may be entries of its own the leader never had (written
		// as primary, never acknowledged): the leader's commit index
		// says nothing about them, and they must not be applied. Once
		// verified, everything it holds is that prefix or entries taken
		// from this leader since.
		n.commit = min(hb.Commit, n.persisted)
	}
	n.commitDurable()
	n.evaluate()
	n.releaseReads()
}

// stepAck takes the replica's acknowledgement of its durable index.
func (n *Node) stepAck(m *Message) {
	switch n.role { // from the peer, within this node's log (Admit)
	case RoleSolo:
		if mk := &n.peer.mark; m.Index > mk.acked && mk.epoch == n.epoch {
			mk.acked = m.Index // progress of a replica catching up (caughtUp)
		}
	case RolePrimary:
		if m.Index > n.peer.Match && m.Index <= n.last {
			n.peer.Match = m.Index
			n.updateCommit()
			n.progressHandover()
		}
	}
}

// stepLeaving: the replica stops on purpose. Only from the peer's current
// run: a late message of an earlier run must not end a later synchronous
// epoch. The run, not the term, names it; a sender without runs names the
// epoch's term.
func (n *Node) stepLeaving(m *Message) {
	current := m.Run != 0 && m.Run == n.det.PeerRun()
	if m.Run == 0 {
		current = m.Term == n.epoch.Term
	}
	if !current {
		return
	}
	// A hand-over to it has failed: a Leaving is the last message of the
	// peer's run, and a replica that had taken the hand-over would lead,
	// and a leader sends no Leaving. The caller hears so now, not a lease
	// later when the peer counts as dead (both nodes stopped at once made
	// every clean stop of a pair wait for that, then log a failure). A
	// hand-over already sent stays sent, as on that silence
	// (stepHandedOver): only its answer comes sooner.
	switch h := n.handover; {
	case h == nil:
	case h.sent:
		n.lapseHandover(h, ErrPeerLeft)
	default:
		n.endHandover(ErrPeerLeft)
	}
	// The run's heartbeats still in flight are stale: the peer is gone
	// until a new run is heard.
	n.det.PeerLeft()
	n.peer.Heard = false
	n.forgetProtocol()
	if n.role == RolePrimary {
		n.goSolo("the replica is stopping")
	}
}

// heardSinceThaw reports whether the heartbeat hb, received at now, shows
// that the peer has heard this node since its thaw (thawed). A follower
// shows it by echoing a send time of this run from after the thaw; its
// HeardAgo proves nothing here: a heartbeat it sent before the freeze
// ended may arrive only at the thaw, having waited it out in transit,
// and a peer that was frozen itself restarts that count at its own thaw
// (sim seed 716321: both froze, the replica took over, and the primary
// took such a heartbeat for news and went solo beside it). A leading peer
// grants nothing and echoes nothing; its HeardAgo is taken as before
// (stepPrimary steps down for a leader of a newer epoch anyway).
func (n *Node) heardSinceThaw(hb *Heartbeat, now int64) bool {
	if hb.Role.Leads() || hb.Run == 0 {
		return hb.HeardAgo >= 0 && now-int64(hb.HeardAgo) >= n.thawed
	}
	return n.det.PeerKnowsRun(hb) && hb.Echo >= n.thawed
}

// grantsLease reports whether the echo in the peer's heartbeat hb extends
// this node's lease. A replica's read lease is its primary's promise (it
// acknowledges nothing alone before the lease ends, and nothing before
// this node holds it), so only a primary's echo grants one; the echo of
// any other peer still counts as proof of its run (Detector.HeardFrom),
// and PeerKnowsRun still reads it. A peer replica echoes this node's send
// times as the role lease of what it takes for its primary: after a split
// whose two sides yielded to each other on stale heartbeats, each followed
// the other's epoch, and a replica taking that echo for its read lease
// served reads that missed the writes its peer had acknowledged alone
// (sim seeds 415178, 846391; crossed_follow_read).
func (n *Node) grantsLease(hb *Heartbeat) bool {
	return n.role != RoleReplica || hb.Role == RolePrimary
}

// commitDurable raises a verified replica's commit index to the lower of
// its own durable index and the one its leader announced, when the pair
// speaks ProtocolV4: an entry durable on both nodes is what the leader's
// commit index will cover once the ack reaches it, and nothing can take
// it back. The leader cannot lose it (it is on its disk, and a restarted
// leader keeps what it holds when it leads again), this replica cannot
// (on its disk too), a replica's suffix is dropped only above its commit
// index (catchupRefused), and a later leader is one of the two. What the
// replica shows or answers before its leader's commit index covers it, a
// read on the leader waits for (leaderIndex). Only verified: until a
// catch-up answer has confirmed this log as a prefix of the leader's, an
// index names entries that may not be the leader's.
func (n *Node) commitDurable() {
	if n.role != RoleReplica || !n.verified || !n.durableCommit() {
		return
	}
	if c := min(n.leaderDurable, n.persisted); c > n.commit {
		n.commit = c
	}
}

// unverify marks this replica's log as not (or no longer) known to be a
// prefix of its leader's: no commit index moves over it until a catch-up
// answer verifies it, and the durable index its leader announced before
// is forgotten (it may be an earlier leader's, or an earlier run's).
func (n *Node) unverify() {
	n.verified = false
	n.leaderDurable = 0
	n.probe = probe{}
}
