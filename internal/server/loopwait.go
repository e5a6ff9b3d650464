package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/dyad-db/dyad/internal/transport"
)

// The apply loop's idle wait in C (ReplConfig.WaitInC).
//
// Without it the loop selects over its Go channels and the transport's
// Ready: Cyclone's delivery thread calls into Go to signal Ready and the Go
// scheduler wakes the loop, two thread hand-offs before the loop runs.
// With it, when the transport is a ddsnet Net made with Config.WaitSet,
// the loop's idle wait is one cgo call (Net.Wait) that Cyclone's receive
// thread ends by signalling a condition variable, and that takes what
// arrived on the loop's own goroutine. Go-side events (proposals, reads,
// hand-overs, fence results, ticks, the end of ctx) end that wait through
// Net.Wake, a guard condition of the waitset.
//
// # The sleep protocol (no lost wake-up)
//
// The loop: (1) sets asleep, (2) looks at every one of its channels
// without blocking (a select with default), (3) if nothing was there,
// calls Wait, and (4) clears asleep once Wait returned. A producer: (a)
// sends on its channel, then (b) calls wake, which calls Net.Wake only if
// asleep is set, so that a busy loop costs its producers no cgo call.
//
// Invariant: a send that (2) did not see is followed by a Wake that ends
// the Wait of (3). A select locks the channels it looks at, and a send
// locks its channel, so (2) and (a) are ordered on that channel's lock: if
// (2) came first, (1) happened before (a) and (b) sees asleep set (or a
// later clear, which only (4) makes, after Wait returned). So the Wake is
// called after (1); the guard condition is level-triggered (it stays set
// until a Wait reports it), so a Wake that lands between (2) and (3) makes
// that Wait return at once instead of being lost. A Wake that finds the
// loop already awake only makes one later Wait return early (harmless).
// TestLoopWaitNoLostWakeup races producers against the loop's sleep.
//
// # Fairness while busy
//
// With the waitset, samples are taken only by Wait: nothing takes them
// while the loop has Go-side work. So a loop that runs two turns in a row
// without waiting polls the transport (Wait with a zero timeout) before
// its second, if its inbox is empty, so that a flood of proposals cannot
// keep the peer's acks and heartbeats out. A loop that just woke from Wait
// does not poll (it just took), which keeps a ping-pong write at one cgo
// wait per turn; one whose inbox still holds messages does not either (it
// has work from the peer queued, which it takes in order before what
// waits in DDS, as with Ready).
//
// # Yield
//
// A loop asleep in C holds its thread: a goroutine the loop readied in
// its last turn (a proposer it answered) waits on that thread's queue
// until the Go scheduler moves it to another thread, and its next
// proposal must wake the loop's thread (a cgo call and a futex wake),
// where a select would have let the loop run on the proposer's thread.
// So a loop that did not just wake yields once (runtime.Gosched) before
// it marks itself asleep: what it readied runs first, on its thread, and
// a proposal made meanwhile is found by the look without a Wake. In dyad
// perf the whole write took a median 1.17 times the selecting loop's
// without the yield (six runs) and 1.01 times with it (five runs;
// docs/BENCHMARKS.md, "The loop waits in C").
//
// # Ticks
//
// The ticker's ticks reach the loop through a goroutine that the applier
// owns (forwardTicks): it moves each tick onto the loop's tick channel and
// wakes the loop, and wakes it once more when ctx ends. A tick therefore
// ends a wait in C exactly as it ends a select, and heartbeats (sent from
// the loop's ticks) never stall behind the wait.

// waiter is a batching transport whose consumer may wait in C:
// *ddsnet.Net (WaitsInC reports Config.WaitSet).
type waiter interface {
	transport.Batcher
	// Wait blocks until a message arrives, Wake is called or timeout
	// passes (negative: none), then offers what arrived to the batch
	// handler on the caller's goroutine.
	Wait(timeout time.Duration) (woken bool, err error)
	// Wake makes the current or next Wait return (level-triggered).
	Wake()
	// WaitsInC reports whether the transport was made to be consumed
	// through Wait (its Ready then never fires).
	WaitsInC() bool
}

