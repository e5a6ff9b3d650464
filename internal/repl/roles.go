package repl

// The role rules (docs/ARCHITECTURE.md, "Roles" and the role table): one
// step function per role, run on every tick and every heartbeat. Each
// reads as one decision table.

// evaluate runs the rules of the current role.
func (n *Node) evaluate() {
	// Notice a freeze of this node before judging anything: a message
	// handled right after a thaw must not find the peer "dead" or acks
	// "overdue" by the frozen time.
	n.noticeFreeze()
	switch n.role {
	case RoleWaiting:
		n.stepWaiting()
	case RoleReplica:
		n.stepReplica()
	case RolePrimary:
		n.stepPrimary()
	case RoleSolo:
		n.stepSolo()
	}
}

// stepWaiting: a node that does not serve writes decides whether to lead
// or follow.
func (n *Node) stepWaiting() {
	if n.stuck != "" {
		return
	}
	if n.handover != nil && n.handover.sent {
		n.stepHandedOver()
		return
	}
	p := &n.peer.Last
	fresh := n.peerFresh()
	waited := n.now-n.started > 2*int64(n.cfg.Lease)
	if fresh && n.ledLast && p.LedLast && p.Epoch.Term > n.epoch.Term && !Last(n.epochs).Solo {
		// The peer led an epoch newer than this node's last one, a
		// synchronous one: it holds every write this node acknowledged
		// and may have acknowledged writes alone since. This node did
		// not lead last; it slept through a failover (a freeze, then a
		// cut or a stop: sim seed 1250) and must not lead alone on
		// that claim, by the cold-start rule or once the peer is gone
		// again.
		n.ledLast = false
	}
	switch {
	case n.crossWon && n.rd.RoleChange == nil && fresh && p.Role == RoleReplica && p.Epoch == Last(n.epochs).Epoch && n.peerHearsNow():
		// This node won a crossing as a replica (crossedWinner) and
		// stepped down for it; its peer still follows this node's
		// epoch. It leads from waiting, in a Ready of its own after the
		// step-down: a replica that goes straight to leading is a
		// promotion, which runs the fence command against a peer that
		// is alive, heard, and about to follow.
		n.lead("the peer follows this node's epoch after a crossing this node won")
	case fresh && p.Role == RoleSolo && n.ledLast && n.wroteAlone() && !n.yieldsTo(p) && n.holdOff == "":
		// Restarted after a split in which this node should win: lead
		// again, and the peer yields when it hears it. Only after a
		// real split, one in which this node acknowledged writes alone:
		// one that led a synchronous epoch and crashed was replaced by
		// its replica.
		n.lead("restarted after a split brain that this node wins")
	case fresh && p.Role.Leads() && !(p.Role == RolePrimary && n.ledLast && p.Epoch.Term < n.epoch.Term):
		// Not a synchronous primary of an epoch older than the one this
		// node led last: that peer has not heard of it yet (it was
		// frozen through this node's takeover), acknowledged nothing
		// alone, and steps down when it hears this node (stepPrimary).
		// Following it left both nodes replicas of each other for good
		// (sim seed 10075). A solo peer is followed whatever its term:
		// a split brain, which the catch-up finds.
		n.follow()
	case fresh && p.Role == RoleReplica && n.ledLast:
		// Back before the replica promoted: lead again; it follows. Only
		// once it has heard this node lately (a replica still counting
		// this node's silence may be promoting right now) and has heard
		// this run (until then it may hold a read lease from the
		// previous run, which ended without expiring it).
		if n.peerHearsNow() && n.det.PeerKnowsRun(p) {
			n.lead("restarted before the replica took over")
		}
	case fresh && !n.ledLast && n.peerBehindOwnNewest(p):
		// This node's newest epoch is its own and the newest of the
		// pair, yet it does not count as having led last: after a
		// split the peer yielded to it, while it yielded to the peer
		// on a stale heartbeat ("keeps leading") and followed an epoch
		// the peer no longer led. Each then followed or waited for the
		// other for good (sim seeds 138791, 238564). The guards are
		// those of the rule above; a waiting peer holds no read lease
		// (it grants none, so it echoes no run either).
		if n.peerHearsNow() && (p.Role == RoleWaiting || n.det.PeerKnowsRun(p)) {
			n.lead("the peer led nothing since this node's newest epoch")
		}
	case fresh && !n.ledLast && n.peerGaveUpNewer(p):
		// As the rule above, but the peer led newer terms before it
		// yielded to this node's epoch (sim seed 1163): both nodes
		// yielded after a split, this one on the one-way rule ("keeps
		// leading") and the peer, by the split rule, to a heartbeat
		// this node sent as it yielded. Same guards.
		if n.peerHearsNow() && n.det.PeerKnowsRun(p) {
			n.lead("the peer follows this node's newest epoch and gave up the newer ones it led")
		}
	case fresh && p.Role == RoleWaiting:
		// Cold start of both: the one that led last leads; a fresh pair
		// is started by the bootstrap node.
		lead := n.ledLast && !p.LedLast ||
			n.ledLast && p.LedLast && n.cfg.Preferred ||
			!n.ledLast && !p.LedLast && n.persisted == 0 && p.Applied == 0 && n.cfg.Bootstrap
		// A peer that does not hear this node and led last leads alone
		// by the next rule; this one then follows it.
		if lead && waited && (n.holdOff == "" || !p.LedLast) {
			n.lead("cold start of both nodes")
		}
	case !fresh && waited && n.holdOff == "" && n.thawed == 0 && (n.ledLastAlone() || n.cfg.Bootstrap && n.persisted == 0 && len(n.epochs) == 0):
		n.lead("peer absent; this node led last")
	}
}

