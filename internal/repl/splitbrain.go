package repl

// Split brain: both nodes acknowledged writes alone while they could not
// talk (docs/ARCHITECTURE.md, "Split brain"). When two leaders meet, the
// one that acknowledged nothing alone yields; if both did (or neither), the
// node outside the preferred zone yields. The yielding node follows and
// asks for catch-up; if the leader finds its log diverged and it holds
// solo writes, its driver keeps them as conflict records (Ready.SplitBrain,
// ConflictsKept), it asks the leader to merge past its revision, and once
// the leader's revision is past its own it resyncs from a snapshot.

// splitLeaders runs when this node leads alone and hears its peer lead
// too. A node that should win but keeps hearing its peer lead for 3
// leases yields anyway: the peer evidently does not hear it (a one-way
// link), and only the side that hears can end the split.
func (n *Node) splitLeaders() {
	if n.bothLeadSince == 0 {
		n.countFalseFailover() // the peer promoted while this node led
	}
	wrote, peerWrote := n.wroteAlone(), n.peer.Last.WroteSolo()
	if YieldAfterSplit(wrote, peerWrote, n.cfg.Preferred) {
		n.bothLeadSince = 0
		if wrote && peerWrote {
			n.stepDown("split brain: both nodes acknowledged writes alone; the preferred zone's history wins")
		} else {
			n.stepDown("both nodes led while apart; this one yields to the peer")
		}
		n.ledLast = false
		return
	}
	if n.bothLeadSince == 0 {
		n.bothLeadSince = n.now
		return
	}
	if n.now-n.bothLeadSince > 3*int64(n.cfg.Lease) {
		n.bothLeadSince = 0
		n.stepDown("the peer keeps leading although this node should: it does not hear this node, so this one yields")
		n.ledLast = false
	}
}

// splitBrainTick drives the loser's merge (every tick).
func (n *Node) splitBrainTick() {
	if n.mergeRev == 0 || n.role != RoleReplica {
		return
	}
	p := &n.peer.Last
	if n.peerFresh() && p.Role.Leads() && p.Rev > n.mergeRev {
		n.mergeRev = 0
		// No index floor: this node's diverged suffix goes (it is in the
		// conflict records), and only a snapshot asked for from here on,
		// taken after the merge, is accepted.
		n.askSnapshot(0)
		return
	}
	if n.now-n.mergeAsked > int64(n.cfg.Lease) {
		n.askMerge()
	}
}

// askMerge asks the leader to merge past this node's revision.
func (n *Node) askMerge() {
	n.mergeAsked = n.now
	n.send(Message{Kind: KindMergeReq, MergeRev: n.mergeRev})
}

// stepMergeReq: the leader logs the merge entry for a follower that lost a
// split brain and had reached revision m.MergeRev. Repeats of a request
// already served (below the last jump) are ignored.
func (n *Node) stepMergeReq(m *Message) {
	if !n.role.Leads() || m.MergeRev < n.mergedAbove {
		return
	}
	n.mergedAbove = max(m.MergeRev, n.rev) + 1
	n.rd.Merge = m.MergeRev
}

// crossedWinner reports whether this replica should lead again because it
// and its peer each follow the other's epoch (run by stepReplica). After a
// split both sides may yield, each on a heartbeat of the other that was
// stale when it arrived: one yields on a one-way link ("keeps leading")
// and follows the other's epoch, while the other, frozen meanwhile, finds
// the first one's solo heartbeats waiting at its thaw, yields to them and
// follows the first one's epoch (sim seeds 415178, 846391, 872932). Two
// replicas, each hearing the other, never promote: without this rule the
// pair served nothing until a restart.
//
// The peer's replica heartbeat follows this node's own newest epoch, a
// solo one, while this node follows an epoch of the peer's. Neither logs
// anything in that state (a replica serves no catch-up), so the split
// rule (YieldAfterSplit) decides it as it would have decided between the
// two leaders: this node's wroteAlone, and the peer's from its Applied
// against the SoloFrom of the solo heartbeat this node followed (the
// start of the peer's trailing solo run, unchanged since it stopped
// leading). Both nodes judge the same facts, so exactly one leads. It
// judges only once the crossing has lasted half a lease, with nothing of
// its own left to persist (the peer's view of this node's log is then
// current), and only while the peer hears this node and has heard its
// run (as the other rules that lead over a listening peer). The winner
// steps down and leads from waiting (stepWaiting, crossWon), not straight
// from the replica role: that would be a promotion, which runs the fence
// command against the peer. The peer, hearing this node lead a newer
// epoch, follows it; if it had written alone, the catch-up finds the
// logs diverged and its writes become conflict records, as after any
// split brain.
//
// Neither holds a read lease meanwhile: only a primary's echo grants one
// (grantsLease).
func (n *Node) crossedWinner(fresh bool) bool {
	p := &n.peer.Last
	l := Last(n.epochs)
	crossed := fresh && p.Role == RoleReplica && l.Solo && l.Epoch.Node == n.cfg.ID && p.Epoch == l.Epoch &&
		n.following.Node != n.cfg.ID && !n.following.IsZero() && n.followSoloFrom != 0
	switch {
	case !crossed:
		n.crossedSince = 0
		return false
	case n.crossedSince == 0:
		n.crossedSince = n.now
		return false
	case n.now-n.crossedSince < int64(n.cfg.Lease/2) || n.persisted != n.last:
		return false
	case n.holdOff != "" || !n.peerHearsNow() || !n.det.PeerKnowsRun(p):
		return false
	}
	peerWrote := p.Applied >= n.followSoloFrom
	return !YieldAfterSplit(n.wroteAlone(), peerWrote, n.cfg.Preferred)
}
