package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// referee samples both nodes' roles until stopped and remembers the first
// time it found both leading alone: both acknowledging writes without the
// other, the split that only a two-way partition may cause.
type referee struct {
	stopc chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	both bool
}

// watchLeaders starts a referee over a and b; the test's cleanup stops it.
func watchLeaders(t *testing.T, a, b *node) *referee {
	r := &referee{stopc: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.stopc:
				return
			case <-tick.C:
			}
			if a.srv.Role() == repl.RoleSolo && b.srv.Role() == repl.RoleSolo {
				r.mu.Lock()
				r.both = true
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *referee) stop() {
	select {
	case <-r.stopc:
	default:
		close(r.stopc)
	}
	r.wg.Wait()
}

// bothLed reports whether the referee has seen both nodes leading alone.
func (r *referee) bothLed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.both
}

// withheld waits until the log shows a heartbeat in which its node, as
// primary, withholds its replica's read lease (echoes no send time). The
// replica gets that heartbeat too: the transport had queued it for every
// endpoint before the log's handler ran.
func (l *hbLog) withheld(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(40 * testLease)
	for next := 0; ; {
		l.mu.Lock()
		hbs := l.hbs[next:]
		next = len(l.hbs)
		l.mu.Unlock()
		for _, hb := range hbs {
			if hb.Role == repl.RolePrimary && hb.Echo == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the primary kept renewing the read lease of a replica whose acks never arrived")
		}
		time.Sleep(time.Millisecond)
	}
}

