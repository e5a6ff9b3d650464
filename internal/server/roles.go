package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

func (s *Server) commitIdx() uint64 {
	r := s.repl
	switch s.Role() {
	case repl.RolePrimary:
		return r.ackIdx
	}
	return s.appliedIdx
}

// ackOverdue reports an entry unacknowledged for AckTimeout of this node's
// own running time (a freeze of this node restarts the count).
func (s *Server) ackOverdue(now int64) bool {
	r := s.repl
	if len(r.inflight) == 0 || r.det.InFreezeGrace(now) {
		return false
	}
	since := r.inflight[0].at
	if rs := r.det.RunningSince(); rs > since {
		since = rs
	}
	return now-since > int64(r.cfg.AckTimeout)
}

// onTick runs the detector and the role rules; called from the apply loop
// every Lease/8.
func (s *Server) onTick(ctx context.Context) {
	r := s.repl
	now := r.clock.Now()
	r.det.Tick(now)
	s.sendHeartbeat()
	s.replGauges(now)
	s.splitBrainTick(now)
	s.evaluate(ctx, now)
	r.leaseUntil.Store(r.det.LeaseUntil())
	if s.Role() == repl.RoleReplica {
		// Lost or unanswered: ask again, in the same series.
		switch {
		case r.catchupReq != 0 && now-r.catchupAsked > int64(r.cfg.Lease):
			s.askCatchup()
		case r.snapReq != 0 && now-r.catchupAsked > int64(snapPatience(r.cfg.Lease)):
			s.log.Warn("no snapshot chunk for a while; asking again", "waited", time.Duration(now-r.catchupAsked).Round(time.Millisecond).String())
			s.askSnapshot(r.snapMin)
		}
	}
}

// replGauges refreshes the replication metrics (apply loop, every tick).
func (s *Server) replGauges(now int64) {
	r := s.repl
	role := s.Role()
	s.m.Epoch.Set(float64(s.currentEpoch().Term))
	s.m.AppliedIndex.Set(float64(s.appliedIdx))
	s.m.CommitIndex.Set(float64(s.commitIdx()))
	alive := 0.0
	if s.peerFresh(now) {
		alive = 1
	}
	s.m.PeerAlive.Set(alive)
	lag := 0.0
	if s.peerFresh(now) {
		switch {
		case role.Leads():
			lag = float64(s.store.ReadableRev() - r.peer.Rev)
		case role == repl.RoleReplica:
			lag = float64(r.peer.Rev - s.store.ReadableRev())
		}
		if lag < 0 {
			lag = 0
		}
	}
	s.m.LagRevisions.Set(lag)
	if role == repl.RoleSolo {
		s.m.SoloSeconds.Add((r.cfg.Lease / 8).Seconds())
	}
}

// peerFresh reports whether the peer's last heartbeat is recent enough to
// act on what it says (a node thawing from a freeze holds stale news).
func (s *Server) peerFresh(now int64) bool {
	return s.repl.peerSeen && s.repl.det.PeerHeard(now)
}

