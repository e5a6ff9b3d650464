package server

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/transport"
)

// fakeWaiter stands in for a ddsnet Net with its waitset: Wait blocks
// until Wake (a level-triggered guard: one slot, taken by the Wait that
// reports it) or until the test ends. Nothing ever arrives from the
// network, so only Wakes end a Wait.
type fakeWaiter struct {
	transport.Batcher // nil: only Wait and Wake are used
	guard             chan struct{}
	end               chan struct{}
	waits, wakes      int // Wakes counted by the guard's writers (mu)
	mu                sync.Mutex
}

func newFakeWaiter() *fakeWaiter {
	return &fakeWaiter{guard: make(chan struct{}, 1), end: make(chan struct{})}
}

func (f *fakeWaiter) Wait(timeout time.Duration) (bool, error) {
	f.mu.Lock()
	f.waits++
	f.mu.Unlock()
	if timeout == 0 {
		select {
		case <-f.guard:
			return true, nil
		default:
			return false, nil
		}
	}
	select {
	case <-f.guard:
		return true, nil
	case <-f.end:
		return false, transport.ErrClosed
	}
}

func (f *fakeWaiter) Wake() {
	f.mu.Lock()
	f.wakes++
	f.mu.Unlock()
	select {
	case f.guard <- struct{}{}:
	default: // already set: wakes coalesce
	}
}

func (f *fakeWaiter) WaitsInC() bool { return true }

// Producers racing the loop's sleep never leave an item waiting: every
// item a producer sends (then wakes, only if the loop is asleep) is taken
// by a loop that sleeps in Wait whenever its non-blocking look finds
// nothing. Each producer waits for its item to be taken before it sends
// the next, so that the loop keeps running dry and going to sleep while
// sends land. A lost wake-up leaves the loop in Wait with an item queued,
// which the deadline turns into a failure.
func TestLoopWaitNoLostWakeup(t *testing.T) {
	const producers, each = 3, 3000
	f := newFakeWaiter()
	l := &loopWait{w: f}
	items := make(chan chan struct{}, producers)
	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			found, err := l.next(func() bool {
				select {
				case done := <-items:
					close(done)
					return true
				case <-stop:
					return true
				default:
					// Let producers run between the look and the
					// Wait: the window a lost wake-up falls into.
					runtime.Gosched()
					return false
				}
			})
			select {
			case <-stop:
				return
			default:
			}
			if err != nil {
				return
			}
			_ = found
		}
	}()
	// Closed at the deadline: every producer still waiting gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lost := make(chan int, producers)
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				done := make(chan struct{})
				items <- done
				l.wake()
				select {
				case <-done:
				case <-ctx.Done():
					lost <- i
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	l.wake()
	close(f.end) // ends a Wait a lost wake-up left the loop in
	<-loopDone
	select {
	case i := <-lost:
		t.Fatalf("a producer's item %d was never taken: the loop sleeps in Wait with it queued (a lost wake-up)", i)
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.waits < 50 {
		t.Fatalf("the loop waited %d times for %d items: the race under test did not happen often enough", f.waits, producers*each)
	}
	if f.wakes > producers*each+1 {
		t.Fatalf("%d wakes for %d sends", f.wakes, producers*each)
	}
}

// A busy loop costs its producers no Wake: a send while the loop is not
// asleep does not call into the transport.
func TestLoopWaitWakesOnlyASleepingLoop(t *testing.T) {
	f := newFakeWaiter()
	l := &loopWait{w: f}
	l.wake()
	if f.wakes != 0 {
		t.Fatal("a wake of a loop that is not asleep called Wake")
	}
	l.asleep.Store(true)
	l.wake()
	if f.wakes != 1 {
		t.Fatalf("a wake of a sleeping loop called Wake %d times, want 1", f.wakes)
	}
	var nilLoop *loopWait
	nilLoop.wake() // a loop that selects: nothing to do, no panic
}

// The tick forwarder wakes a sleeping loop for every tick and once when
// its context ends, so that a loop waiting in C still runs its ticks
// (heartbeats) and sees ctx end.
func TestLoopWaitForwardsTicks(t *testing.T) {
	f := newFakeWaiter()
	l := &loopWait{w: f, tickc: make(chan time.Time, 1)}
	src := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.forwardTicks(ctx, src)
	}()
	deadline := time.After(30 * time.Second)
	for i := range 3 {
		now := time.Unix(int64(i), 0)
		found, err := l.next(func() bool {
			select {
			case src <- now: // a tick the loop's look does not see yet
			case <-deadline:
				t.Fatal("the forwarder does not take ticks")
			}
			return false
		})
		if err != nil || found {
			t.Fatalf("Wait after a tick: found %v, err %v; want a wake-up", found, err)
		}
		select {
		case got := <-l.tickc:
			if !got.Equal(now) {
				t.Fatalf("tick %v, want %v", got, now)
			}
		case <-deadline:
			t.Fatal("the tick never reached the loop")
		}
	}
	l.asleep.Store(true)
	cancel()
	<-done
	if _, err := f.Wait(0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.guard:
		t.Fatal("the guard holds two wakes")
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wakes != 4 {
		t.Fatalf("%d wakes, want one per tick and one for the end of ctx (4)", f.wakes)
	}
}

// newLoopWait refuses a transport and a config that disagree (the loop
// would never hear from its peer) and leaves a transport that cannot wait
// in C (the memory transport) to the select.
func TestNewLoopWait(t *testing.T) {
	f := newFakeWaiter()
	if lw, err := newLoopWait(ReplConfig{Transport: f, WaitInC: true}); err != nil || lw == nil {
		t.Fatalf("a waitset transport with WaitInC: %v, %v; want a loop wait", lw, err)
	}
	if _, err := newLoopWait(ReplConfig{Transport: f}); err == nil {
		t.Fatal("a waitset transport without WaitInC was accepted")
	}
	off := &offWaiter{f}
	if _, err := newLoopWait(ReplConfig{Transport: off, WaitInC: true}); err == nil {
		t.Fatal("WaitInC with a transport made without its waitset was accepted")
	}
	if lw, err := newLoopWait(ReplConfig{Transport: off}); err != nil || lw != nil {
		t.Fatalf("a transport without its waitset, no WaitInC: %v, %v; want the select", lw, err)
	}
	mem := transport.NewMemNet().Endpoint(1, 1)
	if lw, err := newLoopWait(ReplConfig{Transport: mem, WaitInC: true}); err != nil || lw != nil {
		t.Fatalf("the memory transport with WaitInC: %v, %v; want the select", lw, err)
	}
}

// offWaiter is a transport that could wait in C but was made without it.
type offWaiter struct{ *fakeWaiter }

func (offWaiter) WaitsInC() bool { return false }

// A Wait that reports the transport closed turns the loop back to its
// select; any other error stops it.
func TestLoopWaitFailed(t *testing.T) {
	l := &loopWait{}
	if err := l.failed(transport.ErrClosed); err != nil || !l.off {
		t.Fatalf("closed: err %v, off %v; want nil, true", err, l.off)
	}
	boom := errors.New("boom")
	if err := (&loopWait{}).failed(boom); !errors.Is(err, boom) {
		t.Fatalf("an error of Wait: %v, want it passed on", err)
	}
}
