package server

import (
	"sync"

	"github.com/dyad-db/dyad/internal/transport"
)

// recvState is how a batching transport (ddsnet) fills the apply loop's
// inbox. Such a transport hands over each batch on a thread that must not
// wait for the loop (Cyclone's delivery thread, which also carries the
// heartbeats), so offer never blocks: a batch that does not fit is refused
// whole, the transport keeps it (and, behind it, the peer's writer is held
// back by the reader's bounded history), and the loop calls Resume after
// consuming. One batch is one critical section and the loop wakes once for
// it, not once per message.
//
// A non-batching transport (transport.Mem) delivers one message at a time
// from its own goroutines, which may wait for room.
type recvState struct {
	batcher transport.Batcher // nil: the transport is not a Batcher
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
// the whole batch, or refuses it whole when the inbox lacks room.
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
	now := r.det.Now()
	for _, m := range ms {
		m.Received = now
		r.inbox <- m // cannot block: room checked, and only the loop takes
	}
	return true
}

// resumeRecv lets a batching transport offer again what offer refused;
// the apply loop calls it on every turn (cheap when nothing was refused).
func (r *replState) resumeRecv() {
	if r.recv.batcher != nil {
		r.recv.batcher.Resume()
	}
}
