package server

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// errTransfer is etcd's answer when a leadership transfer does not
// complete (etcdserver.ErrTimeoutLeaderTransfer, which etcd sends with
// code Unknown).
var errTransfer = status.Error(codes.Unknown, "etcdserver: request timed out, leader transfer took too long")

// errNotSynchronous: there is no synchronous replica to hand over to.
var errNotSynchronous = status.Error(codes.FailedPrecondition, "dyad: move-leader: the replica is not a live synchronous replica (the primary leads alone or is changing role)")

// errRedirect is the result of a proposal that was never applied because
// the node stopped leading: propose forwards it to the new primary, or
// answers "no leader".
var errRedirect = fmt.Errorf("not applied: this node stopped leading: %w", rpctypes.ErrGRPCNoLeader)

// handover is a hand-over of the primary role under way on the primary
// (docs/ARCHITECTURE.md, "Hand-over"). Owned by the apply loop.
type handover struct {
	target uint64
	// done answers the MoveLeader caller (buffered; nil once answered, and
	// for a hand-over after a storage failure).
	done chan error
	// final: this node's storage failed; it stops once the message is sent.
	final bool
	// deadline (detector time) for the replica to acknowledge everything.
	deadline int64
	sent     bool
	msg      repl.Handover
	lastSend int64
	refused  bool
}

// MoveLeader hands the primary role to target, etcd's Maintenance
// MoveLeader: only the leader may, target must be the peer (or this node:
// nothing to do), and it returns once the peer leads.
func (s *Server) MoveLeader(ctx context.Context, target uint64) error {
	if s.repl == nil {
		if target == s.memberID {
			return nil
		}
		return rpctypes.ErrGRPCBadLeaderTransferee
	}
	r := s.repl
	if !s.Role().Leads() {
		return rpctypes.ErrGRPCNotLeader
	}
	if target == s.memberID {
		return nil
	}
	if target == 0 || target != r.peerID.Load() {
		return rpctypes.ErrGRPCBadLeaderTransferee
	}
	done := make(chan error, 1) // the apply loop owns h from here on
	h := &handover{target: target, done: done}
	select {
	case r.handoverc <- h:
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-s.stopped:
		return errStopped
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errTransfer // as etcd: the transfer did not finish in time
	case <-s.stopped:
		return errStopped
	}
}

// StepDown hands the primary role to a live synchronous replica before a
// planned stop (SIGTERM), so that clients see a hand-over pause instead of
// a failover after the peer lease. A node that does not lead, a single
// node, and a primary whose replica is not synchronous and live do nothing
// and return nil: they stop as they would have.
func (s *Server) StepDown(ctx context.Context) error {
	if s.repl == nil || s.Role() != repl.RolePrimary {
		return nil
	}
	peer := s.repl.peerID.Load()
	if peer == 0 {
		return nil
	}
	err := s.MoveLeader(ctx, peer)
	if errors.Is(err, errNotSynchronous) {
		return nil
	}
	return err
}

// handingOver reports whether writes that find this node not leading
// should wait for the new primary: a hand-over from this node is under
// way (or just finished).
func (s *Server) handingOver() bool {
	return s.repl != nil && s.repl.clock.Now() < s.repl.handoffUntil.Load()
}

// startHandover begins a hand-over asked for by MoveLeader (apply loop).
// Only a synchronous primary whose replica is live may hand over.
func (s *Server) startHandover(h *handover) {
	r := s.repl
	now := r.clock.Now()
	switch {
	case r.handover != nil:
		h.done <- errTransfer // one at a time
		return
	case s.Role() != repl.RolePrimary || !s.peerFresh(now) || h.target != r.peerID.Load():
		s.log.Warn("move-leader refused: the replica is not synchronous and live", "role", s.Role().String(), "target", formatID(h.target))
		h.done <- errNotSynchronous
		return
	}
	s.beginHandover(h)
}

// beginHandover stops new batches: proposals and forwarded writes queue up
// until the hand-over ends.
func (s *Server) beginHandover(h *handover) {
	r := s.repl
	now := r.clock.Now()
	h.deadline = now + int64(r.cfg.AckTimeout)
	r.handover = h
	r.handoffUntil.Store(now + int64(r.cfg.AckTimeout+4*r.cfg.Lease))
	s.log.Warn("handing the primary role over to the replica", "final", h.final, "applied-index", s.appliedIdx, "ack-index", r.ackIdx)
}

// handOverAfterFailure is called when a commit failed on this node (it
// cannot persist): a synchronous primary hands over what is already
// durable on both nodes instead of wedging; otherwise the node stops.
func (s *Server) handOverAfterFailure() {
	r := s.repl
	if r.handover != nil {
		r.handover.final = true
		return
	}
	if s.Role() != repl.RolePrimary || !s.peerFresh(r.clock.Now()) {
		return
	}
	s.beginHandover(&handover{final: true})
}

// progressHandover moves a hand-over on (apply loop, every iteration): once
// the replica has acknowledged everything applied, it sends the hand-over.
func (s *Server) progressHandover() {
	r := s.repl
	h := r.handover
	now := r.clock.Now()
	if h.sent {
		if h.final {
			r.handover = nil // nothing to wait for: the node stops
			return
		}
		if !h.refused && now-h.lastSend > int64(r.cfg.Lease) {
			s.sendHandover(h) // lost on the way? The replica answers a repeat alike.
		}
		return
	}
	if s.Role() != repl.RolePrimary {
		s.endHandover(errTransfer, "the role changed before the replica caught up")
		return
	}
	if r.ackIdx < s.appliedIdx {
		if now > h.deadline {
			s.endHandover(errTransfer, "the replica did not acknowledge everything in time")
		}
		return
	}
	// Everything applied is acknowledged by the replica. From here on this
	// node is no primary: it drops its role lease and role (no more
	// linearizable reads or writes here) before the replica can learn of
	// the hand-over, so the two never act as primaries at once. Forwarded
	// writes not yet logged are dropped: the replica proposes them again.
	h.msg = repl.Handover{Epoch: s.currentEpoch(), Last: s.appliedIdx, Final: h.final}
	r.fwdq = nil
	r.det.ForgetPeer()
	r.leaseUntil.Store(0)
	s.setRole(repl.RoleWaiting, "handed the primary role over")
	h.sent = true
	s.sendHandover(h)
}

