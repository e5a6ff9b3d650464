package repl

// Hand-over of the primary role (docs/ARCHITECTURE.md, "Hand-over"):
// etcdctl move-leader, a planned stop, or a primary that can no longer
// persist. The primary stops new batches, waits until the replica has
// acknowledged everything, gives up its role and role lease, and only then
// tells the replica, which takes over in a new epoch if it holds exactly
// what the primary logged.

// handoverState is a hand-over under way from this node.
type handoverState struct {
	final    bool  // this node's storage failed; it stops once the message is sent
	deadline int64 // for the replica to acknowledge everything
	sent     bool
	msg      Handover
	lastSend int64
	refused  bool
	answered bool
	// peerRun: the peer's run when the hand-over began. A later run of
	// the peer cannot take it (it starts waiting, never as this node's
	// replica), so hearing one ends a hand-over the peer fell silent on.
	peerRun uint64
}

// Handover starts handing the primary role to the replica (final: this
// node's storage failed; it stops once the hand-over is sent). Only a
// synchronous primary whose replica is live may; the outcome comes in
// Ready.HandoverResult. A final hand-over during one under way makes that
// one final.
func (n *Node) Handover(final bool) error {
	if n.handover != nil {
		if final {
			n.handover.final = true
			return nil
		}
		return ErrBusy
	}
	if n.role != RolePrimary || !n.peerFresh() {
		return ErrNotSynchronous
	}
	n.handover = &handoverState{final: final, deadline: n.now + int64(n.cfg.AckTimeout), peerRun: n.peer.Last.Run}
	n.handoffUntil = n.now + int64(n.cfg.AckTimeout+4*n.cfg.Lease)
	n.progressHandover()
	return nil
}

// progressHandover moves a hand-over on: once the replica has
// acknowledged everything, it sends the hand-over.
func (n *Node) progressHandover() {
	h := n.handover
	if h == nil {
		return
	}
	if h.sent {
		if h.final {
			n.handover = nil // nothing to wait for: the node stops
			return
		}
		if !h.refused && n.now-h.lastSend > int64(n.cfg.Lease) {
			n.sendHandover() // lost on the way? The replica answers a repeat alike.
		}
		return
	}
	if n.role != RolePrimary {
		n.endHandover(ErrNotSynchronous)
		return
	}
	if n.peer.Match < n.last {
		if n.now > h.deadline {
			n.endHandover(ErrNotSynchronous)
		}
		return
	}
	// Everything is acknowledged by the replica. From here on this node is
	// no primary: it drops its role lease and role before the replica can
	// learn of the hand-over, so the two never act as primaries at once.
	h.msg = Handover{Epoch: n.epoch, Last: n.last, Final: h.final}
	n.det.ForgetPeer()
	n.setRole(RoleWaiting, "handed the primary role over")
	h.sent = true
	n.sendHandover()
}

func (n *Node) sendHandover() {
	h := n.handover
	h.lastSend = n.now
	n.send(Message{Kind: KindHandover, Term: h.msg.Epoch.Term, Index: h.msg.Last, Handover: h.msg})
}

// endHandover ends the hand-over and answers its caller.
func (n *Node) endHandover(err error) {
	h := n.handover
	n.handover = nil
	if err != nil {
		n.handoffUntil = 0
	}
	n.answerHandover(h, err)
}

func (n *Node) answerHandover(h *handoverState, err error) {
	if !h.answered {
		h.answered = true
		n.rd.HandoverResult = &HandoverResult{Err: err, Final: h.final}
	}
}

