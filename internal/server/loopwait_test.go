package server_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// memWaiter is a transport.Waiter over an in-memory endpoint: the apply
// loop waits in it as it waits in ddsnet with Config.WaitSet
// (loopwait.go), so that the pair tests cover that loop without DDS.
// Received messages queue here; Wait blocks until one arrives, Wake, Close
// or its timeout, then offers them to the handler one at a time in arrival
// order, stopping at a refusal (Resume and later Waits offer the rest).
// Wake is level-triggered, as ddsnet's guard condition is. As in ddsnet,
// only a Wait takes what arrived: Resume offers again only a message a
// refusal held back.
type memWaiter struct {
	*transport.Mem
	wake    chan struct{} // holds a Wake not yet reported by a Wait
	arrived chan struct{} // holds a signal of messages queued since the last Wait
	closed  chan struct{}
	once    sync.Once

	mu    sync.Mutex // guards queue, h and held; held across offers
	h     transport.BatchHandler
	queue []*transport.Message
	held  bool // the handler refused queue[0]: Resume offers again

	// onSent, when set, sees every message this node sends, on the
	// sender's goroutine, once it is sent.
	onSent atomic.Pointer[func(m *transport.Message)]

	// strict: a Wait does not end at its timeout, only for a message,
	// a Wake or Close (the loop must be woken for everything else).
	strict atomic.Bool
	// Every Wait's timeout, for the test to check.
	waits     atomic.Int64
	longest   atomic.Int64 // ns
	unbounded atomic.Int64 // Waits with a negative (no) timeout
	wakes     atomic.Int64
}

func newMemWaiter(m *transport.Mem) *memWaiter {
	return &memWaiter{Mem: m, wake: make(chan struct{}, 1), arrived: make(chan struct{}, 1), closed: make(chan struct{})}
}

// waitingLoop makes a pair node's apply loop wait in its transport.
func waitingLoop(rc *server.ReplConfig) {
	rc.Transport = newMemWaiter(rc.Transport.(*transport.Mem))
}

var _ transport.Waiter = (*memWaiter)(nil)

func (w *memWaiter) StartBatch(h transport.BatchHandler) error {
	w.mu.Lock()
	w.h = h
	w.mu.Unlock()
	return w.Mem.Start(func(m *transport.Message) {
		w.mu.Lock()
		w.queue = append(w.queue, m)
		w.mu.Unlock()
		select {
		case w.arrived <- struct{}{}:
		default:
		}
	})
}

func (w *memWaiter) Ready() <-chan struct{} { return nil } // never fires: the consumer waits
func (w *memWaiter) MaxBatch() int          { return 1 }
func (w *memWaiter) Resume()                { w.redeliver() }
func (w *memWaiter) Waits() bool            { return true }

func (w *memWaiter) Wake() {
	w.wakes.Add(1)
	select {
	case w.wake <- struct{}{}:
	default: // coalesces with the one not yet reported
	}
}

func (w *memWaiter) Wait(timeout time.Duration) (bool, error) {
	w.waits.Add(1)
	if timeout < 0 {
		w.unbounded.Add(1)
	}
	for {
		if old := w.longest.Load(); int64(timeout) <= old || w.longest.CompareAndSwap(old, int64(timeout)) {
			break
		}
	}
	if timeout == 0 {
		// A poll: never blocks, strict or not.
		woken := false
		select {
		case <-w.wake:
			woken = true
		default:
		}
		w.deliver()
		return woken, nil
	}
	var expire <-chan time.Time
	if timeout >= 0 && !w.strict.Load() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	woken := false
	select {
	case <-w.wake:
		woken = true
	case <-w.arrived:
	case <-expire:
	case <-w.closed:
		return false, transport.ErrClosed
	}
	w.deliver()
	return woken, nil
}

// deliver offers the queued messages in order until one is refused.
func (w *memWaiter) deliver() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deliverLocked()
}

func (w *memWaiter) deliverLocked() {
	for len(w.queue) > 0 && w.h != nil {
		if w.held = !w.h(w.queue[:1]); w.held {
			return
		}
		w.queue = w.queue[1:]
	}
}

// redeliver is Resume: it offers again only what a refusal held back.
func (w *memWaiter) redeliver() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held {
		w.deliverLocked()
	}
}

func (w *memWaiter) Send(m *transport.Message) error {
	err := w.Mem.Send(m)
	if f := w.onSent.Load(); f != nil {
		(*f)(m)
	}
	return err
}

// holds reports whether a received message of kind waits for a Wait.
func (w *memWaiter) holds(kind uint16) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.queue {
		if m.Kind == kind {
			return true
		}
	}
	return false
}

