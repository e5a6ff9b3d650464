package server

import (
	"context"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
)

// Linearizable reads in a pair go through the protocol core: the request
// goroutine queues the read for the apply loop, which registers it with
// the core (repl.Node.ReadIndex) and answers it from the core's
// ReadStates, unless the read grant the loop published covers the
// read's clock reading: a replica then serves it at once, with no turn of
// the loop (repl.ReadGrant). The core alone decides whether and when a read may be
// served (internal/repl, reads.go); this file only carries reads to it and
// answers back, and maps the index a read waits for to the store revision
// it must see. A served read then reads the store at its visible
// revision.

// maxReadBatch bounds the reads registered in one turn of the apply loop,
// so that a flood of reads cannot hold off writes and heartbeats.
const maxReadBatch = 1024

// readReq is a linearizable read waiting for the core's answer.
type readReq struct {
	done chan error // buffered (1): the apply loop never blocks on it
	// rev is the store revision of the entry the read waits for when it
	// was registered on a leader (0 on other roles, whose applied state
	// is visible): the revision the read must see. Set by the apply loop
	// before it answers on done.
	rev int64
}

// readQueue holds the reads on their way to the core and those the core
// has not answered yet.
type readQueue struct {
	c chan *readReq // request goroutines -> apply loop
	// Owned by the apply loop (no lock): the reads registered with the
	// core, by the ID given to ReadIndex, and the last ID given.
	wait map[uint64]*readReq
	seq  uint64
	// grant is the core's read grant as the apply loop publishes it
	// (publishGrant, narrowGrant; nil: none), read by request goroutines.
	grant atomic.Pointer[repl.ReadGrant]
}

func newReadQueue() readQueue {
	return readQueue{c: make(chan *readReq, maxReadBatch), wait: map[uint64]*readReq{}}
}

// readIndex waits until the core lets a linearizable read be served on
// this node, or refuses it: etcd's "no leader" when the node may not serve
// (the core's rules), "stopped" when the node stops, and the context's
// error when the caller gives up.
func (s *Server) readIndex(ctx context.Context) error {
	// The grant covers the read only if the clock, read once after the
	// grant is loaded, is still before its end (repl.ReadGrant).
	if g := s.repl.reads.grant.Load(); g != nil && g.Covers(s.repl.clock.Now()) {
		select {
		case <-s.stopped:
			return errStopped
		default:
			// The grant is in force only while the commit index covers
			// all the replica holds durable, which is then visible
			// (showCommitted).
			return nil
		}
	}
	q := &readReq{done: make(chan error, 1)}
	select {
	case s.repl.reads.c <- q:
		s.wakeLoop()
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-s.stopped:
		return errStopped
	}
	select {
	case err := <-q.done:
		if err != nil || q.rev == 0 {
			return err
		}
		// Batches a step-down left applied but invisible may be in the
		// committed prefix of a node that leads again: they become
		// visible with its next batch.
		return s.waitVisible(ctx, q.rev)
	case <-ctx.Done():
		// The core still answers it later; the loop drops the answer.
		return ctxErr(ctx)
	case <-s.stopped:
		return errStopped
	}
}

// registerReads registers first and every other read already queued (up
// to maxReadBatch) with the core at one clock reading, then carries out
// the Ready once for all of them (apply loop): a burst of reads costs one
// turn of the loop, not one each.
func (s *Server) registerReads(first *readReq) {
	r := s.repl
	now := r.clock.Now()
	s.registerRead(first, now)
drain:
	for i := 1; i < maxReadBatch; i++ {
		select {
		case q := <-r.reads.c:
			s.registerRead(q, now)
		default:
			break drain
		}
	}
	s.handleReady()
}

func (s *Server) registerRead(q *readReq, now int64) {
	rq := &s.repl.reads
	if s.repl.node.Role().Leads() {
		// The leader's last entry is applied here at this revision (a
		// batch is applied before the core sequences it).
		_, q.rev, _ = s.store.Revs()
	}
	rq.seq++
	rq.wait[rq.seq] = q
	s.repl.node.ReadIndex(rq.seq, now)
}

// answerReads answers the reads the core released or refused (apply loop,
// from handleReady). It runs after the Ready's entries were applied and
// its commit index released: a read served at index i then finds
// everything up to i visible (the primary's batches up to the commit
// index are released, the replica's entries up to its commit index are
// shown (showCommitted), and a released index never exceeds either).
func (s *Server) answerReads(states []repl.ReadState) {
	rq := &s.repl.reads
	for _, st := range states {
		q := rq.wait[st.ID]
		if q == nil {
			continue
		}
		delete(rq.wait, st.ID)
		if st.Refused {
			q.done <- rpctypes.ErrGRPCNoLeader
		} else {
			q.done <- nil
		}
	}
}

// narrowGrant publishes g at once if it covers less than the grant in
// force (apply loop, first thing for each Ready): the change that
// narrowed it (a role change, a lost lease, a snapshot, a suffix to drop)
// is carried out only after no request goroutine can serve under the old
// grant any more. A wider grant waits for publishGrant.
func (s *Server) narrowGrant(g repl.ReadGrant) {
	rq := &s.repl.reads
	if old := rq.grant.Load(); old != nil && g.Narrows(*old) {
		rq.publish(g)
	}
}

// publishGrant publishes g once its Ready is carried out (apply loop).
func (s *Server) publishGrant(g repl.ReadGrant) { s.repl.reads.publish(g) }

// revokeGrant withdraws the grant (apply loop): the node stops.
func (s *Server) revokeGrant() { s.repl.reads.grant.Store(nil) }

func (rq *readQueue) publish(g repl.ReadGrant) {
	old := rq.grant.Load()
	switch {
	case g == (repl.ReadGrant{}):
		if old != nil {
			rq.grant.Store(nil)
		}
	case old == nil || *old != g:
		rq.grant.Store(&g)
	}
}