// evaluate applies the role rules (docs/ARCHITECTURE.md, "Roles").
func (s *Server) evaluate(ctx context.Context, now int64) {
	r := s.repl
	// Notice a freeze of this node before judging anything: a message
	// handled right after a thaw must not find the peer "dead" or acks
	// "overdue" by the frozen time.
	r.det.Tick(now)
	fresh := s.peerFresh(now)
	switch s.Role() {
	case repl.RoleWaiting:
		if r.stuck != "" {
			return
		}
		if r.handover != nil && r.handover.sent {
			s.evaluateHandedOver(ctx, now, fresh)
			return
		}
		waited := now-r.started > 2*int64(r.cfg.Lease)
		switch {
		case fresh && r.peer.Role == repl.RoleSolo && r.ledLast && s.wroteAlone() && !s.yieldsTo(&r.peer) && r.holdOff == "":
			// Restarted after a split in which this node should win:
			// lead again, and the peer yields when it hears it. Only
			// after a real split, one in which this node acknowledged
			// writes alone: one that led a synchronous epoch and
			// crashed was replaced by its replica, whose solo writes
			// would otherwise go to conflict records after a single
			// fault if both sides then wrote (the next case follows).
			s.lead(ctx, "restarted after a split brain that this node wins")
		case fresh && r.peer.Role.Leads():
			s.follow()
		case fresh && r.peer.Role == repl.RoleReplica && r.ledLast:
			// Back before the replica promoted: lead again; it follows.
			// Only once it has heard this node lately: a replica still
			// counting the silence of this node's previous run may be
			// promoting right now (both would lead in the same term).
			// And only once it has heard this run: until then it may
			// still hold a read lease from this node's previous run,
			// which ended without expiring it.
			if s.peerHearsNow(now) && r.det.PeerKnowsRun(&r.peer) {
				s.lead(ctx, "restarted before the replica took over")
			}
		case fresh && r.peer.Role == repl.RoleWaiting:
			// Cold start of both: the one that led last leads; a fresh
			// pair is started by the bootstrap node.
			lead := r.ledLast && !r.peer.LedLast ||
				r.ledLast && r.peer.LedLast && r.cfg.Preferred ||
				!r.ledLast && !r.peer.LedLast && s.appliedIdx == 0 && r.peer.Applied == 0 && r.cfg.Bootstrap
			// A peer that does not hear this node and led last leads
			// alone by the next rule; this one then follows it.
			if lead && waited && (r.holdOff == "" || !r.peer.LedLast) {
				s.lead(ctx, "cold start of both nodes")
			}
		case !fresh && waited && r.holdOff == "" && (r.ledLast || r.cfg.Bootstrap && s.appliedIdx == 0 && len(r.epochs) == 0):
			s.lead(ctx, "peer absent; this node led last")
		}
	case repl.RoleReplica:
		if fresh && r.peer.Role.Leads() {
			r.following = r.peer.Epoch
			r.leader.Store(r.following.Node)
		}
		s.fetchIfStalled(now, fresh)
		if r.det.PeerDead(now) && r.det.PeerLeaseExpired(now) {
			if r.holdOff != "" {
				// The primary stopped hearing this node before it fell
				// silent here: it has gone solo (a one-way link failure).
				s.setRole(repl.RoleWaiting, "the primary stopped hearing this node and leads alone: waiting for it (or dyad force-primary)")
				return
			}
			// Only a synchronous replica may take over: one that was
			// catching up from a solo primary lacks acknowledged writes.
			syncHB := r.peer.Role == repl.RolePrimary && s.appliedIdx+1 >= r.peer.EpochStart
			syncEntries := !r.lastSolo && !r.lastEpoch.IsZero() && !r.lastEpoch.Less(r.peer.Epoch)
			if syncHB || syncEntries {
				s.promote(ctx)
			} else {
				s.setRole(repl.RoleWaiting, "the primary was lost while this node was still catching up; it holds writes this node never saw: waiting for it (or dyad force-primary)")
			}
		}
	case repl.RolePrimary:
		if fresh && r.peer.Role.Leads() && r.peer.Epoch.Term > s.currentEpoch().Term {
			s.countFalseFailover(now)
			s.stepDown("peer leads a newer epoch")
			return
		}
		if (r.det.PeerDead(now) || s.ackOverdue(now)) && r.det.PeerLeaseExpired(now) {
			if r.holdOff != "" {
				// The replica stopped hearing this node: it takes over
				// (a one-way link failure). Going solo too would split
				// the pair; wait for it instead. This node still led
				// last: if the replica does not take over, it leads
				// again when they meet.
				s.stepDown("the replica stopped hearing this node and takes over: waiting for it (or dyad force-primary)")
				return
			}
			s.goSolo("replica lost")
		}
	case repl.RoleSolo:
		if fresh && r.peer.Role.Leads() {
			s.splitLeaders(now)
			return
		}
		r.bothLeadSince = 0
		following := fresh && r.peer.Role == repl.RoleReplica && !r.peer.CatchingUp && r.peer.Epoch.Node == s.memberID
		if s.caughtUp(now, following) {
			if err := s.newEpoch(false); err != nil {
				s.fail(err)
				return
			}
			r.ackIdx = r.peer.Applied
			s.setRole(repl.RolePrimary, "replica caught up")
		}
	}
}