func (s *Server) sendHandover(h *handover) {
	r := s.repl
	h.lastSend = r.clock.Now()
	m := &transport.Message{Class: transport.Control, Kind: repl.KindHandover, Term: h.msg.Epoch.Term, Index: h.msg.Last, Payload: h.msg.Encode()}
	if err := r.tr.Send(m); err != nil {
		s.log.Warn("hand-over not sent; will retry", "err", err)
		return
	}
	s.log.Info("hand-over sent", "epoch", h.msg.Epoch.String(), "last-index", h.msg.Last, "final", h.msg.Final)
}

// endHandover ends the hand-over and answers its caller. Before the
// hand-over was sent, the node simply goes on leading.
func (s *Server) endHandover(err error, why string) {
	r := s.repl
	h := r.handover
	r.handover = nil
	if err != nil {
		r.handoffUntil.Store(0)
		s.log.Warn("hand-over failed", "why", why)
	}
	s.answerHandover(h, err)
}

func (s *Server) answerHandover(h *handover, err error) {
	if h.done != nil {
		h.done <- err
		h.done = nil
	}
}

// evaluateHandedOver applies the role rules to a node that sent a
// hand-over and now waits: it follows the peer once the peer leads a newer
// epoch; it leads again only if the peer refused and its read lease from
// this node has expired. A heartbeat saying "replica" may predate the
// hand-over, so it is never taken as a refusal.
func (s *Server) evaluateHandedOver(ctx context.Context, now int64, fresh bool) {
	r := s.repl
	h := r.handover
	switch {
	case fresh && r.peer.Role.Leads() && r.peer.Epoch.Term > h.msg.Epoch.Term:
		s.endHandover(nil, "")
		s.follow()
	case h.refused && r.det.PeerLeaseExpired(now):
		s.endHandover(errTransfer, "the replica refused it")
		s.lead(ctx, "the replica refused the hand-over")
	case r.det.PeerDead(now):
		// The ordinary rules decide from here: the peer may have taken
		// over and died, or never heard of it.
		s.endHandover(errTransfer, "the replica was lost during the hand-over")
	}
}

// onHandoverAck takes the replica's answer.
func (s *Server) onHandoverAck(m *transport.Message) {
	r := s.repl
	a, err := repl.DecodeHandover(m.Payload)
	h := r.handover
	if err != nil || h == nil || !h.sent || a.Epoch != h.msg.Epoch || a.Last != h.msg.Last {
		return
	}
	if a.Refused {
		h.refused = true
		s.log.Warn("the replica refused the hand-over; leading again once its read lease has expired")
		return
	}
	// The peer leads now. Stay out of the role rules until its heartbeats
	// say so (they travel apart from this answer).
	s.answerHandover(h, nil)
}

// onHandover takes over the primary role from the peer when this replica
// holds exactly what the peer logged (apply loop).
func (s *Server) onHandover(m *transport.Message) {
	r := s.repl
	h, err := repl.DecodeHandover(m.Payload)
	if err != nil {
		return
	}
	ack := h
	ack.Refused = false
	switch {
	case s.Role() == repl.RoleReplica && r.verified && m.From == h.Epoch.Node && r.following.Node == h.Epoch.Node &&
		!h.Epoch.Less(r.following) && !h.Epoch.Less(r.lastEpoch) && s.appliedIdx == h.Last:
		s.takeOver(h)
		ack.Refused = !s.Role().Leads()
	case s.Role().Leads() && r.tookOver == h.Epoch:
		// A repeat of the hand-over this node already took.
	default:
		s.log.Warn("hand-over refused: this node does not hold exactly what the primary logged",
			"role", s.Role().String(), "applied-index", s.appliedIdx, "their-last", h.Last, "their-epoch", h.Epoch.String(), "following", r.following.String())
		ack.Refused = true
	}
	r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindHandoverAck, Term: h.Epoch.Term, Index: h.Last, Payload: ack.Encode()})
}

// takeOver makes this replica the primary at once: the old primary stopped
// at h.Last, which this node holds, and serves nothing as primary any more.
// A new epoch is persisted before anything is logged in it, and every
// lease gets its full TTL, as on any leader change. It leads synchronously
// (the old primary follows); after a final hand-over (the old primary
// stops) it leads alone.
func (s *Server) takeOver(h repl.Handover) {
	r := s.repl
	if err := s.newEpoch(h.Final); err != nil {
		s.fail(err)
		return
	}
	s.lessor.ResetDeadlines()
	r.det.ForgetPeer()
	r.leaseUntil.Store(0)
	r.ackIdx = s.appliedIdx
	r.tookOver = h.Epoch
	role := repl.RolePrimary
	if h.Final {
		role = repl.RoleSolo
	}
	// The old primary logged nothing after h.Last, and this node has
	// answered every forwarded write logged up to there: the ones still
	// waiting were never logged, so setRole hands them to this node's
	// next batch, once.
	r.adoptForwards = true
	s.setRole(role, "the primary handed its role over")
	s.sendHeartbeat() // the old primary follows at once
}
