package repl

import "time"

// NewNode returns the core of a node restarted from st. It starts waiting:
// a restarted process never resumes an old epoch.
func NewNode(cfg Config, st RestartState) *Node {
	if cfg.Lease <= 0 {
		cfg.Lease = time.Second
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 2 * cfg.Lease
	}
	if cfg.Drift <= 0 {
		cfg.Drift = cfg.Lease/10 + 10*time.Millisecond
	}
	if cfg.SnapPatience <= 0 {
		cfg.SnapPatience = max(20*cfg.Lease, 10*time.Second)
	}
	det := NewDetector(cfg.Lease, cfg.Drift, cfg.Run, st.Now)
	det.FreezeGrace, det.FreezeGraceFrom = cfg.FreezeGrace, cfg.FreezeGraceFrom
	n := &Node{
		cfg: cfg, det: det, now: st.Now, started: st.Now,
		role:    RoleWaiting,
		epochs:  append([]EpochRecord(nil), st.Epochs...),
		maxTerm: max(st.MaxTerm, Last(st.Epochs).Epoch.Term, st.Followed),
		epoch:   Last(st.Epochs).Epoch, followed: st.Followed,
		last: st.Last, persisted: st.Last, applied: st.Applied,
		commit: restartCommit(st), nextApply: st.Applied + 1, rev: st.Rev,
		lastEpoch: st.LastEpoch, lastSolo: st.LastSolo,
		peer:   &Progress{ID: cfg.Peer},
		proto:  protoState{own: OwnProtocols(cfg.Build, cfg.MinProtocol)},
		reqSeq: cfg.ReqSeed,
	}
	last := Last(st.Epochs).Epoch
	// It led last only if no leader it followed is newer than its own
	// last epoch (followed).
	n.ledLast = last.Node == cfg.ID && !last.IsZero() && last.Term >= st.Followed
	return n
}

// restartCommit is the commit index a node restarts with: the durable
// lower bound the driver kept (RestartState.Commit), else Applied.
//
// A bound below Applied is safe for every rule that reads the commit
// index, because the commit index only ever gates what this node may
// release, show or keep, and each of those waits or is conservative with
// a lower one:
//   - a leader recomputes it from its replica's acks or its own durable
//     index (updateCommit) and never lowers it; its reads wait for
//     max(commit, leadFrom) (newRead), and leadFrom is the whole log;
//   - a replica raises it from its leader's heartbeats once verified;
//     its reads wait for it (reads.go);
//   - the split-brain rules read the epoch history (SoloSuffix,
//     Divergence), not the commit index, so a solo suffix is kept as
//     conflict records whatever the bound;
//   - catchupRefused drops a divergent suffix only above max(Divergence,
//     commit), and first searches that range for where the two logs
//     really part (probe): entries between the bound and the exact
//     commit index the node knew before it stopped are on the leader
//     too (that is what committed means), and Divergence may err early
//     over them (sim seed 9870), so the search keeps them and a driver
//     that showed them never sees its revision go back (sim seeds
//     207893, 264947, 340180; docs/ARCHITECTURE.md, "Resync and
//     truncation", after a restart).
//
// Entries up to Applied are not handed out again as CommittedEntries
// (nextApply stays Applied+1): the driver applied them before it stopped.
func restartCommit(st RestartState) uint64 {
	if st.Commit > 0 && st.Commit < st.Applied {
		return st.Commit
	}
	return st.Applied
}

// Start tells the core that the driver starts running it now: it begins
// to tick and to take messages. The wait for the peer after a restart
// (two leases before a node that led last leads alone) counts from here,
// not from NewNode: the driver makes the node after opening its data
// file, but may do more before it runs, and a node that led alone at its
// first tick had listened for its peer for no time at all. (A restarted
// former primary led alone about 160 ms after it started serving, before
// DDS discovery had found the peer that had taken over, and then had to
// yield.) Without a call, the wait counts from NewNode.
func (n *Node) Start(now int64) {
	n.advanceClock(now)
	n.started = n.now
}