func (w *memWaiter) Close() error {
	w.once.Do(func() { close(w.closed) })
	return w.Mem.Close()
}

// pairLoops are the two ways an apply loop takes its input: blocked in its
// select (woken by Ready or a channel) and waiting in its transport; and,
// with the first, a transport that lends what it delivers and poisons it
// on release (lend_test.go), so that a released payload still in use
// fails the pair tests.
var pairLoops = []struct {
	name string
	edit func(*server.ReplConfig)
}{{"select", nil}, {"waitset", waitingLoop}, {"lending", lendingLoop}}

// A loop that waits in its transport is woken for every input that is not
// a message, without its tick: with Waits that end only for a message,
// Wake or Close, a lone node's writes, linearizable reads and its stop
// still go through (a lost wake-up would leave them waiting, and the test
// would fail on its deadline). Before that, with Waits that do end at
// their timeout, no timeout exceeds a tick period, and the loop ticks with
// nothing else to wake it.
func TestLoopWaitsInTransport(t *testing.T) {
	mnet := transport.NewMemNet()
	var w *memWaiter
	a := pairNodeWith(t, mnet, t.TempDir(), 1, true, func(rc *server.ReplConfig) {
		waitingLoop(rc)
		w = rc.Transport.(*memWaiter)
	})
	waitRole(t, a, repl.RoleSolo)
	ticks := a.srv.Config().Metrics.Ticks
	for start := counter(t, ticks); counter(t, ticks) < start+3; {
		time.Sleep(testLease / 8) // ticks come from Wait's timeouts alone: no peer, no writes
	}
	if w.unbounded.Load() != 0 || time.Duration(w.longest.Load()) > testLease/8 {
		t.Fatalf("a Wait of the loop had no timeout (%d) or one longer than a tick period (%s > %s)",
			w.unbounded.Load(), time.Duration(w.longest.Load()), testLease/8)
	}

	w.strict.Store(true)
	for i := range 3 {
		wakes := w.wakes.Load()
		rev := put(t, a.cli, "k", "v")
		if v, got := get(t, a.cli, "k"); v != "v" || got < rev {
			t.Fatalf("read %d: %q at %d after a write at %d", i, v, got, rev)
		}
		if w.wakes.Load() == wakes {
			t.Fatal("a write and a read went through without waking the loop")
		}
	}
	a.stop() // the loop's context wakes it: stop returns
}

// Both loops replicate, serve linearizable reads on the replica, fail
// over and take the old primary back as the replica.
func TestPairLoopsReplicate(t *testing.T) {
	for _, loop := range pairLoops {
		t.Run(loop.name, func(t *testing.T) {
			mnet := transport.NewMemNet()
			dirA := t.TempDir()
			a := pairNodeWith(t, mnet, dirA, 1, true, loop.edit)
			b := pairNodeWith(t, mnet, t.TempDir(), 2, false, loop.edit)
			waitRole(t, a, repl.RolePrimary)
			waitRole(t, b, repl.RoleReplica)
			waitLease(t, b)
			var last int64
			for i := range 50 {
				last = put(t, a.cli, "k", string(rune('a'+i%26)))
			}
			for _, n := range []*node{a, b} {
				if _, rev := get(t, n.cli, "k"); rev < last {
					t.Fatalf("%s reads revision %d, want >= %d", n.cfg.Name, rev, last)
				}
			}
			if hashAt(t, a, last) != hashAt(t, b, last) {
				t.Fatal("HashKV differs between the nodes")
			}
			for _, n := range []*node{a, b} {
				if l, ok := n.cfg.Repl.Transport.(lendingMem); ok && l.released.Load() == 0 {
					t.Fatalf("%s released no received message", n.cfg.Name)
				}
			}
			a.stop()
			waitRole(t, b, repl.RoleSolo)
			put(t, b.cli, "after", "1")
			a = pairNodeWith(t, mnet, dirA, 1, true, loop.edit)
			waitRole(t, a, repl.RoleReplica)
			if v, _ := get(t, a.cli, "after"); v != "1" {
				t.Fatalf("the rejoined node misses a write: %q", v)
			}
		})
	}
}

