package server

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/repl"
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

// handover is a MoveLeader waiting for the hand-over of the primary role
// (docs/ARCHITECTURE.md, "Hand-over"; the protocol is the core's,
// internal/repl/handover.go). Owned by the apply loop once sent there.
type handover struct {
	target uint64
	// done answers the MoveLeader caller (buffered; nil once answered).
	done chan error
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
		s.wakeLoop()
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
	if r.handover != nil {
		h.done <- errTransfer // one at a time
		return
	}
	err := repl.ErrNotSynchronous
	if h.target == r.peerID.Load() {
		err = r.node.Handover(false)
	}
	switch {
	case errors.Is(err, repl.ErrBusy):
		h.done <- errTransfer
	case err != nil:
		s.log.Warn("move-leader refused: the replica is not synchronous and live", "role", s.Role().String(), "target", formatID(h.target))
		h.done <- errNotSynchronous
	default:
		r.handover = h
		s.log.Warn("handing the primary role over to the replica", "applied-index", s.appliedIdx)
		s.handleReady()
	}
}

// handOverAfterFailure is called when a commit failed on this node (it
// cannot persist): a synchronous primary hands over what is already
// durable on both nodes instead of wedging; otherwise the node stops.
func (s *Server) handOverAfterFailure() {
	if err := s.repl.node.Handover(true); err == nil {
		s.log.Warn("storage failed: handing the primary role over to the replica", "applied-index", s.appliedIdx)
	}
	s.handleReady()
}

// onHandoverResult answers the MoveLeader caller with the outcome.
func (s *Server) onHandoverResult(res *repl.HandoverResult) {
	r := s.repl
	h := r.handover
	r.handover = nil
	// A replica that stopped on purpose during the hand-over (both nodes
	// of a pair stopped at once) is no failure: the caller hears that
	// there is no live replica, which a planned stop (StepDown) takes as
	// nothing to hand over to.
	var answer error
	switch {
	case errors.Is(res.Err, repl.ErrPeerLeft):
		s.log.Info("hand-over ended: the replica is stopping", "role", s.Role().String())
		answer = errNotSynchronous
	case res.Err != nil:
		s.log.Warn("hand-over failed", "err", res.Err)
		answer = errTransfer
	}
	if h == nil || h.done == nil {
		return
	}
	h.done <- answer
	h.done = nil
}