// peerBehindOwnNewest reports whether this node's newest epoch is one of
// its own that neither node knows a newer term than, and the peer, by
// heartbeat p, led nothing since: it follows that epoch, or waits with an
// older epoch of its own and does not claim to have led last. The peer
// then holds no write acknowledged after that epoch began, and this node
// holds that epoch's log.
func (n *Node) peerBehindOwnNewest(p *Heartbeat) bool {
	l := Last(n.epochs).Epoch
	if l.Node != n.cfg.ID || n.maxTerm != l.Term || p.MaxTerm != l.Term {
		return false
	}
	switch p.Role {
	case RoleReplica:
		return p.Epoch == l
	case RoleWaiting:
		return !p.LedLast && (p.Epoch == l || p.Epoch.Term < l.Term)
	}
	return false
}

// peerGaveUpNewer reports whether the peer, by heartbeat p, follows this
// node's newest epoch l, one of its own, while a newer term than l's is
// known (else peerBehindOwnNewest decides). This node then holds l's log,
// and whatever the peer acknowledged after l began it gave up as the loser
// of a split brain: the catch-up from this node's next epoch finds it
// diverged and keeps it as conflict records.
//
// Why: the epochs of the newer terms are the peer's (this node's own are
// all in its history, and l is its newest). None was synchronous with
// writes: this node would have acknowledged them and would hold an entry
// of an epoch newer than l. So they were solo, and the peer followed l
// after leading them: it takes a leader's epoch only from that leader's
// heartbeats, taken in order (stepHeartbeat drops overtaken ones), so
// this node led l after the peer had led alone, and the peer took l over
// its own solo history only as a split's loser: yielding to l
// (splitLeaders; a synchronous primary does not step down for an older
// term), or, restarted, following a leading peer it does not beat
// (stepWaiting's first rules). Without this rule both nodes waited for
// each other for good: the peer follows l, which this node no longer
// leads, and this node, having yielded on the one-way rule, leads
// nothing.
//
// Sim seed 1409524 showed the same gap on an older core. A waiting peer
// has given nothing up: for it the term guard of peerBehindOwnNewest
// stays.
func (n *Node) peerGaveUpNewer(p *Heartbeat) bool {
	l := Last(n.epochs).Epoch
	return l.Node == n.cfg.ID && n.maxTerm > l.Term && p.Role == RoleReplica && p.Epoch == l
}