// A primary whose loop always has another proposal queued still takes the
// replica's ack of a batch before it applies and flushes the next one
// (loopWait.poll): in a transport where only a Wait takes what arrived,
// the ack used to stay there until the queues ran dry, so under load each
// batch's callers waited for the next batch's flush too. Here the first
// batch's send holds the loop until the replica's ack has arrived and a
// second write is queued; the second batch's send then holds the loop
// until the first write is answered, which only the ack taken before that
// batch can do (without it, the wait below runs out and the test fails).
func TestBusyPrimaryTakesTheAckBeforeItsNextBatch(t *testing.T) {
	mnet := transport.NewMemNet()
	var wa *memWaiter
	a := pairNodeWith(t, mnet, t.TempDir(), 1, true, func(rc *server.ReplConfig) {
		waitingLoop(rc)
		wa = rc.Transport.(*memWaiter)
	})
	b := pairNodeWith(t, mnet, t.TempDir(), 2, false, waitingLoop)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, b)
	put(t, a.cli, "warm", "1")

	limit := 20 * testLease
	var batches atomic.Int32
	firstSent := make(chan struct{})
	secondGo := make(chan struct{})
	firstDone := make(chan struct{})
	var staged atomic.Bool                 // the ack and the second write waited when the first batch's send returned
	var answeredFirst atomic.Bool          // the first write was answered before the second batch left
	onSent := func(m *transport.Message) { // a's apply loop
		if m.Kind != repl.KindEntries {
			return
		}
		switch batches.Add(1) {
		case 1:
			close(firstSent)
			select {
			case <-secondGo:
			case <-time.After(limit):
				return
			}
			for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if wa.holds(repl.KindAck) && server.QueuedProposals(a.srv) > 0 {
					staged.Store(true)
					return
				}
			}
		case 2:
			select {
			case <-firstDone:
				answeredFirst.Store(true)
			case <-time.After(limit):
			}
		}
	}
	wa.onSent.Store(&onSent)
	defer wa.onSent.Store(nil)

	errs := make(chan error, 2)
	go func() {
		_, err := a.cli.Put(context.Background(), "first", "1")
		close(firstDone)
		errs <- err
	}()
	<-firstSent
	go func() {
		_, err := a.cli.Put(context.Background(), "second", "1")
		errs <- err
	}()
	close(secondGo)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !staged.Load() {
		t.Fatal("the replica's ack and the second write never waited together behind the first batch's send")
	}
	if !answeredFirst.Load() {
		t.Fatal("the first write was not answered before the second batch was sent: its ack waited in the transport")
	}
}

// A replica whose loop is kept busy, its read queue refilled as fast as
// two goroutines can (reads queued straight to the loop, bypassing the
// read grant), still takes its primary's entries and answers with acks,
// and neither node changes role, while one writer puts on the primary
// for several leases. Only a Wait takes the peer's messages and the loop
// waits only when nothing is queued, so such a loop takes them only when
// its queue happens to run dry or when a poll is due (loopWait.pollDue,
// at least every pollGap). This checks liveness under that load; how
// much the poll adds is a figure, not asserted here: in 1.5 s, 73 and 77
// puts answered with it, 26 and 36 without (and 17 and 21 against 4 and
// 8 with the primary's loop kept busy instead).
func TestBusyLoopStillHearsItsPeer(t *testing.T) {
	mnet := transport.NewMemNet()
	a := pairNodeWith(t, mnet, t.TempDir(), 1, true, waitingLoop)
	b := pairNodeWith(t, mnet, t.TempDir(), 2, false, waitingLoop)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, b)
	put(t, a.cli, "warm", "1")

	ctx, cancel := context.WithTimeout(context.Background(), 5*testLease)
	defer cancel()
	var wg sync.WaitGroup
	var queued atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if server.QueueRead(b.srv) {
					queued.Add(1)
				} else {
					runtime.Gosched() // full: the loop has 1024 to take
				}
			}
		}()
	}
	var changed atomic.Value // the first role change seen, as text
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if ra, rb := a.srv.Role(), b.srv.Role(); ra != repl.RolePrimary || rb != repl.RoleReplica {
				changed.CompareAndSwap(nil, fmt.Sprintf("a %s, b %s", ra, rb))
			}
			time.Sleep(time.Millisecond)
		}
	}()
	puts := 0
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*testLease)
		_, err := a.cli.Put(pctx, "k", "v")
		pcancel()
		if err != nil && ctx.Err() == nil {
			t.Errorf("put %d while the loop was kept busy: %v", puts+1, err)
			break
		}
		if err == nil {
			puts++
		}
	}
	cancel()
	wg.Wait()
	if c := changed.Load(); c != nil {
		t.Errorf("a role changed while the primary's loop was kept busy: %s", c)
	}
	if puts < 3 {
		t.Errorf("only %d puts answered while the loop was kept busy", puts)
	}
	t.Logf("%d puts answered, %d reads queued in %v", puts, queued.Load(), 5*testLease)
}