// Two faults that are not a partition must not make two writers (issue 15,
// "two leaders after two faults"). Once its acks are overdue, the primary
// stops renewing the replica's read lease and may go solo as soon as that
// lease has run out, without waiting to hear that the replica still hears
// it. If the primary -> replica direction then fails, the replica must not
// take the primary's silence for its death: the primary is alive and leads
// alone, and promoting would make two nodes acknowledge writes without
// each other (and lose the primary's solo writes, were it then to crash).
//
// The fault sequence, on each node's own clock (L: the peer lease, D: its
// drift margin, L/10 + 10 ms; A: member 1, B: member 2):
//
//  1. A is the synchronous primary, B its replica holding its read lease;
//     one write is acknowledged by both.
//  2. t = 0: the Ack class B -> A is cut; everything else still flows both
//     ways. A write is proposed on A: both nodes apply it, A never learns.
//  3. t ≈ AckTimeout (2L): A finds the ack overdue and stops echoing B's
//     heartbeats (its heartbeats say "primary" with no echo); B keeps
//     hearing A.
//  4. The whole A -> B direction is cut: B hears nothing more from A, A
//     still hears B. When, is the case:
//     - "at lease lapse": the instant B's read lease lapses (about
//     AckTimeout + L). B reports not hearing A for over L/2 only after A
//     has gone solo (step 3 + L + D), the window of the bug: A goes solo
//     (acknowledging the stalled write), B finds A silent for a lease and
//     A's role lease expired, and on main promotes.
//     - "at first withheld heartbeat": the instant A's first heartbeat
//     without an echo is out (step 3 + at most L/8). B's reports of
//     deafness reach A before A may go solo: A holds off and steps down.
//     B must not promote either (A's newest heartbeat withheld its lease),
//     so both wait until A hears B waiting and leads alone.
//
// Expected in both: no instant with both nodes leading alone; one node
// ends up leading alone (A, by the rule; B promoting in the second case
// would be as safe) and the other does not for 4 leases of its own
// running; the leader takes writes; when the links are back the other
// follows it with every write it acknowledged and no split brain is
// counted.
func TestPairAckStallThenPrimaryCutOneWriter(t *testing.T) {
	tests := []struct {
		name string
		// cutWhen returns at the instant A -> B is to be cut.
		cutWhen func(t *testing.T, b *node, hbsA *hbLog)
	}{
		{"at lease lapse", func(t *testing.T, b *node, _ *hbLog) {
			deadline := time.Now().Add(40 * testLease)
			for b.srv.HasLeader() {
				if time.Now().After(deadline) {
					t.Fatal("the replica kept its read lease although its acks never arrived")
				}
				time.Sleep(time.Millisecond)
			}
		}},
		{"at first withheld heartbeat", func(t *testing.T, _ *node, hbsA *hbLog) { hbsA.withheld(t) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			net := transport.NewMemNet()
			a, b := startPair(t, net, t.TempDir(), t.TempDir())
			waitLease(t, b)
			put(t, a.cli, "k", "synchronous")
			ref := watchLeaders(t, a, b)
			hbsA := heartbeatLog(t, net, 1)

			// 2. Acks stop arriving; a write on A stays in flight.
			net.BlockClass(2, 1, transport.Ack, true)
			stalled := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 40*testLease)
				defer cancel()
				_, err := a.cli.Put(ctx, "stalled", "1")
				stalled <- err
			}()
			// 3-4.
			tt.cutWhen(t, b, hbsA)
			net.Block(1, 2, true)
			cut := time.Now()

			// One node leads alone and the other does not (both leading
			// alone: the bug). Which one is the protocol's choice: with the
			// rule of docs/ARCHITECTURE.md ("Who may promote") A leads in
			// both cases and B waits; B leading in the second case (A
			// steps down first) would be as good.
			hbsB := heartbeatLog(t, net, 2)
			deadline := time.Now().Add(40 * testLease)
			var leader, other *node
			var otherHbs *hbLog
			for leader == nil {
				if ref.bothLed() {
					t.Fatalf("both nodes lead alone after an ack stall and a primary -> replica cut (roles now: a %s, b %s)", a.srv.Role(), b.srv.Role())
				}
				switch ra, rb := a.srv.Role(), b.srv.Role(); {
				case ra == repl.RoleSolo && !rb.Leads():
					leader, other, otherHbs = a, b, hbsB
				case rb == repl.RoleSolo && !ra.Leads():
					leader, other, otherHbs = b, a, hbsA
				}
				if time.Now().After(deadline) {
					t.Fatalf("roles a %s, b %s; want one leading alone", a.srv.Role(), b.srv.Role())
				}
				time.Sleep(time.Millisecond)
			}
			t.Logf("%s leads alone %v after the cut; %s is %s", leader.cfg.Name, time.Since(cut).Round(time.Millisecond), other.cfg.Name, other.srv.Role())
			// The other does not lead alone for 4 leases of its own
			// running (a replica would promote after 1), and the leader
			// takes writes meanwhile.
			otherHbs.never(t, repl.RoleSolo, 4*testLease)
			solo := put(t, leader.cli, "k", "solo")
			if ref.bothLed() {
				t.Fatal("both nodes led alone at some instant after the two faults")
			}

			// The links come back: the pair forms again around the
			// leader, with everything it acknowledged.
			net.BlockClass(2, 1, transport.Ack, false)
			net.Block(1, 2, false)
			waitRole(t, other, repl.RoleReplica)
			waitRole(t, leader, repl.RolePrimary)
			if v, rev := get(t, other.cli, "k"); v != "solo" || rev < solo {
				t.Fatalf("%s reads %q at %d after the links came back, want the solo write at >= %d", other.cfg.Name, v, rev, solo)
			}
			// The stalled write is acknowledged if A went solo with it in
			// flight, "request timed out" if A stepped down first.
			// Acknowledged, it must not be lost.
			if err := <-stalled; err == nil {
				for _, n := range []*node{a, b} {
					if v, _ := get(t, n.cli, "stalled"); v != "1" {
						t.Fatalf("%s reads stalled=%q, want the acknowledged 1", n.cfg.Name, v)
					}
				}
			}
			ref.stop()
			if ref.bothLed() {
				t.Fatal("both nodes led alone at some instant after the two faults")
			}
			for _, n := range []*node{a, b} {
				if v := promtest.ToFloat64(n.cfg.Metrics.SplitBrains); v != 0 {
					t.Fatalf("%s: %v split brains without a partition", n.cfg.Name, v)
				}
			}
		})
	}
}
