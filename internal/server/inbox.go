package server

import (
	"sync"

	"github.com/dyad-db/dyad/internal/transport"
)

// recvState is how a batching transport (ddsnet) fills the apply loop's
// inbox. Its network thread (Cyclone's delivery thread, which also carries
// the heartbeats) only signals Ready, once until the loop takes; the loop
// wakes, and at the top of every turn resumeRecv takes what waits, in
// batches, through offer, on the loop's own goroutine. So a burst costs one
// wake-up of the loop, and nothing ever waits on Cyclone's thread. offer
// never blocks either: a batch that does not fit is refused whole, the
// transport keeps it (behind it, the reader's bounded history holds back
// the peer's writer), and a later turn offers it again.
//
// Received is therefore stamped when the loop takes a message, not when it
// reached the node: a busy loop sees its peer's last heartbeat up to one
// turn later than it arrived. That errs towards keeping the peer alive
// (no earlier failover); the silence count is still on the node's own
// running time.
//
// A non-batching transport (transport.Mem) delivers one message at a time
// from its own goroutines, which may wait for room.
type recvState struct {
	// mu serialises offers (several delivery threads may offer at once),
	// so the room a check found is still there for its sends: only the
	// apply loop takes from the inbox.
	mu sync.Mutex
}

// inboxReserve is the room in the inbox kept for heartbeats: a loop that
// is behind on entries still hears its peer's heartbeats (they restate the
// peer's whole state and time the leases) instead of waiting behind a
// queue of entries it has not applied yet.
const inboxReserve = 64

// offer is the transport.BatchHandler: it stamps the arrival time and queues
// the whole batch, or refuses it whole when the inbox lacks room. It runs
// in resumeRecv on the loop; mu still guards it because a transport may
// offer from another goroutine (ddsnet's Start mode does).
func (r *replState) offer(ms []*transport.Message) bool {
	r.recv.mu.Lock()
	defer r.recv.mu.Unlock()
	need := len(ms)
	if len(ms) > 0 && ms[0].Class != transport.Heartbeat {
		need += inboxReserve
	}
	if cap(r.inbox)-len(r.inbox) < need {
		return false
	}
	now := r.clock.Now()
	for _, m := range ms {
		m.Received = now
		r.inbox <- m // cannot block: room checked, and only the loop takes
	}
	return true
}

// resumeRecv lets a batching transport offer again what offer refused;
// the apply loop calls it on every turn (cheap when nothing was refused).
func (r *replState) resumeRecv() {
	if b := r.batcher(); b != nil {
		b.Resume() // before StartBatch: nothing to take, returns at once
	}
}

// batcher is the transport as a transport.Batcher, or nil. tr is set at
// construction, so the applier may ask before Run has started the transport.
func (r *replState) batcher() transport.Batcher {
	b, _ := r.tr.(transport.Batcher)
	return b
}

// recvReady is the batching transport's Ready channel (nil: none, which
// never fires in a select).
func (r *replState) recvReady() <-chan struct{} {
	if b := r.batcher(); b != nil {
		return b.Ready()
	}
	return nil
}
