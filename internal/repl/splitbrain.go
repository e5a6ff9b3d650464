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
