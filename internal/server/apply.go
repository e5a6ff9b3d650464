package server

import (
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

// proposal is one log entry waiting to be applied, and its caller.
type proposal struct {
	req  *pb.InternalRaftRequest
	done chan applyResult // buffered: the applier never blocks on it; nil for forwarded writes
	// origin and reqID identify a write forwarded by the replica (origin
	// 0: this node's own client).
	origin uint64
	reqID  uint64
	// merge, when set, makes this the merge entry after a split brain
	// (req is nil): the store jumps to this revision and compacts there.
	merge int64
}

type applyResult struct {
	resp any
	err  error
	// physical, when set, reports the end of a physical compaction that
	// the caller asked to wait for.
	physical <-chan error
}

// mvccEvent is one watch event produced by applying an entry.
type mvccEvent = mvccpb.Event

// maxBatch bounds one group commit.
const maxBatch = 1024

// propose hands req to the applier (or, on a replica, to the primary) and
// waits for its result.
func (s *Server) propose(ctx context.Context, req *pb.InternalRaftRequest) (any, error) {
	return s.proposeVia(ctx, req, true)
}

// proposeLocal is propose for what only this node's leadership may log
// (lease expiry, decided on this node's timings): it is never forwarded.
func (s *Server) proposeLocal(ctx context.Context, req *pb.InternalRaftRequest) (any, error) {
	return s.proposeVia(ctx, req, false)
}

func (s *Server) proposeVia(ctx context.Context, req *pb.InternalRaftRequest, mayForward bool) (any, error) {
	if err := s.fatalErr(); err != nil {
		return nil, rpctypes.ErrGRPCStopped
	}
	s.m.ProposalsPending.Inc()
	defer s.m.ProposalsPending.Dec()
	var r applyResult
	for try := 0; ; try++ {
		var err error
		if s.repl != nil && !s.Role().Leads() && mayForward {
			s.awaitLeader(ctx)
		}
		if s.repl != nil && !s.Role().Leads() {
			if !mayForward || s.Role() != repl.RoleReplica || !s.HasLeader() {
				return nil, rpctypes.ErrGRPCNoLeader
			}
			r, err = s.forward(ctx, req)
		} else {
			r, err = s.proposeHere(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		// Never applied: the node's role changed first (a hand-over).
		// Go again in the new role.
		if r.err != errRedirect || !mayForward || try == 2 {
			break
		}
	}
	if r.err == errRedirect {
		r.err = rpctypes.ErrGRPCNoLeader
	}
	if r.err != nil {
		s.m.ProposalsFailed.Inc()
		return nil, r.err
	}
	if r.physical != nil {
		select {
		case err := <-r.physical:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctxErr(ctx)
		}
	}
	return r.resp, nil
}

// proposeHere hands req to this node's applier and waits for its result.
func (s *Server) proposeHere(ctx context.Context, req *pb.InternalRaftRequest) (applyResult, error) {
	p := &proposal{req: req, done: make(chan applyResult, 1)}
	select {
	case s.proposals <- p:
		s.wakeLoop()
	case <-ctx.Done():
		return applyResult{}, ctxErr(ctx)
	case <-s.stopped:
		return applyResult{}, errStopped
	}
	select {
	case r := <-p.done:
		return r, nil
	case <-s.stopped:
		// The entry may or may not have been applied: say so, never guess.
		return applyResult{}, rpctypes.ErrGRPCTimeout
	case <-ctx.Done():
		return applyResult{}, ctxErr(ctx)
	}
}

// awaitLeader waits, while a hand-over from this node is under way, until
// the node leads again or follows a primary whose lease it holds; it
// returns at once otherwise.
func (s *Server) awaitLeader(ctx context.Context) {
	t := time.NewTicker(s.repl.cfg.Lease / 32)
	defer t.Stop()
	for s.handingOver() {
		if role := s.Role(); role.Leads() || role == repl.RoleReplica && s.HasLeader() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.stopped:
			return
		case <-t.C:
		}
	}
}

func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return rpctypes.ErrGRPCTimeout
	}
	return rpctypes.ErrGRPCCanceled
}

