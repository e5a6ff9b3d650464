package server

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/conflict"
	"github.com/dyad-db/dyad/internal/repl"
)

// The role rules live in the protocol core (internal/repl, roles.go there).
// This file carries out what they decide: a role change, the fence
// command, the tick, and leaving.

// onTick feeds the clock to the core (every Lease/8) and refreshes the
// replication gauges.
func (s *Server) onTick() {
	r := s.repl
	if st := r.node.Status(); st.Stuck != "" && r.conflictSet != "" && conflict.Accepted(r.conflictSet) {
		s.log.Warn("split brain accepted by the operator: giving up this node's diverged history, which stays in its conflict records", "conflict-set", r.conflictSet)
		r.node.Resolve()
	}
	r.node.Tick(r.clock.Now())
	s.handleReady()
	s.replGauges()
}

// replGauges refreshes the replication metrics (apply loop, every tick).
func (s *Server) replGauges() {
	r := s.repl
	st := r.node.Status()
	s.m.Epoch.Set(float64(st.Current.Term))
	s.m.AppliedIndex.Set(float64(s.appliedIdx))
	s.m.CommitIndex.Set(float64(s.commitIdx()))
	alive := 0.0
	if st.PeerFresh {
		alive = 1
	}
	s.m.PeerAlive.Set(alive)
	lag := 0.0
	if st.PeerFresh {
		switch {
		case st.Role.Leads():
			lag = float64(s.store.ReadableRev() - st.Peer.Rev)
		case st.Role == repl.RoleReplica:
			lag = float64(st.Peer.Rev - s.store.ReadableRev())
		}
		lag = max(lag, 0)
	}
	s.m.LagRevisions.Set(lag)
	if st.Role == repl.RoleSolo {
		s.m.SoloSeconds.Add((r.cfg.Lease / 8).Seconds())
	}
}

// commitIdx is the index up to which entries are committed, as this node
// knows it.
func (s *Server) commitIdx() uint64 {
	if s.Role() == repl.RolePrimary {
		return s.repl.node.Status().Commit
	}
	return s.appliedIdx
}

// applyRoleChange carries out a role change decided by the core.
func (s *Server) applyRoleChange(rc *repl.RoleChange) {
	r := s.repl
	st := r.node.Status()
	// The atomic first: forward registers a waiting write, then checks the
	// role; a write registered before this swap is taken below.
	r.role.Store(uint32(rc.To))
	s.publish()
	s.log.Warn("role change", "from", rc.From.String(), "to", rc.To.String(), "why", rc.Reason, "epoch", rc.Epoch.String(), "applied-index", s.appliedIdx,
		"peer-heard-ago", st.HeardAgo.Round(time.Millisecond).String(), "peer-role", st.Peer.Role.String())
	s.m.Role.Set(float64(rc.To))
	if rc.ResetLeases {
		// Every lease gets its full TTL from now, as etcd does on a leader
		// change; the old primary's deadlines are never used.
		s.lessor.ResetDeadlines()
	}
	if rc.SteppedDown {
		// Queued and in-flight writes get "request timed out": they may
		// be in the log that a later primary keeps or drops. Their
		// revisions stay applied here but invisible, and their events are
		// dropped: if the later primary keeps them, the next batch this
		// node makes visible covers them (Hub.NotifyFrom).
		for _, p := range r.inflight {
			for _, q := range p.batch {
				if q.done != nil {
					q.done <- applyResult{err: rpctypes.ErrGRPCTimeout}
				}
			}
		}
		r.inflight = nil
		r.fwdq = nil
	}
	if rc.LeftReplica {
		// Forwarded requests may or may not be applied by a later
		// primary: their callers get "request timed out", never a guess.
		// Taking over from a primary that handed over, none of them was
		// logged: this node proposes them.
		s.mu.Lock()
		for id, p := range r.fwdWait {
			if rc.AdoptForwards {
				r.fwdq = append(r.fwdq, p)
			} else {
				p.done <- applyResult{err: rpctypes.ErrGRPCTimeout}
			}
			delete(r.fwdWait, id)
		}
		for id, c := range r.kaWait {
			c <- repl.Reply{ReqID: id, Err: repl.ReplyNotPrimary}
			delete(r.kaWait, id)
		}
		s.mu.Unlock()
	}
	if rc.To.Leads() {
		s.m.HasLeader.Set(1)
		s.m.IsLeader.Set(1)
		s.m.LeaderChanges.Inc()
	} else {
		s.m.IsLeader.Set(0)
		if rc.To == repl.RoleWaiting {
			s.m.HasLeader.Set(0)
		}
	}
	if rc.Reason == "fence failed" {
		s.log.Error("fence command failed; not promoting")
	}
}

// publish copies what request goroutines read from the core's status.
func (s *Server) publish() {
	r := s.repl
	st := r.node.Status()
	r.role.Store(uint32(st.Role))
	r.leader.Store(st.Leader)
	r.leaseUntil.Store(st.LeaseUntil)
	r.handoffUntil.Store(st.HandoffUntil)
	r.resyncing.Store(st.Resyncing)
	if st.PeerID != 0 {
		r.peerID.Store(st.PeerID)
	}
	s.mu.Lock()
	s.epoch = st.Current
	s.mu.Unlock()
}

// fenceTimeout is how long one fence run may take (ReplConfig.FenceTimeout).
func (c *ReplConfig) fenceTimeout() time.Duration {
	if c.FenceTimeout > 0 {
		return c.FenceTimeout
	}
	return 5 * c.Lease
}

// fencer runs the fence command off the apply loop, one request at a
// time, and hands each result back to it. Owned by Run.
func (s *Server) fencer(ctx context.Context) error {
	r := s.repl
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.fenceReq:
		}
		fctx, cancel := context.WithTimeout(ctx, r.cfg.fenceTimeout())
		err := r.cfg.Fence(fctx)
		cancel()
		select {
		case r.fenceRes <- err:
			s.wakeLoop()
		case <-ctx.Done():
			return nil
		}
	}
}

// onFenced takes the fence command's result in the apply loop.
func (s *Server) onFenced(err error) {
	if err != nil {
		s.log.Error("fence command failed", "err", err)
	}
	s.repl.node.Fenced(err)
	s.handleReady()
}

// leave runs as the apply loop stops: a replica gives up its read lease
// (it serves no linearizable read from now on) and then tells its primary,
// which leads alone at once instead of waiting out the silence and the
// lease (about a second of stalled writes on every rolling restart).
func (s *Server) leave() {
	r := s.repl
	if r == nil || s.Role() != repl.RoleReplica {
		return
	}
	r.leaseUntil.Store(0)
	r.node.Leave()
	s.handleReady()
}

// fail stops the node after a storage failure.
func (s *Server) fail(err error) {
	s.mu.Lock()
	if s.fatal == nil {
		s.fatal = fmt.Errorf("storage commit failed: %w", err)
	}
	s.mu.Unlock()
	s.log.Error("storage failure; refusing requests", "err", err)
}