// ledLastAlone reports whether this node's newest epoch is a solo epoch
// of its own: it was the last one running, and its peer (dead, deaf, or
// catching up) was no synchronous replica that could take over after it.
// A synchronous epoch of its own is no such proof: its replica held every
// write it acknowledged and was entitled to promote once it stopped
// hearing it, and may have acknowledged writes alone since (simulator
// seeds 1098, 1025, 1134: a crash of the primary, then the replica ->
// primary direction fails). So a node that led synchronously last waits
// for its peer (or dyad force-primary) before it serves alone.
func (n *Node) ledLastAlone() bool {
	l := Last(n.epochs)
	return n.ledLast && l.Solo && l.Epoch.Node == n.cfg.ID
}

// stepReplica: a replica follows its primary and promotes itself once the
// primary is dead and its role lease expired.
func (n *Node) stepReplica() {
	p := &n.peer.Last
	fresh := n.peerFresh()
	if fresh && p.Role.Leads() {
		n.following, n.followSoloFrom = p.Epoch, p.SoloFrom
		n.noteFollowed(p.Epoch)
	}
	if n.crossedWinner(fresh) {
		n.crossWon = true
		n.setRole(RoleWaiting, "this node and its peer each followed the other's epoch after a split; this node's history wins and leads again")
		return
	}
	n.fetchIfStalled(fresh)
	if !n.det.PeerDead(n.now) || !n.det.PeerLeaseExpired(n.now) {
		return
	}
	if n.holdOff != "" {
		// The primary stopped hearing this node before it fell silent
		// here: it has gone solo (a one-way link failure).
		n.setRole(RoleWaiting, "the primary stopped hearing this node and leads alone: waiting for it (or dyad force-primary)")
		return
	}
	if n.leaseWithheld() {
		// The primary had stopped renewing this node's read lease (its
		// acks were overdue) before it fell silent here: it may have gone
		// solo since, without waiting to hear that this node no longer
		// hears it, and acknowledged writes this node lacks. Its silence
		// alone proves nothing.
		n.setRole(RoleWaiting, "the primary withheld this node's read lease before it fell silent and may lead alone: waiting for it (or dyad force-primary)")
		return
	}
	if p.Role == RoleWaiting && p.LedLast {
		// The primary restarted: it led last and may lead alone again
		// ("restarted before the replica took over") as soon as it
		// saw this node hear it, which this node cannot tell from
		// here; its silence may be a cut of the primary -> replica
		// direction just after it did (sim seeds 106626, 263153).
		n.setRole(RoleWaiting, "the primary restarted and may lead alone since: waiting for it (or dyad force-primary)")
		return
	}
	if n.det.LapsedFrozen() {
		// This node was frozen past the end of its read lease: the
		// primary may have found it silent and gone solo, legitimately,
		// while it could not say that it no longer hears the primary;
		// a cut of the primary -> replica direction then looks like the
		// primary's death from here (simulator seed 71).
		n.setRole(RoleWaiting, "this node was frozen past its read lease, and the primary may have led alone since: waiting for it (or dyad force-primary)")
		return
	}
	if p.Role == RolePrimary && n.det.LeaseNotRenewed() {
		// The primary's newest heartbeat came after this node's read
		// lease had ended and did not renew it: the primary had heard
		// nothing from this node for a lease (a cut of the replica ->
		// primary direction, found too soon after a freeze of this node
		// for its reports to say so) and goes solo on that, without
		// holding off. Its silence since proves nothing (sim seed
		// 326402).
		n.setRole(RoleWaiting, "the primary stopped renewing this node's read lease before it fell silent and may lead alone: waiting for it (or dyad force-primary)")
		return
	}
	// Only a synchronous replica may take over: one that was catching up
	// from a solo primary lacks acknowledged writes.
	syncHB := p.Role == RolePrimary && n.persisted+1 >= p.EpochStart
	syncEntries := !n.lastSolo && !n.lastEpoch.IsZero() && !n.lastEpoch.Less(p.Epoch)
	if syncHB || syncEntries {
		n.promote()
	} else {
		n.setRole(RoleWaiting, "the primary was lost while this node was still catching up; it holds writes this node never saw: waiting for it (or dyad force-primary)")
	}
}