func (s *Server) fatalErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// applier is the single writer and, in a pair, the replication loop: it
// takes client proposals while leading, applies entries from the primary
// while following, handles acks and heartbeats, and runs the role rules.
// Heartbeats come from here so that a stuck apply loop stops them.
func (s *Server) applier(ctx context.Context) error {
	defer close(s.stopped)
	var tick <-chan time.Time
	var inbox <-chan *transport.Message
	var handoverc <-chan *handover
	var fenced <-chan error
	var recvReady <-chan struct{} // a batching transport has messages (inbox.go)
	var reads <-chan *readReq
	var lw *loopWait // the loop waits in its transport (loopwait.go)
	if s.repl != nil {
		// The wait for the peer after a start (two leases before a node
		// that led last leads alone) counts from here, when the node
		// starts listening, not from when its core was made: opening a
		// large data file took longer than that, and the node led alone
		// before it had heard anything.
		now := s.repl.clock.Now()
		s.repl.node.Start(now)
		period := s.repl.cfg.Lease / 8
		if w := s.repl.wait; w != nil {
			lw = newLoopWait(w, period, now)
			defer context.AfterFunc(ctx, w.Wake)()
		} else {
			t := time.NewTicker(period)
			defer t.Stop()
			tick = t.C
			recvReady = s.repl.recvReady()
		}
		inbox, handoverc, fenced = s.repl.inbox, s.repl.handoverc, s.repl.fenceRes
		reads = s.repl.reads.c
	}
	// A turn's messages to the peer leave together (flushSends): at the
	// top of the next turn, before the loop blocks, and as it stops.
	defer s.flushSends()
	for {
		s.flushSends()
		if s.repl != nil {
			s.repl.resumeRecv()
		}
		if lw != nil && len(s.repl.inflight) > 0 && len(s.proposals) > 0 {
			// A leader with batches awaiting the replica's ack that will
			// take another batch now, not block in its transport: only
			// a Wait takes the peer's messages, so take what has arrived
			// (loopWait.poll) for the drain below, which releases the
			// batches it acknowledges before the next one is applied
			// and flushed. Only then: a poll is a cgo call, and on every
			// busy turn (a lone writer's included) it cost the 1-client
			// write more than it saved (docs/BENCHMARKS.md).
			lw.poll(s.repl.clock.Now())
		}
		// A primary whose storage failed hands over what both nodes hold
		// first (handOverAfterFailure); it stops once that is sent, or
		// could not be.
		handing := s.repl != nil && s.repl.node.HandingOver()
		if err := s.fatalErr(); err != nil && !handing {
			s.failQueuedWith(rpctypes.ErrGRPCStopped)
			return err
		}
		props := s.proposals
		if s.repl != nil && !s.Role().Leads() {
			props = nil
			s.failQueued()
		}
		if handing {
			props = nil // no new batch: they wait for the new primary
		}
		if s.repl != nil && len(s.repl.inbox) > 0 && s.Role().Leads() && !handing {
			// A leader takes the messages already waiting before its next
			// batch: the replica's ack that arrived during the last
			// batch's flush then releases that batch's callers now. Left
			// to the select below, which picks among ready cases at
			// random, it waited for the whole next batch (apply and
			// flush) about half the time under load. Only what waits now
			// is taken, and the select still follows, so proposals,
			// ticks and reads are never starved.
			s.drainInbox(len(s.repl.inbox))
		}
		if s.repl != nil && len(s.repl.fwdq) > 0 && s.Role().Leads() && !handing {
			// Forwarded writes share a group commit like local ones:
			// gather what else has arrived before committing.
			s.drainInbox(maxBatch)
			s.leadBatch(nil)
			continue
		}
		s.flushSends() // what the drains above queued: the loop may block now
		if lw != nil {
			// Ticks first, so that a busy loop still ticks on time.
			if lw.tickDue(s.repl.clock.Now()) {
				s.onTick()
				s.m.Ticks.Inc()
				continue
			}
			if !inputQueued(ctx.Done(), props, inbox, reads, handoverc, fenced) {
				if err := lw.wait(s.repl.clock.Now()); err != nil {
					// The transport closed under the loop (it closes
					// after Run): tick from a timer from here on.
					s.log.Warn("replication transport wait failed; the apply loop no longer waits in it", "err", err)
					t := time.NewTicker(time.Duration(lw.period))
					defer t.Stop()
					tick, lw = t.C, nil
				}
				continue
			}
			// Something is queued: the select below returns at once.
			// A loop that keeps finding input queued still takes what
			// its peer sent, at least every pollGap.
			if now := s.repl.clock.Now(); lw.pollDue(now) {
				lw.poll(now)
			}
		}
		select {
		case <-ctx.Done():
			s.leave()
			return nil
		case p := <-props:
			s.leadBatch(p)
		case m := <-inbox:
			s.onMessage(m)
		case q := <-reads:
			s.registerReads(q)
		case <-tick:
			s.onTick()
			s.m.Ticks.Inc()
		case h := <-handoverc:
			s.startHandover(h)
		case err := <-fenced:
			s.onFenced(err)
		case <-recvReady:
			// Taken by resumeRecv at the top of the next turn.
		}
	}
}

