package server_test

import (
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// When a primary leading alone goes back to synchronous: only once a live
// replica has caught up (docs/ARCHITECTURE.md, "Roles"), never on the last
// word of a replica that has left, and not over and over with a replica
// too slow to keep up.

// waitPeerGone waits until n no longer counts its peer as alive.
func waitPeerGone(t *testing.T, n *node) {
	t.Helper()
	deadline := time.Now().Add(20 * testLease)
	for promtest.ToFloat64(n.cfg.Metrics.PeerAlive) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still counts its peer as alive", n.cfg.Name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A replica that stopped on purpose is gone: the primary leads alone once,
// and does not go back to synchronous on the replica's last heartbeats
// (it would then stall writes until it went solo a second time).
func TestPairLeftReplicaStaysGone(t *testing.T) {
	a, b := newPair(t)
	waitLease(t, b) // b knows the epoch it follows: its leaving message counts
	put(t, a.cli, "k", "v")
	before := promtest.ToFloat64(a.cfg.Metrics.SoloEntered)
	b.stop()
	waitRole(t, a, repl.RoleSolo)
	waitPeerGone(t, a)
	put(t, a.cli, "k", "alone")
	if r := a.srv.Role(); r != repl.RoleSolo {
		t.Fatalf("with its replica gone the primary is %s, want solo", r)
	}
	if n := promtest.ToFloat64(a.cfg.Metrics.SoloEntered) - before; n != 1 {
		t.Fatalf("the primary went solo %v times after its replica left, want once", n)
	}
}

// A replica restarted on an idle pair gets its read lease back: the
// primary must not return to synchronous on the restarted replica's
// previous run's last heartbeat (which may predate the last writes), then
// wait for acks of writes that never come.
func TestPairRestartedReplicaRegainsLease(t *testing.T) {
	net := transport.NewMemNet()
	dirB := t.TempDir()
	a, b := startPair(t, net, t.TempDir(), dirB)
	waitLease(t, b)
	for _, v := range []string{"1", "2", "3"} {
		put(t, a.cli, "k", v)
	}
	b = restartReplica(t, net, dirB, b)
	if v, _ := get(t, b.cli, "k"); v != "3" {
		t.Fatalf("restarted replica reads %q, want 3", v)
	}
}

// A replica whose every commit takes longer than a lease: the primary goes
// solo, and while writes keep coming the replica never catches up, so the
// primary stays solo instead of going back to synchronous (and stalling
// the writes for an ack timeout) each time the replica comes close.
func TestPairSlowReplicaNoFlapping(t *testing.T) {
	a, b := newPair(t)
	waitLease(t, b)
	server.InjectStorageFault(b.srv, func() error {
		time.Sleep(testLease * 5 / 3)
		return nil
	})
	defer server.InjectStorageFault(b.srv, nil)
	before := promtest.ToFloat64(a.cfg.Metrics.SoloEntered)
	l := startLoad(a.cli)
	defer l.stop()
	waitRole(t, a, repl.RoleSolo)
	// 1,500 writes in steps of 100, checking after each step that the
	// primary is still solo: a primary that went back to synchronous with
	// the slow replica would make every write wait for its storage, and
	// would go solo again (a flap).
	for i := 0; i < 15; i++ {
		l.waitAcks(t, 100)
		if r := a.srv.Role(); r != repl.RoleSolo {
			t.Fatalf("after %d acknowledged writes the primary is %s, want solo while its replica's storage is slow", l.count(), r)
		}
	}
	l.stop()
	if n := promtest.ToFloat64(a.cfg.Metrics.SoloEntered) - before; n != 1 {
		t.Fatalf("the primary went solo %v times under load with a slow replica, want once", n)
	}
	l.verify(t, a)
}

// A replica that stops right after its primary started a new epoch (before
// a heartbeat told it the new term) is still the primary's replica: its
// leaving message counts, and the primary leads alone at once instead of
// waiting out the replica's silence and lease.
func TestPairLeavingRightAfterEpochChange(t *testing.T) {
	net := transport.NewMemNet()
	a, b, logs := startPairLoggingPrimary(t, net)
	// The primary's synchronous epoch starts when it hears its replica
	// caught up; the replica learns its term only from the next
	// heartbeat. Stop it at once.
	waitRole(t, a, repl.RolePrimary)
	b.stop()
	if line := logs.roleChange(t, repl.RolePrimary, repl.RoleSolo); !strings.Contains(line, `why="the replica is stopping"`) {
		t.Fatalf("the primary went solo without the replica's leaving message (it waited out the lease): %s", line)
	}
}