// stepPrimary: a synchronous primary goes solo once its replica is dead
// (or its acks overdue) and the replica's read lease expired.
func (n *Node) stepPrimary() {
	p := &n.peer.Last
	if n.peerFresh() && p.Role.Leads() && p.Epoch.Term > n.epoch.Term {
		n.countFalseFailover()
		n.stepDown("peer leads a newer epoch")
		return
	}
	if n.peerFresh() && p.Role == RoleWaiting && p.LedLast && p.Epoch.Term > n.epoch.Term {
		// The replica took over while this node was frozen, and has
		// restarted since: it acknowledges nothing for this epoch.
		n.stepDown("the peer led a newer epoch")
		return
	}
	if (n.det.PeerDead(n.now) || n.ackOverdue()) && n.det.PeerLeaseExpired(n.now) {
		if n.holdOff != "" {
			// The replica stopped hearing this node: it takes over (a
			// one-way link failure). Going solo too would split the
			// pair; wait for it instead. This node still led last.
			n.stepDown("the replica stopped hearing this node and takes over: waiting for it (or dyad force-primary)")
			return
		}
		if !n.det.PeerDead(n.now) && n.det.NewestEchoStale(p) {
			// The replica is still heard (its acks are overdue), but
			// what it sends echoes nothing this node sent in the last
			// half lease: it does not hear this node and takes over a
			// lease into that silence. Its HeardAgo may not say so yet:
			// a stall of the replica (over Lease/4, under the Lease/2
			// that would make it wait: LapsedFrozen) restarts that
			// count, and for half a lease after its thaw it reports
			// hearing this node (sim seed 817958, freeze_replica_echo).
			// A replica that cannot persist still hears this node and
			// echoes it: this node goes solo without it, as it must.
			n.stepDown("the replica has not heard this node for half a lease and takes over: waiting for it (or dyad force-primary)")
			return
		}
		if n.thawed != 0 {
			// This node was frozen long enough for the replica to take
			// over, and has not heard it since: its silence may be a
			// cut of the replica -> primary direction after a failover
			// (sim seed 1250). Going solo would make two leaders.
			n.stepDown("this node was frozen long enough for the replica to take over and has not heard it since: waiting for it (or dyad force-primary)")
			return
		}
		n.goSolo("replica lost")
	}
}

// stepSolo: a solo leader yields to a leading peer after a split, or goes
// back to synchronous once its replica caught up.
func (n *Node) stepSolo() {
	p := &n.peer.Last
	fresh := n.peerFresh()
	// A synchronous primary of an older epoch acknowledged nothing alone
	// and steps down when it hears this node (stepPrimary): it is no
	// split. Yielding to it made both nodes step down at once and follow
	// each other's epochs, two replicas with no primary
	// (testdata/oneway.txt).
	//
	// A peer that says it leads an epoch this node took over from it by a
	// hand-over, or an older one, speaks from before the hand-over: the
	// last heartbeat heard before it (or one overtaken by the hand-over on
	// the way) is no split. Taking it for one made a node that took over
	// after a final hand-over yield to its stopped peer and lose the
	// writes it acknowledged alone (sim seed 245995).
	if fresh && p.Role.Leads() && !(p.Role == RolePrimary && p.Epoch.Term < n.epoch.Term) && !n.handedOverBy(p) {
		n.splitLeaders()
		return
	}
	n.bothLeadSince = 0
	// Following this node, and hearing it: a replica that reports not
	// hearing this node for half a lease gets no entries (a one-way link
	// failure) and is about to wait or take over; a synchronous epoch with
	// it would only stall writes until its acks were overdue.
	following := fresh && p.Role == RoleReplica && !p.CatchingUp && p.Epoch.Node == n.cfg.ID && n.peerHearsNow()
	if n.caughtUp(following) {
		n.newEpochAt(false, n.last+1)
		n.peer.Match = p.Applied
		n.setRole(RolePrimary, "replica caught up")
		n.updateCommit()
	}
}