// Tick gives the core the caller's clock (ns, monotonic, never going
// back). The driver calls it several times per lease (Lease/8); a gap over
// Lease/4 is taken as a freeze of this node (Detector). It sends the
// heartbeat and runs the role rules.
func (n *Node) Tick(now int64) {
	n.advanceClock(now)
	n.noticeFreeze()
	n.sendHeartbeat()
	n.splitBrainTick()
	n.evaluate()
	n.progressHandover()
	n.releaseReads() // a lease or a hand-over window may have run out
	if n.role == RoleReplica {
		p := n.peer
		switch {
		case p.Catchup.Req != 0 && now-p.asked > int64(n.cfg.Lease):
			n.askCatchup() // lost or unanswered: ask again, in the same series
		case p.Snap.Req != 0 && now-p.asked > int64(n.cfg.SnapPatience):
			n.askSnapshot(p.snapMin)
		}
	}
}

func (n *Node) advanceClock(now int64) {
	if now > n.now {
		n.now = now
	}
}

// Step takes a received message; only what Admit lets through reaches the
// rules.
func (n *Node) Step(m Message) {
	n.advanceClock(m.Received)
	if !n.Admit(&m) {
		return
	}
	// Kinds the core does not know (forwarded writes, member records)
	// are the driver's.
	switch m.Kind {
	case KindHeartbeat:
		n.stepHeartbeat(&m)
	case KindAck:
		n.stepAck(&m)
	case KindEntries, KindCatchup:
		n.stepEntries(&m)
	case KindCatchupReq, KindSnapReq:
		n.stepServeReq(&m)
	case KindSnapChunk:
		n.stepSnapChunk(&m)
	case KindMergeReq:
		n.stepMergeReq(&m)
	case KindLeaving:
		n.stepLeaving(&m)
	case KindHandover:
		n.stepHandover(&m)
	case KindHandoverAck:
		n.stepHandoverAck(&m)
	}
}

// Propose sequences entries as the leader: es must follow the log (the
// first at Next()); the core stamps each with the current epoch and solo
// flag. They come back in Ready.Entries (to persist) and in a message to
// the replica. It fails with ErrNotLeader when this node does not lead and
// ErrHandingOver during a hand-over; nothing is then sequenced.
func (n *Node) Propose(es []Entry) error {
	if !n.role.Leads() {
		return ErrNotLeader
	}
	if n.handover != nil {
		return ErrHandingOver
	}
	if len(es) == 0 {
		return nil
	}
	solo := n.role == RoleSolo
	for i := range es {
		es[i].Index = n.last + 1 + uint64(i)
		es[i].Epoch, es[i].Solo = n.epoch, solo
		if rev, err := es[i].MergeRev(); es[i].Merge && err == nil {
			n.mergedAbove = max(n.mergedAbove, rev)
		}
	}
	n.last = es[len(es)-1].Index
	n.lastEpoch, n.lastSolo = n.epoch, solo
	n.rd.Entries = append(n.rd.Entries, es...)
	n.unapplied = append(n.unapplied, es...)
	n.send(Message{Kind: KindEntries, Term: n.epoch.Term, Index: es[0].Index, Entries: es})
	n.inflight = append(n.inflight, idxAt{at: n.now, idx: n.last})
	return nil
}

// Next is the position the next proposal gets: its index, epoch and solo
// flag (meaningful while leading).
func (n *Node) Next() (index uint64, epoch Epoch, solo bool) {
	return n.last + 1, n.epoch, n.role == RoleSolo
}

// Persisted reports the log durable up to index (with the revision of
// that entry). A replica acknowledges it; a leader counts it towards the
// commit index.
func (n *Node) Persisted(index uint64, rev int64) {
	if index <= n.persisted || index > n.last {
		return
	}
	n.persisted, n.rev = index, rev
	switch n.role {
	case RoleReplica:
		n.send(Message{Kind: KindAck, Index: index})
		n.commitDurable()
		n.releaseReads()
		if n.catchupAt != 0 && index >= n.catchupAt {
			n.catchupAt = 0
			n.askCatchup() // the next chunk, or an empty answer when caught up
		}
	case RolePrimary, RoleSolo:
		n.updateCommit()
		if n.role == RolePrimary && n.durableCommit() {
			// The replica commits what both hold durably (commitDurable):
			// tell it now, not at the next tick. It needs no word of the
			// commit index when the ack moves it (updateCommit).
			n.sendHeartbeat()
		}
		n.progressHandover()
	}
}