// fetchIfStalled asks for catch-up when this replica has stood still for a
// quarter lease while its leader reports more entries applied. A gap is
// otherwise found only when the next live entry arrives: the entries sent
// while the link was down would wait for the next write, and on an idle
// pair the leader would never count the replica as caught up.
func (s *Server) fetchIfStalled(now int64, fresh bool) {
	r := s.repl
	if !fresh || !r.peer.Role.Leads() || r.peer.Applied <= s.appliedIdx || r.catchupReq != 0 || r.snapReq != 0 {
		r.behind = 0
		return
	}
	if r.behind == 0 || r.behindAt != s.appliedIdx {
		r.behind, r.behindAt = now, s.appliedIdx
		return
	}
	if now-r.behind > int64(r.cfg.Lease/4) {
		r.behind = 0
		s.askCatchup()
	}
}

// caughtUp judges, in solo, whether the replica (following this node, per
// its newest heartbeat) has caught up, and has stayed so for a lease. At
// each judgement it is caught up when its heartbeats or acks show that it
// holds every entry this node had applied a quarter lease ago (everything,
// on an idle pair). Acks are cumulative, so a synchronous epoch can start
// while the replica is that little behind; the epoch's entries wait for it.
// A replica further behind, too slow for the load, stays outside, and the
// lease of judgements keeps out one that only looked caught up in a quiet
// moment: going synchronous with it would stall writes until its acks were
// overdue and this node went solo again, every --ack-timeout.
func (s *Server) caughtUp(now int64, following bool) bool {
	r := s.repl
	m := &r.mark
	if epoch := s.currentEpoch(); m.epoch != epoch {
		*m = syncMark{epoch: epoch}
	}
	// The target: the applied index of the newest sample at least a
	// quarter lease old (drop the older ones), or, without one, all.
	target := s.appliedIdx
	lag := now - int64(r.cfg.Lease/4)
	for len(m.samples) > 0 && m.samples[0].at <= lag {
		if len(m.samples) > 1 && m.samples[1].at <= lag {
			m.samples = m.samples[1:]
			continue
		}
		target = m.samples[0].idx
		break
	}
	m.samples = append(m.samples, idxAt{at: now, idx: s.appliedIdx})
	ok := following && max(r.peer.Applied, m.acked) >= target
	switch {
	case !ok:
		m.since = 0
	case m.since == 0:
		m.since = now
	}
	return ok && now-m.since >= int64(r.cfg.Lease)
}

// goSolo makes the synchronous primary lead alone: the entries not yet
// acknowledged by the replica start a solo epoch and are released. Only
// once the replica cannot serve reads any more (its read lease expired, or
// it said it is leaving).
func (s *Server) goSolo(why string) {
	r := s.repl
	start := s.appliedIdx + 1
	if len(r.inflight) > 0 {
		start = r.ackIdx + 1
	}
	if err := s.newEpochAt(true, start); err != nil {
		s.fail(err)
		return
	}
	s.m.SoloEntered.Inc()
	s.setRole(repl.RoleSolo, why)
	s.releaseCommitted()
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
	s.setRole(repl.RoleWaiting, "stopping")
	run := binary.BigEndian.AppendUint64(nil, r.det.Run)
	if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindLeaving, Term: r.following.Term, Payload: run}); err != nil {
		s.log.Debug("leaving message not sent", "err", err)
	}
}

// peerHearsNow reports whether the peer has heard this node within the
// last Lease/2, as of now: the silence its last heartbeat reported plus
// that heartbeat's age. A peer that hears this node does not declare it
// dead for at least another Lease/2.
func (s *Server) peerHearsNow(now int64) bool {
	r := s.repl
	if !s.peerFresh(now) || r.peer.HeardAgo < 0 {
		return false
	}
	return r.det.HeardAgo(now)+r.peer.HeardAgo <= r.cfg.Lease/2
}

// countFalseFailover counts a takeover by the peer while this node led
// and had not been frozen within the last lease (its freeze grace ended
// before that): the peer judged a live primary dead.
func (s *Server) countFalseFailover(now int64) {
	r := s.repl
	if !r.det.InFreezeGrace(now - int64(r.cfg.Lease)) {
		s.m.FalseFailovers.Inc()
	}
}

// wroteAlone reports whether this node acknowledged writes alone in its
// trailing run of solo epochs.
func (s *Server) wroteAlone() bool {
	from := repl.SoloFrom(s.repl.epochs, s.memberID)
	return from != 0 && s.appliedIdx >= from
}

// yieldsTo applies repl.YieldAfterSplit between this node and a leading
// peer.
func (s *Server) yieldsTo(peer *repl.Heartbeat) bool {
	from := repl.SoloFrom(s.repl.epochs, s.memberID)
	return repl.YieldAfterSplit(from != 0 && s.appliedIdx >= from, peer.WroteSolo(), s.repl.cfg.Preferred)
}