// stepHandedOver: a node that sent a hand-over follows the peer once the
// peer leads a newer epoch; it leads again only if the peer refused and
// its read lease from this node expired. A heartbeat saying "replica" may
// predate the hand-over, so it is never taken as a refusal.
//
// A peer that falls silent does not end the wait: the caller is answered
// (the replica is no live synchronous one), but the hand-over stays sent,
// and repeated every lease, until the peer answers it (every run of it
// does: stepHandover) or leads. A frozen replica takes it at its thaw,
// having just sent a heartbeat saying "replica"; a node that went back to
// the ordinary rules on the silence led again on that heartbeat
// ("restarted before the replica took over") while the replica took over
// in an epoch of the same term, and a split brain was made up without any
// cut (sim seed 232566, handover_frozen_replica). A replica that never
// comes back leaves this node waiting, as the ordinary rules did: it led
// a synchronous epoch last (ledLastAlone). One that comes back in a new
// run ends the wait: that run refuses the hand-over, but the repeats may
// not reach it, and the ordinary rules decide from there
// (handover_lapsed).
func (n *Node) stepHandedOver() {
	h := n.handover
	p := &n.peer.Last
	switch {
	case n.peerFresh() && p.Role.Leads() && p.Epoch.Term > h.msg.Epoch.Term:
		n.endHandover(nil)
		n.follow()
	case h.refused && n.det.PeerLeaseExpired(n.now):
		n.endHandover(ErrNotSynchronous)
		n.lead("the replica refused the hand-over")
	case h.answered && n.peerFresh() && p.Run != 0 && p.Run != h.peerRun:
		n.endHandover(ErrNotSynchronous)
	case n.det.PeerDead(n.now) && !h.answered:
		n.lapseHandover(h, ErrNotSynchronous)
	}
}

// lapseHandover answers the caller of a sent hand-over whose replica is
// gone (silent: stepHandedOver; or stopped on purpose: stepLeaving) with
// err, unless it was answered already. The hand-over itself stays sent:
// only a later answer of the peer, or its new run, ends it.
func (n *Node) lapseHandover(h *handoverState, err error) {
	if h.answered {
		return
	}
	n.answerHandover(h, err)
	n.handoffUntil = 0
}

// stepHandoverAck takes the replica's answer.
func (n *Node) stepHandoverAck(m *Message) {
	a, h := m.Handover, n.handover
	if h == nil || !h.sent || a.Epoch != h.msg.Epoch || a.Last != h.msg.Last {
		return
	}
	if a.Refused {
		h.refused = true
		return
	}
	// The peer leads now. Stay out of the role rules until its heartbeats
	// say so (they travel apart from this answer).
	n.answerHandover(h, nil)
}

// stepHandover takes over the primary role from the peer when this
// replica holds exactly what the peer logged.
func (n *Node) stepHandover(m *Message) {
	h := m.Handover
	ack := h
	ack.Refused = false
	switch {
	case n.role == RoleReplica && n.verified && m.From == h.Epoch.Node && n.following.Node == h.Epoch.Node &&
		!h.Epoch.Less(n.following) && !h.Epoch.Less(n.lastEpoch) && n.persisted == h.Last && n.last == h.Last:
		n.takeOver(h)
		ack.Refused = !n.role.Leads()
	case n.role.Leads() && n.tookOver == h.Epoch:
		// A repeat of the hand-over this node already took.
	default:
		ack.Refused = true
	}
	n.send(Message{Kind: KindHandoverAck, Term: h.Epoch.Term, Index: h.Last, Handover: ack})
}

// takeOver makes this replica the primary at once: the old primary stopped
// at h.Last, which this node holds, and serves nothing as primary any
// more. It leads synchronously (the old primary follows); after a final
// hand-over (the old primary stops) it leads alone.
func (n *Node) takeOver(h Handover) {
	// The new epoch's term must pass the one handed over: the old
	// primary follows only a newer term (stepHandedOver). This node may
	// not have heard that term yet: a primary that just went synchronous
	// again in a new epoch hands over before any heartbeat names it
	// (testdata/handover_term.txt).
	n.maxTerm = max(n.maxTerm, h.Epoch.Term)
	n.newEpochAt(h.Final, n.last+1)
	n.det.ForgetPeer()
	n.tookOver = h.Epoch
	role := RolePrimary
	if h.Final {
		role = RoleSolo
	}
	n.setRole(role, "the primary handed its role over")
	n.peer.Match = n.last
	n.rd.RoleChange.ResetLeases = true
	// The old primary logged nothing after h.Last, and this node answered
	// every forwarded write logged up to there: the ones still waiting
	// were never logged, so the driver proposes them here, once.
	n.rd.RoleChange.AdoptForwards = true
	n.updateCommit()
	n.sendHeartbeat() // the old primary follows at once
}
