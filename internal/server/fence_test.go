package server_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// testFence is a fence command that runs until the test answers it.
type testFence struct {
	started chan struct{}
	answer  chan error
	running atomic.Bool
}

func newTestFence() *testFence {
	return &testFence{started: make(chan struct{}, 1), answer: make(chan error)}
}

// startFencedPair starts a pair on net whose replica (member 2) runs a
// testFence before promoting itself, waits for primary and replica, and
// writes k=before through the primary.
func startFencedPair(t *testing.T, net *transport.MemNet) (a, b *node, fence *testFence) {
	t.Helper()
	fence = newTestFence()
	a = pairNode(t, net, t.TempDir(), 1, true)
	b = pairNodeWith(t, net, t.TempDir(), 2, false, func(c *server.ReplConfig) { c.Fence = fence.run })
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	put(t, a.cli, "k", "before")
	return a, b, fence
}

func (f *testFence) run(ctx context.Context) error {
	f.running.Store(true)
	defer f.running.Store(false)
	select {
	case f.started <- struct{}{}:
	default:
	}
	select {
	case err := <-f.answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// heartbeatsDuring counts the heartbeats node from sends while cond holds,
// as seen by an observer endpoint on net.
func heartbeatsDuring(t *testing.T, net *transport.MemNet, from uint64, cond func() bool) *atomic.Int64 {
	var n atomic.Int64
	obs := net.Endpoint(0xd1ad, 99)
	obs.Start(func(m *transport.Message) {
		if m.Kind == repl.KindHeartbeat && m.From == from && cond() {
			n.Add(1)
		}
	})
	t.Cleanup(func() { obs.Close() })
	return &n
}

// A replica whose primary died runs a slow fence command before it
// promotes itself. Its apply loop keeps going meanwhile: heartbeats keep
// flowing while the fence runs, and the promotion follows its success.
func TestPairSlowFenceKeepsHeartbeats(t *testing.T) {
	net := transport.NewMemNet()
	a, b, fence := startFencedPair(t, net)
	beats := heartbeatsDuring(t, net, 2, fence.running.Load)

	a.stop()
	select {
	case <-fence.started:
	case <-time.After(40 * testLease):
		t.Fatal("the replica never ran its fence command")
	}
	// Each heartbeat goes out every lease/8: wait for a lease's worth, or
	// for the fence command to give up (then too few came).
	const want = 8
	deadline := time.Now().Add(40 * testLease)
	for beats.Load() < want && fence.running.Load() {
		if time.Now().After(deadline) {
			t.Fatal("neither heartbeats nor the fence's end came")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := beats.Load(); n < want {
		t.Fatalf("the replica sent %d heartbeats while its fence command ran, want at least %d", n, want)
	}
	if r := b.srv.Role(); r != repl.RoleReplica {
		t.Fatalf("role %s while the fence runs, want replica", r)
	}
	fence.answer <- nil
	waitRole(t, b, repl.RoleSolo)
	if v, _ := get(t, b.cli, "k"); v != "before" {
		t.Fatalf("promoted replica reads %q", v)
	}
	put(t, b.cli, "k", "after")
}

// A fence command that fails keeps the replica from promoting itself.
func TestPairFailedFenceDoesNotPromote(t *testing.T) {
	net := transport.NewMemNet()
	a, b, fence := startFencedPair(t, net)
	a.stop()
	select {
	case <-fence.started:
	case <-time.After(40 * testLease):
		t.Fatal("the replica never ran its fence command")
	}
	fence.answer <- errors.New("the BMC does not answer")
	waitRole(t, b, repl.RoleWaiting)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testLease)
	defer cancel()
	if _, err := b.cli.Put(ctx, "k", "v"); err == nil {
		t.Fatal("a node whose fence failed acknowledged a write")
	}
}

// slowFence is a fence command that takes d to succeed unless its context
// ends first. It records the time it was given (start to deadline).
type slowFence struct {
	d       time.Duration
	started chan struct{}
	given   atomic.Int64 // nanoseconds from start to the context's deadline; 0: none
}

func (f *slowFence) run(ctx context.Context) error {
	now := time.Now()
	if dl, ok := ctx.Deadline(); ok {
		f.given.Store(int64(dl.Sub(now)))
	}
	select {
	case f.started <- struct{}{}:
	default:
	}
	t := time.NewTimer(f.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startSlowFencedPair starts a pair on net whose replica runs fence, with
// the given fence timeout, before promoting itself; writes k=before, and
// stops the primary once the replica follows it.
func startSlowFencedPair(t *testing.T, fence *slowFence, timeout time.Duration) *node {
	t.Helper()
	net := transport.NewMemNet()
	a := pairNode(t, net, t.TempDir(), 1, true)
	b := pairNodeWith(t, net, t.TempDir(), 2, false, func(c *server.ReplConfig) {
		c.Fence, c.FenceTimeout = fence.run, timeout
	})
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	put(t, a.cli, "k", "before")
	a.stop()
	select {
	case <-fence.started:
	case <-time.After(40 * testLease):
		t.Fatal("the replica never ran its fence command")
	}
	return b
}

// A fence command slower than the old fixed bound (5 leases) but within
// FenceTimeout succeeds, and the replica promotes itself after it.
func TestPairFenceWithinFenceTimeoutPromotes(t *testing.T) {
	const timeout = 16 * testLease
	fence := &slowFence{d: 7 * testLease, started: make(chan struct{}, 1)}
	b := startSlowFencedPair(t, fence, timeout)
	if got := time.Duration(fence.given.Load()); got < timeout-testLease {
		t.Fatalf("the fence command was given %v, want about --fence-timeout %v", got, timeout)
	}
	waitRole(t, b, repl.RoleSolo)
	if v, _ := get(t, b.cli, "k"); v != "before" {
		t.Fatalf("promoted replica reads %q", v)
	}
	put(t, b.cli, "k", "after")
}

// A fence command that outlasts FenceTimeout is cut off, counts as
// failed, and the replica does not promote itself.
func TestPairFenceBeyondFenceTimeoutDoesNotPromote(t *testing.T) {
	const timeout = 7 * testLease
	fence := &slowFence{d: time.Hour, started: make(chan struct{}, 1)}
	b := startSlowFencedPair(t, fence, timeout)
	if got := time.Duration(fence.given.Load()); got < timeout-testLease {
		t.Fatalf("the fence command was given %v, want about --fence-timeout %v", got, timeout)
	}
	waitRole(t, b, repl.RoleWaiting)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testLease)
	defer cancel()
	if _, err := b.cli.Put(ctx, "k", "v"); err == nil {
		t.Fatal("a node whose fence timed out acknowledged a write")
	}
}