// loopWait is the apply loop's wait in C: nil when the loop selects.
type loopWait struct {
	w waiter
	// asleep: the loop is in, or about to enter, w.Wait (the sleep
	// protocol above). Set and cleared by the loop only.
	asleep atomic.Bool
	// waited: the loop's current turn is the first after a Wait. Loop
	// only.
	waited bool
	// off: Wait reported the transport closed; the loop selects from then
	// on (Ready never fires, as after a Close today). Loop only.
	off bool
	// tickc carries forwardTicks' ticks to the loop (one slot: a loop
	// that has not taken a tick loses the next, as with a time.Ticker).
	tickc chan time.Time
	// started is closed by Run once the transport is started
	// (StartBatch): Wait fails before that, so the loop waits for it.
	started chan struct{}
}

// newLoopWait is the loop wait for cfg, or nil when the loop selects: the
// transport cannot wait in C (transport.Mem), or cfg does not ask for it.
// A transport made for Wait with a config that does not ask for it, or the
// reverse, is an error: the loop would never hear from its peer.
func newLoopWait(cfg ReplConfig) (*loopWait, error) {
	w, ok := cfg.Transport.(waiter)
	switch {
	case !ok:
		return nil, nil
	case cfg.WaitInC && !w.WaitsInC():
		return nil, errors.New("server: ReplConfig.WaitInC needs a transport made with ddsnet.Config.WaitSet")
	case !cfg.WaitInC && w.WaitsInC():
		return nil, errors.New("server: a transport made with ddsnet.Config.WaitSet needs ReplConfig.WaitInC")
	case !cfg.WaitInC:
		return nil, nil
	}
	return &loopWait{w: w, tickc: make(chan time.Time, 1), started: make(chan struct{})}, nil
}

// wake is what a producer calls after its send on one of the loop's
// channels: it ends the loop's wait in C, if the loop is asleep (the sleep
// protocol above). Nil-safe: without a loop wait it does nothing.
func (l *loopWait) wake() {
	if l != nil && l.asleep.Load() {
		l.w.Wake()
	}
}

// wakeLoop is wake for the server's loop (nothing for a single node or a
// loop that selects).
func (s *Server) wakeLoop() {
	if s.repl != nil {
		s.repl.lw.wake()
	}
}

// forwardTicks moves src's ticks onto l.tickc and wakes the loop for
// each, and wakes it once more when ctx ends (the loop then sees
// ctx.Done). It returns when ctx ends; the applier cancels ctx and waits
// for it before returning.
func (l *loopWait) forwardTicks(ctx context.Context, src <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			l.wake()
			return
		case t := <-src:
			select {
			case l.tickc <- t:
			default: // the loop has not taken the last one yet
			}
			l.wake()
		}
	}
}

// next is the loop's look for its next event under the sleep protocol:
// it sets asleep, calls look (a select with default over every channel of
// the loop; true: it took an event), and if look found nothing waits in C
// until a message arrives or a producer wakes it, then clears asleep.
// found: look took an event (to handle now); otherwise what Wait took is
// in the inbox and the loop starts a new turn.
func (l *loopWait) next(look func() bool) (found bool, err error) {
	if !l.waited {
		// The turn just run may have readied goroutines (a proposer's
		// answer) onto this thread's scheduler queue: let them run here
		// first, while this loop is not yet asleep (their next send
		// then costs no Wake), instead of leaving them behind a thread
		// that blocks in C until the scheduler moves them (Yield above).
		runtime.Gosched()
	}
	l.asleep.Store(true) // (1): before look, so a send look misses sees it
	if look() {          // (2)
		l.asleep.Store(false)
		return true, nil
	}
	_, err = l.w.Wait(-1) // (3): a Wake since (1) ends it at once
	l.asleep.Store(false) // (4)
	l.waited = true
	return false, l.failed(err)
}

// poll takes, without waiting, what the transport holds (a busy loop's
// turn: see Fairness).
func (l *loopWait) poll() error {
	_, err := l.w.Wait(0)
	return l.failed(err)
}

// failed is err of a Wait as the loop takes it: a closed transport turns
// the loop back to its select (nothing more will arrive), anything else
// stops the node.
func (l *loopWait) failed(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrClosed):
		l.off = true
		return nil
	default:
		return fmt.Errorf("replication: waiting for the peer: %w", err)
	}
}