// lead makes this node the leader after a start.
func (s *Server) lead(ctx context.Context, why string) {
	if err := s.newEpoch(true); err != nil {
		s.fail(err)
		return
	}
	s.lessor.ResetDeadlines()
	s.setRole(repl.RoleSolo, why)
}

// promote makes the replica the leader after its primary's lease expired.
// With a fence command, the first call starts it (fencer) and returns; the
// apply loop goes on (heartbeats, messages) while it runs, and onFenced
// promotes if it succeeded and the reasons to promote still hold.
func (s *Server) promote(ctx context.Context) {
	r := s.repl
	if r.cfg.Fence != nil && !r.fenced {
		if !r.fencing {
			r.fencing = true
			r.fenceReq <- struct{}{} // never blocks: one fence at a time
			s.log.Warn("primary lost: running the fence command before promoting")
		}
		return
	}
	if err := s.newEpoch(true); err != nil {
		s.fail(err)
		return
	}
	// Every lease gets its full TTL from now, as etcd does on a leader
	// change; the old primary's deadlines are never used.
	s.lessor.ResetDeadlines()
	r.det.ForgetPeer()
	r.leaseUntil.Store(0)
	s.m.Failovers.Inc()
	s.setRole(repl.RoleSolo, "primary lost")
}

// onFenced takes the fence command's result in the apply loop. A success
// counts only for the promotion it was run for: the role rules are
// evaluated again now, and promote, if they still call for it, goes
// ahead without another fence.
func (s *Server) onFenced(ctx context.Context, err error) {
	r := s.repl
	r.fencing = false
	if s.Role() != repl.RoleReplica {
		return // the role changed while it ran
	}
	if err != nil {
		s.log.Error("fence command failed; not promoting", "err", err)
		s.setRole(repl.RoleWaiting, "fence failed")
		return
	}
	r.fenced = true
	s.evaluate(ctx, r.clock.Now())
	r.fenced = false
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
		case <-ctx.Done():
			return nil
		}
	}
}

// stepDown leaves leadership; queued and in-flight writes get "request
// timed out" (they may be in the log that a later primary keeps or drops).
// Their revisions stay applied here but invisible, and their events are
// dropped: if the later primary keeps them, the next batch this node makes
// visible covers them and the watch hub replays them (Hub.NotifyFrom).
func (s *Server) stepDown(why string) {
	r := s.repl
	for _, p := range r.inflight {
		for _, q := range p.batch {
			if q.done != nil {
				q.done <- applyResult{err: rpctypes.ErrGRPCTimeout}
			}
		}
	}
	r.inflight = nil
	r.fwdq = nil
	s.setRole(repl.RoleWaiting, why)
}

// follow makes this node the replica of its peer.
func (s *Server) follow() {
	r := s.repl
	r.det.ForgetPeer()
	r.leaseUntil.Store(0)
	r.verified = false
	r.mergeRev = 0
	r.following = r.peer.Epoch
	r.ledLast = false
	r.catchupReq = 0 // answers to requests made before describe an older peer
	s.setRole(repl.RoleReplica, "following "+r.peer.Epoch.String())
	s.askCatchup()
}

// askCatchup asks the leader for the entries after the applied index. It
// abandons a snapshot being requested or received. A request for the same
// position as the outstanding one continues its series.
func (s *Server) askCatchup() {
	r := s.repl
	s.endResync()
	var prev repl.Epoch
	if s.appliedIdx > 0 {
		// The epoch stored with the entry itself (the epoch history may
		// place it in a later solo epoch that adopted it).
		s.be.View(func(tx storage.ReadTx) error {
			e, ok, err := replstore.Get(tx, s.appliedIdx)
			if ok && err == nil {
				prev = e.Epoch
			}
			return err
		})
	}
	req := repl.CatchupReq{From: s.appliedIdx + 1, Prev: prev}
	id := s.nextReqID()
	if r.catchupReq == 0 || r.catchupPos != req {
		r.catchupFirst = id
	}
	r.catchupReq, r.catchupPos = id, req
	r.catchupAsked = r.clock.Now()
	if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindCatchupReq, Term: id, Index: req.From, Payload: req.Encode()}); err != nil {
		s.log.Warn("catch-up request not sent", "err", err)
	}
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
