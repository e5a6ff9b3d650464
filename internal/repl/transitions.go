package repl

// Role transitions and the epochs they start.

// newEpochAt starts an epoch led by this node whose first index is start,
// and queues its record (and the trimmed history) in the HardState, which
// the driver persists before anything of this Ready is sent. Going solo
// starts the epoch at the first unacknowledged entry: those entries are
// about to be acknowledged alone, so a rejoin must treat them as a solo
// suffix.
func (n *Node) newEpochAt(solo bool, start uint64) {
	term := max(n.maxTerm, n.peer.Last.MaxTerm) + 1
	rec := EpochRecord{Epoch: Epoch{Term: term, Node: n.cfg.ID}, Start: start, Solo: solo}
	kept, dropped := TrimEpochs(append(n.epochs[:len(n.epochs):len(n.epochs)], rec), n.sharedIdx())
	hs := &n.rd.HardState
	hs.Term = term
	hs.Put = append(hs.Put, rec)
	hs.Drop = append(hs.Drop, dropped...)
	n.epochs = kept
	n.maxTerm = term
	n.ledLast = true
	n.epoch = rec.Epoch
}

// sharedIdx is an index up to which both nodes' logs are known to hold the
// same entries (TrimEpochs): what the replica acknowledged to this node as
// primary, or, as a replica its leader confirmed, what it holds.
func (n *Node) sharedIdx() uint64 {
	shared := n.peer.Match
	if n.role == RoleReplica && n.verified && n.persisted > shared {
		shared = n.persisted
	}
	return shared
}

// lead makes this node the leader (alone) after a start.
func (n *Node) lead(why string) {
	n.newEpochAt(true, n.last+1)
	n.setRole(RoleSolo, why)
	n.rd.RoleChange.ResetLeases = true
	n.updateCommit()
}

// promote makes the replica the leader after its primary's lease expired.
// With a fence command, the first call asks for it (Ready.Fence) and
// returns; Fenced promotes if it succeeded and the reasons still hold.
func (n *Node) promote() {
	if n.cfg.Fence && !n.fenced {
		if !n.fencing {
			n.fencing = true
			n.rd.Fence = true
		}
		return
	}
	n.newEpochAt(true, n.last+1)
	// The old primary's lease deadlines are never used: every lease gets
	// its full TTL from now, as etcd does on a leader change.
	n.det.ForgetPeer()
	n.rd.Counters.Failovers++
	n.setRole(RoleSolo, "primary lost")
	n.rd.RoleChange.ResetLeases = true
	n.updateCommit()
}

// goSolo makes the synchronous primary lead alone: the entries not yet
// acknowledged by the replica start a solo epoch and are released. Only
// once the replica cannot serve reads any more (its read lease expired, or
// it said it is leaving).
func (n *Node) goSolo(why string) {
	start := n.last + 1
	if len(n.inflight) > 0 {
		start = n.peer.Match + 1
	}
	n.newEpochAt(true, start)
	n.inflight = nil
	n.rd.Counters.SoloEntered++
	n.setRole(RoleSolo, why)
	n.updateCommit()
}

// stepDown leaves leadership. Batches not yet committed get "request timed
// out" from the driver (a later primary keeps or drops them).
func (n *Node) stepDown(why string) {
	n.inflight = nil
	n.setRole(RoleWaiting, why)
}

// follow makes this node the replica of its peer.
func (n *Node) follow() {
	n.det.ForgetPeer()
	n.unverify()
	n.mergeRev = 0
	n.following = n.peer.Last.Epoch
	n.followSoloFrom, n.crossedSince = n.peer.Last.SoloFrom, 0
	n.noteFollowed(n.following)
	n.ledLast = false
	n.peer.Catchup.Req = 0 // answers to requests made before describe an older peer
	n.setRole(RoleReplica, "following "+n.following.String())
	n.askCatchup()
}

// setRole changes the role and records the change for the Ready.
func (n *Node) setRole(role Role, why string) {
	old := n.role
	if old == role {
		return
	}
	n.role = role
	if role.Leads() && !old.Leads() {
		n.leadFrom = n.last
	}
	if role != RoleWaiting {
		n.crossWon = false
	}
	rc := n.rd.RoleChange
	if rc == nil {
		rc = &RoleChange{From: old}
		n.rd.RoleChange = rc
	}
	rc.To, rc.Reason, rc.Epoch = role, why, n.epoch
	if role == RoleReplica {
		rc.Epoch = n.following
	}
	if old.Leads() && !role.Leads() {
		rc.SteppedDown = true
	}
	if old == RoleReplica {
		rc.LeftReplica = true
		n.catchupAt = 0
	}
	if !role.Leads() {
		n.peer.Match = 0
	}
	n.failReads()
}

// setStuck records why this node waits for an operator ("" when it no
// longer does).
func (n *Node) setStuck(why string) {
	n.stuck = why
	n.rd.Stuck = &why
}

// commitIdx is the commit index this node reports: what its replica
// acknowledged while it leads synchronously, its own durable index alone,
// and what it learnt from its leader (at most what it holds) as a replica.
func (n *Node) commitIdx() uint64 { return n.commit }

// updateCommit recomputes the commit index of a leader and releases the
// reads it allows. Commit never runs backwards.
func (n *Node) updateCommit() {
	var c uint64
	switch n.role {
	case RolePrimary:
		c = min(n.persisted, n.peer.Match)
		// Acks are cumulative: batches up to c are committed.
		i := 0
		for i < len(n.inflight) && n.inflight[i].idx <= n.peer.Match {
			i++
		}
		n.inflight = n.inflight[i:]
	case RoleSolo:
		c = n.persisted
	default:
		return
	}
	if c > n.commit {
		n.commit = c
		if n.role == RolePrimary && !n.durableCommit() {
			// The replica shows and serves only what it knows is
			// committed (replicaSafe): tell it now, not at the next tick.
			// From ProtocolV4 on it learnt as much when this node's
			// durable index moved (Persisted).
			n.sendHeartbeat()
		}
	}
	n.releaseReads()
}

// noteFollowed records that this node follows a leader of epoch e: a newer
// term than any followed before goes into the HardState, durable before
// anything of this Ready (an acknowledgement, a heartbeat) is sent.
func (n *Node) noteFollowed(e Epoch) {
	if e.Term <= n.followed {
		return
	}
	n.followed = e.Term
	n.maxTerm = max(n.maxTerm, e.Term)
	n.rd.HardState.Followed = e.Term
}