// drainInbox handles up to n messages that are already waiting.
func (s *Server) drainInbox(n int) {
	for i := 0; i < n && len(s.repl.fwdq) < maxBatch; i++ {
		select {
		case m := <-s.repl.inbox:
			s.onMessage(m)
		default:
			return
		}
	}
}

// failQueued hands back the proposals queued while the node stopped
// leading: none of them was applied, so they may go to the new primary.
func (s *Server) failQueued() { s.failQueuedWith(errRedirect) }

func (s *Server) failQueuedWith(err error) {
	for {
		select {
		case p := <-s.proposals:
			p.done <- applyResult{err: err}
		default:
			return
		}
	}
}

// leadBatch applies one group commit as the leader: first (if any), the
// forwarded writes, and whatever else is queued, up to maxBatch.
func (s *Server) leadBatch(first *proposal) {
	if s.repl != nil && (!s.repl.node.Role().Leads() || s.repl.node.HandingOver()) {
		// The role changed while messages were handled (a step-down):
		// nothing may be logged in the old epoch. Not applied: say so.
		s.repl.fwdq = nil
		if first != nil {
			first.done <- applyResult{err: errRedirect}
		}
		s.failQueued()
		return
	}
	batch := make([]*proposal, 0, 16)
	if s.repl != nil {
		batch = append(batch, s.repl.fwdq...)
		s.repl.fwdq = nil
	}
	if first != nil {
		batch = append(batch, first)
	}
drain:
	for len(batch) < maxBatch {
		select {
		case p := <-s.proposals:
			batch = append(batch, p)
		default:
			break drain
		}
	}
	if len(batch) == 0 {
		return
	}
	results := make([]applyResult, 0, len(batch))
	var events []mvccpb.Event
	var jobs []compactJob
	entries := make([]repl.Entry, 0, len(batch))
	merged := false
	idx := s.appliedIdx
	epoch, solo := repl.Epoch{}, false
	if s.repl != nil {
		// The position the core gives the batch (Propose stamps the
		// same): the next index, the epoch led, solo or not.
		var next uint64
		next, epoch, solo = s.repl.node.Next()
		idx = next - 1
	}
	// early: the batch goes to the replica from inside its transaction,
	// before the commit, so that the replica's flush runs while this
	// node's does. Only a replica of ProtocolV3 or later shows no more
	// than the commit index covers; with an older one the batch is sent
	// once durable here, as the core's SendsBeforeFlush says.
	early := s.repl != nil && s.repl.node.SendsBeforeFlush()
	now := time.Now().UnixNano()
	_, before, _ := s.store.Revs()
	fn := func(tx storage.WriteTx) error {
		for _, p := range batch {
			idx++
			var r applyResult
			var evs []mvccpb.Event
			var job *compactJob
			var err error
			if p.merge != 0 {
				job, err = s.applyMerge(tx, p.merge)
				merged = true
			} else {
				r, evs, job, err = s.apply(tx, p.req)
			}
			if err != nil {
				return err // storage failure: abort the whole batch
			}
			if job != nil {
				jobs = append(jobs, *job)
				r.physical = job.done
			}
			results = append(results, r)
			events = append(events, evs...)
			// The entry: logged in a pair, journaled by both kinds of
			// node (a single node's has no epoch and is never logged;
			// applyEntry replays either).
			var data []byte
			if p.merge != 0 {
				data = repl.MergeData(p.merge)
			} else if data, err = p.req.Marshal(); err != nil {
				return err
			}
			origin := p.origin
			if origin == 0 {
				origin = s.memberID
			}
			_, rev, _ := s.store.Revs()
			e := repl.Entry{Index: idx, Epoch: epoch, Origin: origin, ReqID: p.reqID, Time: now, Solo: solo, Merge: p.merge != 0, Rev: rev, Data: data}
			if s.repl != nil {
				if err := replstore.Append(tx, &e); err != nil {
					return err
				}
			}
			entries = append(entries, e)
		}
		if err := tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(idx)); err != nil {
			return err
		}
		if err := tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(s.term.Load())); err != nil {
			return err
		}
		if s.repl != nil {
			if err := replstore.PutCommitBound(tx, s.repl.commitKept); err != nil {
				return err
			}
		}
		if !early {
			return nil
		}
		// Sequence the batch and send it now, before this transaction's
		// commit: the replica flushes it while this node does. The core
		// commits it only once both report it durable (Persisted below,
		// after the journal append; the replica's ack after its own), so
		// nothing of it is released before it is on both disks.
		if err := s.repl.node.Propose(entries); err != nil {
			// Cannot happen: the role was checked above and nothing
			// runs in between. Should it, nothing of the batch is
			// written or sent.
			return fmt.Errorf("the protocol core refused a batch it sequenced: %w", err)
		}
		s.sendProposed(idx)
		return nil
	}
	// A batch is applied without a data-file commit and made durable by
	// the journal (journal.go), unless it holds a merge, which commits
	// synchronously. The batch never carries a hard state: the MetaTerm
	// put above rewrites the term in force, which changes only through a
	// synchronous hard-state commit.
	var err error
	if !merging(batch) {
		if err = s.be.Apply(fn); err == nil {
			err = s.journalBatch(entries)
		}
	} else {
		err = s.be.Update(fn)
	}
	if err != nil {
		// A failed apply, commit or journal append: the same storage
		// failure. Memory may be ahead of disk now. Refuse everything
		// and stop; the restart rebuilds from what is durable (the data
		// file and the journal). Nobody in this
		// batch was told "success"; none of it was published. A
		// synchronous primary hands over what is durable on both nodes.
		s.fail(err)
		for _, p := range batch {
			if p.done != nil {
				p.done <- applyResult{err: rpctypes.ErrGRPCStopped}
			}
		}
		if s.repl != nil {
			// Sent but not durable here, the batch may be on the
			// replica: nobody was told it succeeded, and a hand-over
			// passes on at most what the replica holds.
			s.handOverAfterFailure()
		}
		return
	}
	s.mu.Lock()
	s.appliedIdx = idx
	s.mu.Unlock()
	s.m.ProposalsApplied.Add(float64(len(batch)))
	s.m.BatchSize.Observe(float64(len(batch)))
	_, cur, _ := s.store.Revs()
	p := &pending{last: idx, from: before + 1, rev: cur, events: events, batch: batch, results: results, jobs: jobs, merged: merged}
	if s.repl == nil {
		s.release(p)
		return
	}
	r := s.repl
	if !early {
		// Sequenced in the core only once durable here, so whatever the
		// replica applies is on both disks.
		if err := r.node.Propose(entries); err != nil {
			// Cannot happen: the role was checked above and nothing
			// runs in between. Should it, the batch is applied here but
			// not in the log the core knows: stop rather than serve a
			// diverged state.
			s.fail(fmt.Errorf("the protocol core refused a batch it sequenced: %w", err))
			for _, q := range batch {
				if q.done != nil {
					q.done <- applyResult{err: rpctypes.ErrGRPCStopped}
				}
			}
			return
		}
	}
	// Durable here now: the core commits the batch once the replica's
	// ack covers it too (at once if it already came, solo at once).
	p.at = r.clock.Now()
	r.inflight = append(r.inflight, p)
	r.node.Persisted(idx, cur)
	r.node.Applied(idx)
	s.handleReady()
}

// merging reports whether batch holds a merge entry.
func merging(batch []*proposal) bool {
	for _, p := range batch {
		if p.merge != 0 {
			return true
		}
	}
	return false
}