// noticeFreeze gives the detector the clock (which restarts its counts
// after a freeze of this node) and notes in thawed a freeze of a primary
// longer than Lease/2 that began while its replica was heard (within
// 3/4 Lease). The replica promotes once the primary has been silent for a
// lease of its own running time; a primary that sent nothing for over
// half of that may have been replaced (a few lost heartbeats make up the
// rest), and cannot tell from here. Until its peer shows it has heard
// this node since the thaw (stepHeartbeat), it must not lead alone:
// should the replica -> primary direction be cut, a replica that took
// over is silent here just like a dead one, and leading alone beside it
// made two leaders after a freeze and a one-way cut (sim seed 1250).
//
// Why 3/4 Lease and not Lease/2: a replica is told to hold off only by
// a heartbeat reporting over Lease/2 of silence (PeerDeaf). A primary
// that froze just past Lease/2 had sent one such heartbeat at most, and
// on a lossy link that one may be lost: the replica then knows nothing
// of the primary not hearing it, finds it silent and takes over, and the
// primary going solo at its thaw made two leaders without a two-way cut
// (sim seeds 745753, 234603; freeze_lossy). A quarter lease more is two
// heartbeats (one per Lease/8) carrying that report.
//
// A replica already silent when the freeze began is most likely dead,
// and the freeze is a stall (common on a loaded machine) on the way to
// going solo: waiting for the operator there would break the failover
// of a single fault, so the rule leaves that case alone. The cost of the
// rule: a replica that dies during such a freeze leaves the primary
// waiting for it or for dyad force-primary.
func (n *Node) noticeFreeze() {
	gap := n.det.Tick(n.now)
	if gap <= int64(n.cfg.Lease/2) || n.role != RolePrimary {
		return
	}
	if heard := n.det.HeardAgo(n.now); heard >= 0 && int64(heard) <= gap+int64(3*n.cfg.Lease/4) {
		n.thawed = n.now
	}
}

// leaseWithheld reports whether the newest heartbeat of this replica's
// primary withheld the replica's read lease: it said "primary" but echoed
// no send time of this node's run. A synchronous primary withholds it only
// when it no longer counts this replica as synchronous (acks overdue, or
// entries before its epoch's start not yet acknowledged), and from then on
// it goes solo as soon as the last lease it granted has run out (plus
// drift), whether or not it hears this node. Its silence is then no proof
// of its death: a cut of the primary -> replica direction looks the same
// from here, and promoting would make two nodes acknowledge writes alone
// (issue 15, "two leaders after two faults").
//
// While the primary grants, it goes solo only after a lease of this node's
// silence or a lease past its last grant, and this node's heartbeats
// report not hearing it within half a lease of the cut, so the primary
// holds off first: promoting is safe.
func (n *Node) leaseWithheld() bool {
	p := &n.peer.Last
	if p.Role != RolePrimary {
		return false // a solo leader: the rules on who may promote decide
	}
	if p.Run == 0 {
		return p.Echo == 0 // a sender without runs echoes without naming one
	}
	return !n.det.PeerKnowsRun(p)
}

// fetchIfStalled asks for catch-up when this replica has stood still for a
// quarter lease while its leader reports more entries: a gap is otherwise
// found only when the next live entry arrives.
func (n *Node) fetchIfStalled(fresh bool) {
	pr := n.peer
	// Not while merging after a split brain: the leader would only say
	// again that the logs diverged; nor while a suffix is being dropped
	// (the request would name it).
	if !fresh || !pr.Last.Role.Leads() || pr.Last.Applied <= n.persisted || pr.Catchup.Req != 0 || pr.Snap.Req != 0 || n.mergeRev != 0 || n.dropAt != 0 {
		pr.behind = 0
		return
	}
	if pr.behind == 0 || pr.behindAt != n.persisted {
		pr.behind, pr.behindAt = n.now, n.persisted
		return
	}
	if n.now-pr.behind > int64(n.cfg.Lease/4) {
		pr.behind = 0
		n.askCatchup()
	}
}

