package server_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// The pair is cut both ways: the primary A goes solo without writing
// anything, and its replica B takes over alone and writes. A restarts
// while still cut off and, as the node that led last alone, leads alone
// again, in a term above B's (every restart takes a new term). When the
// link returns, A yields (it acknowledged nothing alone) and follows B,
// whose epoch has the lower term. A must still catch up with B and become
// its synchronous replica: it used to drop every entry of B's epoch as the
// sample of an old epoch, asking for catch-up again and again and never
// applying the answer.
func TestPairRejoinsLeaderOfLowerTerm(t *testing.T) {
	net := transport.NewMemNet()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startPair(t, net, dirA, dirB)
	put(t, a.cli, "before", "1")
	net.Partition(1, 2, true)
	waitRole(t, a, repl.RoleSolo)
	waitRole(t, b, repl.RoleSolo)
	solo := put(t, b.cli, "solo", "1")

	a.stop()
	a = pairNode(t, net, dirA, 1, true)
	waitRole(t, a, repl.RoleSolo) // led last alone, peer absent: leads alone
	net.Partition(1, 2, false)

	waitRole(t, a, repl.RoleReplica)
	waitRole(t, b, repl.RolePrimary)
	waitLease(t, a)
	if v, rev := get(t, a.cli, "solo"); v != "1" || rev < solo {
		t.Fatalf("the rejoined node reads %q at revision %d, want 1 at >= %d", v, rev, solo)
	}
	last := put(t, b.cli, "after", "1")
	if v, rev := get(t, a.cli, "after"); v != "1" || rev < last {
		t.Fatalf("the rejoined node reads %q at revision %d, want 1 at >= %d", v, rev, last)
	}
}

// A primary's last transaction never reaches its replica, which takes
// over. The old primary, following the new one, holds that transaction
// as a suffix the leader's log lacks: it was never acknowledged. It drops
// it in place and catches up from the log, without a snapshot of the
// data file (whose cost grows with the data: the slow rejoins of the
// failover bench). Afterwards it holds exactly the leader's state: the
// keys the suffix changed are back as they were, and HashKV agrees.
func TestPairDropsUnacknowledgedSuffixInPlace(t *testing.T) {
	net := transport.NewMemNet()
	a, b := startPair(t, net, t.TempDir(), t.TempDir())
	put(t, a.cli, "k", "1")
	put(t, a.cli, "gone", "1")

	net.Block(1, 2, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	_, err := a.cli.Txn(ctx).Then(
		clientv3.OpPut("k", "2"), clientv3.OpDelete("gone"), clientv3.OpPut("diverged", "x")).Commit()
	cancel()
	if err == nil {
		t.Fatal("a transaction the replica never received was acknowledged")
	}
	waitRole(t, b, repl.RoleSolo)
	solo := put(t, b.cli, "solo", "1")
	net.Block(1, 2, false)

	waitRole(t, a, repl.RoleReplica)
	waitRole(t, b, repl.RolePrimary)
	waitLease(t, a)
	last := put(t, b.cli, "after", "1")
	for k, want := range map[string]string{"k": "1", "gone": "1", "diverged": "", "solo": "1", "after": "1"} {
		if v, rev := get(t, a.cli, k); v != want || rev < last {
			t.Errorf("the rejoined node reads %s = %q at revision %d, want %q at >= %d", k, v, rev, want, last)
		}
	}
	if ha, hb := hashAt(t, a, last), hashAt(t, b, last); ha != hb {
		t.Errorf("HashKV at revision %d: %x on the rejoined node, %x on the leader", last, ha, hb)
	}
	if n := counter(t, a.cfg.Metrics.SnapshotsInstalled); n != 0 {
		t.Errorf("the rejoined node installed %v snapshots, want none", n)
	}
	if n := counter(t, a.cfg.Metrics.SuffixesDropped); n != 1 {
		t.Errorf("the rejoined node dropped %v suffixes in place, want 1", n)
	}
	t.Logf("solo write at revision %d, last at %d", solo, last)
}

// A node that led last restarts on a data file that takes longer than
// two leases to open, and at first cannot hear its peer, which took over.
// The two leases it waits for the peer before leading alone count from
// when it starts running, not from before its data file was opened: it
// must not lead before it has listened for that long, and once the peer
// is heard it follows. (It used to lead at its first tick: a restarted
// primary led alone about 160 ms after it started serving, before DDS
// discovery had found the peer, and then had to yield.)
func TestPairRestartAfterSlowOpenWaitsForPeer(t *testing.T) {
	net := transport.NewMemNet()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startPair(t, net, dirA, dirB)
	put(t, a.cli, "before", "1")
	a.stop()
	waitRole(t, b, repl.RoleSolo)

	net.Partition(1, 2, true)
	cfg := pairConfig(net, dirA, 1, true)
	// The slow open: the node exists but does not run yet.
	a = startNodeAfter(t, cfg, func() { time.Sleep(3 * testLease) })
	// A lease of the node's own running time (8 ticks of Lease/8),
	// still without its peer: too early to lead alone.
	deadline := time.Now().Add(20 * testLease)
	for counter(t, cfg.Metrics.Ticks) < 8 {
		if time.Now().After(deadline) {
			t.Fatal("the restarted node does not tick")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := counter(t, cfg.Metrics.LeaderChanges); n != 0 {
		t.Fatalf("the restarted node led alone %v times within a lease of starting to run", n)
	}
	net.Partition(1, 2, false)
	waitRole(t, a, repl.RoleReplica)
	if n := counter(t, cfg.Metrics.LeaderChanges); n != 0 {
		t.Errorf("the restarted node led %v times before following its peer", n)
	}
}
