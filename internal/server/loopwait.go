package server

import (
	"runtime"
	"time"

	"github.com/dyad-db/dyad/internal/transport"
)

// loopWait is how the apply loop blocks when its transport waits for it
// (transport.Waiter with Waits: ddsnet with Config.WaitSet, dyad serve
// --dds-waitset): in one cgo call that sleeps in Cyclone until a sample
// arrives or Wake is called, takes what arrived and offers it to the inbox
// on the loop's own goroutine. Cyclone's receive thread then calls no Go
// code and the Go scheduler wakes no goroutine for a message: the loop's
// thread wakes in C. In dyad perf the transport's round trip with this
// consumer was 0.42-0.93x the notified one's, and the pair acknowledged
// 1.2-1.85x the writes of 16 writers (docs/BENCHMARKS.md, "The
// replication loop waits in C").
//
// The loop's other inputs cannot wake a thread blocked in C, so each of
// them calls wakeLoop after it queues: proposals (proposeHere), reads
// (readIndex), hand-overs (MoveLeader), the fence result (fencer), and the
// loop's context (context.AfterFunc in applier). Ticks have no channel in
// this mode: Wait's timeout ends at the next tick's deadline (next).
//
// No wake-up is lost between the loop's last look at its queues
// (inputQueued) and its Wait: a producer queues first and then wakes, and
// the wake-up is level-triggered (transport.Waiter; a guard condition in
// ddsnet): a Wake before the Wait makes that Wait return at once, and the
// loop looks at its queues again after every Wait.
type loopWait struct {
	w transport.Waiter
	// period is the tick period and next the clock time of the next tick
	// (monoClock ns). Apply loop only.
	period, next int64
	// took is the clock time of the last Wait or poll (monoClock ns):
	// what the peer sent before it has been taken. Apply loop only.
	took int64
}

// pollGap is the longest a loop that always finds input queued goes
// without taking what its peer sent (pollDue). Only a Wait takes the
// peer's messages, and the loop waits only when nothing is queued: a
// loop kept busy by reads or writes would otherwise hear neither acks
// nor heartbeats until its queues ran dry, and a peer it does not hear
// for a lease it takes for dead. A poll is a cgo call; at most one per
// gap keeps its cost under a few percent of a core on a loop that never
// idles, and a loop that does idle never polls for this.
const pollGap = int64(time.Millisecond)

func newLoopWait(w transport.Waiter, period time.Duration, now int64) *loopWait {
	return &loopWait{w: w, period: int64(period), next: now + int64(period)}
}

// tickDue reports whether a tick is due at now and, if so, moves the
// deadline on by a period (from now, when the loop is more than a period
// late: missed ticks are dropped, as a time.Ticker drops them).
func (l *loopWait) tickDue(now int64) bool {
	if now < l.next {
		return false
	}
	l.next += l.period
	if l.next <= now {
		l.next = now + l.period
	}
	return true
}

// wait blocks in the transport until a message arrives (offered to the
// inbox before it returns), a Wake, or the next tick's deadline.
//
// It yields first. The goroutines the turn readied (a released write's
// handler, readied by a channel send) wait in this P's run queue, and a
// thread blocked in a cgo call keeps its P until the runtime's monitor
// takes it back (20 µs or more): the handler of a lone writer waited
// 27-45 µs at the median for that, 5-7 µs after (docs/BENCHMARKS.md,
// "Where a 1-client write waits"). After the yield they run before the
// loop's thread blocks in C; with nothing runnable, the yield returns at
// once.
func (l *loopWait) wait(now int64) error {
	runtime.Gosched()
	l.took = now
	_, err := l.w.Wait(time.Duration(l.next - now))
	return err
}

// pollDue reports whether a loop about to handle queued input instead of
// waiting has gone pollGap without taking its peer's messages.
func (l *loopWait) pollDue(now int64) bool { return now-l.took >= pollGap }

// poll takes, without blocking, what the peer has sent since the last
// Wait (a Wait with a zero timeout; one cgo call). The loop calls it in
// two cases. A primary calls it before it takes another batch while
// earlier ones await the replica's ack: under load its proposals are
// never all taken, and without the poll the ack stayed in the transport
// until its queues ran dry, so each batch's callers waited for the next
// batch's apply and flush as well. Any loop calls it once pollDue says
// so. An error is left to the next wait, which reports it.
func (l *loopWait) poll(now int64) {
	l.took = now
	_, _ = l.w.Wait(0)
}

// waiter is the transport the loop waits in, or nil (it then blocks in
// its select, woken by Ready). It is the unwrapped transport: the stamp
// and the metering wrap only the handler StartBatch installs, which the
// transport's Wait offers to.
func (r *replState) waiter() transport.Waiter {
	if w, ok := r.cfg.Transport.(transport.Waiter); ok && w.Waits() {
		return w
	}
	return nil
}

// wakeLoop tells an apply loop that waits in its transport that input is
// queued for it; call it after queuing. A no-op otherwise.
func (s *Server) wakeLoop() {
	if s.repl != nil && s.repl.wait != nil {
		s.repl.wait.Wake()
	}
}

// inputQueued reports whether one of the loop's inputs holds something,
// so that its select would not block. props is nil while the loop takes
// no proposals. Only the loop takes from these channels, so what this
// finds is still there for the select.
func inputQueued(done <-chan struct{}, props chan *proposal, inbox <-chan *transport.Message,
	reads <-chan *readReq, handoverc <-chan *handover, fenced <-chan error) bool {
	select {
	case <-done:
		return true
	default:
	}
	return len(props) > 0 || len(inbox) > 0 || len(reads) > 0 || len(handoverc) > 0 || len(fenced) > 0
}