// caughtUp judges, in solo, whether the replica (following this node, per
// its newest heartbeat) has caught up, and has stayed so for a lease. At
// each judgement it is caught up when its heartbeats or acks show that it
// holds every entry this node held a quarter lease ago (everything, on an
// idle pair). A replica further behind, too slow for the load, stays
// outside: going synchronous with it would stall writes until its acks
// were overdue and this node went solo again.
func (n *Node) caughtUp(following bool) bool {
	m := &n.peer.mark
	if m.epoch != n.epoch {
		*m = syncMark{epoch: n.epoch}
	}
	target := n.persisted
	lag := n.now - int64(n.cfg.Lease/4)
	for len(m.samples) > 0 && m.samples[0].at <= lag {
		if len(m.samples) > 1 && m.samples[1].at <= lag {
			m.samples = m.samples[1:]
			continue
		}
		target = m.samples[0].idx
		break
	}
	m.samples = append(m.samples, idxAt{at: n.now, idx: n.persisted})
	ok := following && max(n.peer.Last.Applied, m.acked) >= target
	switch {
	case !ok:
		m.since = 0
	case m.since == 0:
		m.since = n.now
	}
	return ok && n.now-m.since >= int64(n.cfg.Lease)
}

// ackOverdue reports an entry unacknowledged for AckTimeout of this node's
// own running time (a freeze of this node restarts the count).
func (n *Node) ackOverdue() bool {
	if len(n.inflight) == 0 || n.det.InFreezeGrace(n.now) {
		return false
	}
	since := max(n.inflight[0].at, n.det.RunningSince())
	return n.now-since > int64(n.cfg.AckTimeout)
}

// peerFresh reports whether the peer's last heartbeat is recent enough to
// act on (a node thawing from a freeze holds stale news).
func (n *Node) peerFresh() bool { return n.peer.Heard && n.det.PeerHeard(n.now) }

// peerHearsNow reports whether the peer has heard this node within the
// last Lease/2, as of now: the silence its last heartbeat reported plus
// that heartbeat's age, and, if it echoes this run, the age of the
// newest send time of this node it echoes.
func (n *Node) peerHearsNow() bool {
	p := &n.peer.Last
	if !n.peerFresh() || p.HeardAgo < 0 {
		return false
	}
	if n.det.EchoStale(p, n.now) {
		// Its echo, this node's own reading, says otherwise: a stall
		// of the peer restarted the count its HeardAgo reports (see
		// the holding off in stepPrimary).
		return false
	}
	return n.det.HeardAgo(n.now)+p.HeardAgo <= n.cfg.Lease/2
}

// countFalseFailover counts a takeover by the peer while this node led
// and had not been frozen within the last lease.
func (n *Node) countFalseFailover() {
	if !n.det.InFreezeGrace(n.now - int64(n.cfg.Lease)) {
		n.rd.Counters.FalseFailovers++
	}
}

// wroteAlone reports whether this node acknowledged writes alone in its
// trailing run of solo epochs.
func (n *Node) wroteAlone() bool {
	from := SoloFrom(n.epochs, n.cfg.ID)
	return from != 0 && n.persisted >= from
}

// yieldsTo applies YieldAfterSplit between this node and a leading peer.
func (n *Node) yieldsTo(p *Heartbeat) bool {
	return YieldAfterSplit(n.wroteAlone(), p.WroteSolo(), n.cfg.Preferred)
}

// handedOverBy reports whether the leading peer's heartbeat p predates a
// hand-over this node took from it: it names the epoch handed over or an
// older one. Every epoch the peer leads after that has a newer term.
func (n *Node) handedOverBy(p *Heartbeat) bool {
	t := n.tookOver
	return t != (Epoch{}) && p.Epoch.Node == t.Node && !t.Less(p.Epoch)
}