// Applied reports the entries up to index applied (and visible).
func (n *Node) Applied(index uint64) {
	if index <= n.applied {
		return
	}
	n.applied = index
	i := 0
	for i < len(n.unapplied) && n.unapplied[i].Index <= index {
		i++
	}
	n.unapplied = n.unapplied[i:]
	if n.nextApply <= index {
		n.nextApply = index + 1
	}
}

// Fenced reports the outcome of the fence command Ready.Fence asked for.
// A success counts only for the promotion it was run for: the role rules
// run again now, and promote, if they still call for it, goes ahead.
func (n *Node) Fenced(err error) {
	n.fencing = false
	if n.role != RoleReplica {
		return // the role changed while it ran
	}
	if err != nil {
		n.setRole(RoleWaiting, "fence failed")
		return
	}
	n.fenced = true
	n.evaluate()
	n.fenced = false
}

// Installed reports the snapshot of the last Ready.Snapshot chunk
// installed (st: the state now on disk), or not (err; ErrStaleSnapshot:
// nothing changed). Either way the node catches up from the log next.
func (n *Node) Installed(st RestartState, err error) {
	if err == nil {
		n.epochs = append([]EpochRecord(nil), st.Epochs...)
		n.maxTerm = max(n.maxTerm, st.MaxTerm, Last(st.Epochs).Epoch.Term)
		n.epoch = Last(st.Epochs).Epoch
		n.last, n.persisted, n.applied, n.commit = st.Last, st.Last, st.Applied, st.Applied
		n.nextApply, n.rev = st.Applied+1, st.Rev
		n.lastEpoch, n.lastSolo = st.LastEpoch, st.LastSolo
		n.unapplied = nil
		n.ledLast = false
	} else if err == ErrStaleSnapshot {
		n.rd.Counters.StaleAnswers++
	}
	if n.role == RoleReplica {
		n.askCatchup()
	}
}

// ConflictsKept reports that the conflict records Ready.SplitBrain asked
// for are durable (accepted: the operator already accepted them, dyad
// resolve), or could not be written (err: the node stays as it is and
// asks again on the next divergence answer).
func (n *Node) ConflictsKept(accepted bool, err error) {
	n.splitPending = false
	if err != nil {
		return
	}
	n.rd.Counters.SplitBrains++
	if n.cfg.ManualSplitBrain && !accepted {
		n.setStuck("split brain (policy manual): this node stopped serving; inspect its conflict records and run dyad resolve accept (docs/OPERATIONS.md, split brain)")
		n.setRole(RoleWaiting, n.stuck)
		return
	}
	n.mergeRev = n.rev
	n.askMerge()
}

// Resolve reports the operator's acceptance of the split brain this node
// waits on (dyad resolve accept): the role rules follow the leader again.
func (n *Node) Resolve() {
	if n.stuck != "" {
		n.setStuck("")
	}
}

// Leave is called as the node stops: a replica gives up its read lease
// and tells its primary, which may then lead alone at once.
func (n *Node) Leave() {
	if n.role != RoleReplica {
		return
	}
	n.det.ForgetPeer()
	n.setRole(RoleWaiting, "stopping")
	n.send(Message{Kind: KindLeaving, Term: n.following.Term, Run: n.det.Run})
}

// HasReady reports whether Ready would carry anything.
func (n *Node) HasReady() bool {
	rd := &n.rd
	return !rd.HardState.IsEmpty() || len(rd.Entries) > 0 || len(rd.Messages) > 0 ||
		n.commit != n.handedCommit || n.commitReady() || n.readGrant() != n.handedGrant || len(rd.ReadStates) > 0 || rd.RoleChange != nil || rd.Fence ||
		len(rd.Serve) > 0 || len(rd.Snapshot) > 0 || rd.DropSnapshot || rd.Truncate != 0 || rd.SplitBrain != nil ||
		rd.Merge != 0 || rd.HandoverResult != nil || rd.Stuck != nil || rd.Counters != Counters{} || rd.Protocol != nil
}

func (n *Node) commitReady() bool {
	return n.nextApply <= n.commit && len(n.unapplied) > 0 && n.unapplied[len(n.unapplied)-1].Index >= n.nextApply
}

// Ready returns what the driver must carry out now (see Ready) and hands
// it over: inputs given while the driver carries it out (Installed,
// ConflictsKept, ...) go into the next one. Call Advance once it is
// carried out, before the next Ready.
func (n *Node) Ready() Ready {
	rd := n.rd
	n.rd = Ready{}
	rd.Commit = n.commit
	for _, e := range n.unapplied {
		if e.Index >= n.nextApply && e.Index <= n.commit {
			rd.CommittedEntries = append(rd.CommittedEntries, e)
		}
	}
	shown := n.handedCommit
	n.handedCommit = n.commit
	rd.ReadGrant = n.readGrant()
	if acksAbove(&rd, shown) {
		// The driver sends the ack before it shows what this Ready
		// commits, and once the ack is out the primary may answer the
		// write; a read under a grant meanwhile would be served at what
		// is visible, without it. So the grant is withdrawn for this
		// Ready (narrowed before any of its effects) and given again by
		// the next one, after the entries are shown (HasReady: the grant
		// differs). Under ProtocolV3 the ack's Ready withdrew it anyway
		// (its durable index passed its commit index); from ProtocolV4
		// the same Ready may commit what it acknowledges.
		rd.ReadGrant = ReadGrant{}
	}
	n.handedGrant = rd.ReadGrant
	return rd
}

// acksAbove reports whether rd sends an ack of an index above shown (what
// the driver had been told to make visible before rd).
func acksAbove(rd *Ready, shown uint64) bool {
	for i := range rd.Messages {
		if m := &rd.Messages[i]; m.Kind == KindAck && m.Index > shown {
			return true
		}
	}
	return false
}

// Advance tells the core the last Ready was carried out: its committed
// entries are being applied.
func (n *Node) Advance() {
	if c := n.handedCommit; c >= n.nextApply {
		n.nextApply = c + 1
	}
}

// Status returns what request goroutines need (see Status).
func (n *Node) Status() Status {
	st := Status{
		Role: n.role, Epoch: n.epoch, LeaseUntil: n.det.LeaseUntil(),
		Resyncing: n.peer.Snap.Req != 0, HandoffUntil: n.handoffUntil, Stuck: n.stuck,
		Last: n.last, Applied: n.applied, Commit: n.commitIdx(), Current: n.epoch,
		HandingOver: n.HandingOver(),
		Peer:        n.peer.Last, PeerFresh: n.peerFresh(), PeerID: n.peer.ID,
		HeardAgo: n.det.HeardAgo(n.now),
	}
	switch n.role {
	case RolePrimary, RoleSolo:
		st.Leader = n.cfg.ID
	case RoleReplica:
		st.Leader = n.following.Node
		st.Epoch = n.following
	}
	return st
}

// HandingOver reports whether a hand-over from this node is under way
// (Status.HandingOver): no proposal is taken meanwhile.
func (n *Node) HandingOver() bool {
	return n.handover != nil && !(n.handover.sent && n.handover.final)
}

// Role is the node's role.
func (n *Node) Role() Role { return n.role }

// Epochs is the epoch history (the caller must not change it).
func (n *Node) Epochs() []EpochRecord { return n.epochs }

// send queues a message to the peer, in the version the pair speaks.
func (n *Node) send(m Message) {
	m.From, m.To = n.cfg.ID, n.peer.ID
	n.stamp(&m)
	n.rd.Messages = append(n.rd.Messages, m)
}
