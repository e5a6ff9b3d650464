package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

const testLease = 300 * time.Millisecond

// pairNode starts member id of an in-memory pair on net.
func pairNode(t *testing.T, net *transport.MemNet, dir string, id uint64, bootstrap bool) *node {
	return pairNodeWith(t, net, dir, id, bootstrap, nil)
}

// pairNodeWith is pairNode with a change to the replication config.
func pairNodeWith(t *testing.T, net *transport.MemNet, dir string, id uint64, bootstrap bool, edit func(*server.ReplConfig)) *node {
	cfg := pairConfig(net, dir, id, bootstrap)
	if edit != nil {
		edit(cfg.Repl)
	}
	return startNode(t, cfg)
}

// pairConfig configures member id of an in-memory pair on net.
func pairConfig(net *transport.MemNet, dir string, id uint64, bootstrap bool) server.Config {
	cfg := server.Defaults()
	cfg.Name = fmt.Sprintf("n%d", id)
	cfg.DataDir = dir
	cfg.ClusterID = 0xd1ad
	cfg.MemberID = id
	cfg.Repl = &server.ReplConfig{
		Transport: net.Endpoint(0xd1ad, id),
		Lease:     testLease,
		Bootstrap: bootstrap,
		Preferred: bootstrap,
		Retention: repl.Retention{MaxBytes: 64 << 20, KeepLast: 1000},
	}
	cfg.Metrics = server.NewMetrics(nil) // the test reads them
	return cfg
}

func waitRole(t *testing.T, n *node, want repl.Role) {
	t.Helper()
	deadline := time.Now().Add(20 * testLease)
	for n.srv.Role() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: role %s, want %s", n.cfg.Name, n.srv.Role(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func put(t *testing.T, cli *clientv3.Client, k, v string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	resp, err := cli.Put(ctx, k, v)
	if err != nil {
		t.Fatalf("put %s: %v", k, err)
	}
	return resp.Header.Revision
}

// startPair starts an in-memory pair on net, member 1 bootstrapping in
// dirA and member 2 in dirB, and waits until 1 is primary and 2 its
// replica.
func startPair(t *testing.T, net *transport.MemNet, dirA, dirB string) (a, b *node) {
	t.Helper()
	return startPairWith(t, net, dirA, dirB, nil)
}

// startPairWith is startPair with a change to both nodes' replication
// config.
func startPairWith(t *testing.T, net *transport.MemNet, dirA, dirB string, edit func(*server.ReplConfig)) (a, b *node) {
	t.Helper()
	a = pairNodeWith(t, net, dirA, 1, true, edit)
	b = pairNodeWith(t, net, dirB, 2, false, edit)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	return a, b
}

// restartReplica stops replica b (member 2, data in dir), starts it again
// on the same data and waits until it is a replica holding a read lease.
func restartReplica(t *testing.T, net *transport.MemNet, dir string, b *node) *node {
	t.Helper()
	b.stop()
	b = pairNode(t, net, dir, 2, false)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, b)
	return b
}

// putUnacknowledged writes k through cli to a primary whose replica
// cannot receive it, and fails the test if the write is acknowledged.
func putUnacknowledged(t *testing.T, cli *clientv3.Client, k string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	if _, err := cli.Put(ctx, k, "never-acked"); err == nil {
		t.Fatal("a write the replica never received was acknowledged")
	}
}

func get(t *testing.T, cli *clientv3.Client, k string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	resp, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	if len(resp.Kvs) == 0 {
		return "", resp.Header.Revision
	}
	return string(resp.Kvs[0].Value), resp.Header.Revision
}

func hashAt(t *testing.T, n *node, rev int64) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		resp, err := n.cli.HashKV(ctx, n.cli.Endpoints()[0], rev)
		// A node may not yet have applied rev, as an etcd follower: it
		// answers "future revision" until it has; ask again.
		if errors.Is(rpctypes.Error(err), rpctypes.ErrFutureRev) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("hashkv: %v", err)
		}
		return resp.Hash
	}
}

func TestPairReplicatesAndFailsOver(t *testing.T) {
	net := transport.NewMemNet()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startPair(t, net, dirA, dirB)

	// A write on either node is readable, linearizably, on the other.
	r1 := put(t, a.cli, "from-a", "1")
	if v, rev := get(t, b.cli, "from-a"); v != "1" || rev < r1 {
		t.Fatalf("replica read: %q at %d, want 1 at >= %d", v, rev, r1)
	}
	r2 := put(t, b.cli, "from-b", "2")
	if r2 != r1+1 {
		t.Fatalf("forwarded put got revision %d, want %d", r2, r1+1)
	}
	if v, rev := get(t, a.cli, "from-b"); v != "2" || rev < r2 {
		t.Fatalf("primary read: %q at %d", v, rev)
	}
	// Leases: granted and kept alive through the replica.
	ctx := context.Background()
	lg, err := b.cli.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.cli.KeepAliveOnce(ctx, lg.ID); err != nil {
		t.Fatalf("keepalive through the replica: %v", err)
	}
	if hashAt(t, a, r2) != hashAt(t, b, r2) {
		t.Fatal("HashKV differs between the nodes")
	}

	// The primary dies: the replica takes over and keeps every
	// acknowledged write.
	a.stop()
	waitRole(t, b, repl.RoleSolo)
	r3 := put(t, b.cli, "after-failover", "3")
	if v, _ := get(t, b.cli, "from-a"); v != "1" {
		t.Fatalf("acknowledged write lost in failover: %q", v)
	}

	// The old primary returns, catches up and becomes the replica.
	a = pairNode(t, net, dirA, 1, true)
	waitRole(t, a, repl.RoleReplica)
	waitRole(t, b, repl.RolePrimary)
	if v, _ := get(t, a.cli, "after-failover"); v != "3" {
		t.Fatalf("rejoined node misses a write: %q", v)
	}
	r4 := put(t, a.cli, "after-rejoin", "4")
	if r4 <= r3 {
		t.Fatalf("revision ran backwards: %d after %d", r4, r3)
	}
	if hashAt(t, a, r4) != hashAt(t, b, r4) {
		t.Fatal("HashKV differs after rejoin")
	}
}

// A primary cut off one way keeps entries its replica never acknowledged.
// The replica takes over; the old primary steps down, and on rejoin drops
// that synchronous suffix (in place, as it only changed keys: see
// rejoin_test.go) and reads what the new primary holds; its watches end
// as compacted.
func TestPairTruncatesUnacknowledgedSuffix(t *testing.T) {
	net := transport.NewMemNet()
	a, b := startPair(t, net, t.TempDir(), t.TempDir())
	base := put(t, a.cli, "k", "acked")

	// Open a watch on A: it must be cancelled as compacted by the resync.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	wch := a.cli.Watch(wctx, "k", clientv3.WithRev(base+1))

	net.Block(1, 2, true) // A's entries and heartbeats no longer reach B
	putUnacknowledged(t, a.cli, "k")
	waitRole(t, b, repl.RoleSolo)
	waitRole(t, a, repl.RoleWaiting)
	if n := promtest.ToFloat64(a.cfg.Metrics.FalseFailovers); n != 1 {
		t.Fatalf("the live primary counted %v false failovers, want 1", n)
	}
	if n := promtest.ToFloat64(b.cfg.Metrics.Failovers); n != 1 {
		t.Fatalf("the replica counted %v failovers, want 1", n)
	}
	after := put(t, b.cli, "k", "after")
	net.Block(1, 2, false)

	waitRole(t, a, repl.RoleReplica)
	waitRole(t, b, repl.RolePrimary)
	if v, _ := get(t, a.cli, "k"); v != "after" {
		t.Fatalf("rejoined node reads %q, want the new primary's value", v)
	}
	if hashAt(t, a, after) != hashAt(t, b, after) {
		t.Fatal("HashKV differs after the resync")
	}
	select {
	case wr := <-wch:
		if wr.CompactRevision == 0 && wr.Err() == nil {
			t.Fatalf("watch on the resynced node got %+v, want a compacted cancel", wr)
		}
	case <-time.After(20 * testLease):
		t.Fatal("watch on the resynced node was not cancelled")
	}
}

// A link that fails one way, and then (as Cyclone does once the deaf
// side's participant lease of its peer runs out) the other way too. The
// side that cannot hear leads alone; the side that can learns from the
// heartbeats that it is not heard and neither goes solo, nor promotes, nor
// leads alone once its peer falls silent. No split brain: when the link is back
// the pair forms again with every write the leader acknowledged.
func TestPairOneWayLink(t *testing.T) {
	tests := []struct {
		name      string
		cut       [2]uint64 // from, to: the direction that fails first
		leader    int       // index into {a, b} of the node that must lead
		failovers float64   // counted by b
	}{
		{"replica to primary", [2]uint64{2, 1}, 0, 0},
		{"primary to replica", [2]uint64{1, 2}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			net := transport.NewMemNet()
			a, b := startPair(t, net, t.TempDir(), t.TempDir())
			put(t, a.cli, "k", "before")
			nodes := []*node{a, b}
			leader, other := nodes[tt.leader], nodes[1-tt.leader]

			net.Block(tt.cut[0], tt.cut[1], true)
			waitRole(t, leader, repl.RoleSolo)
			solo := put(t, leader.cli, "k", "solo")
			hbs := heartbeatLog(t, net, other.cfg.MemberID)
			net.Block(tt.cut[1], tt.cut[0], true)
			// A primary that has not yet heard of the takeover may stay
			// "primary" a while: it cannot acknowledge anything without
			// its replica. Acknowledging alone is the split; it must not
			// happen in 10 leases of the node's own running.
			hbs.never(t, repl.RoleSolo, 10*testLease)
			if other.srv.Role() == repl.RoleSolo {
				t.Fatalf("%s leads alone although its peer only stopped hearing it", other.cfg.Name)
			}
			net.Partition(1, 2, false)
			waitRole(t, leader, repl.RolePrimary)
			waitRole(t, other, repl.RoleReplica)
			if v, rev := get(t, other.cli, "k"); v != "solo" || rev < solo {
				t.Fatalf("%s reads %q at %d after the link came back, want the solo write at >= %d", other.cfg.Name, v, rev, solo)
			}
			for _, n := range nodes {
				if v := promtest.ToFloat64(n.cfg.Metrics.SplitBrains); v != 0 {
					t.Fatalf("%s: %v split brains after a one-way link failure", n.cfg.Name, v)
				}
			}
			if v := promtest.ToFloat64(b.cfg.Metrics.Failovers); v != tt.failovers {
				t.Fatalf("b counted %v failovers, want %v", v, tt.failovers)
			}
		})
	}
}

// "The replica dies, the primary runs solo and dies, the replica returns
// alone": it must wait, because the other node holds writes it never saw,
// until the operator forces it.
func TestPairFormerReplicaWaitsAlone(t *testing.T) {
	net := transport.NewMemNet()
	dirA, dirB := t.TempDir(), t.TempDir()
	a := pairNode(t, net, dirA, 1, true)
	b := pairNode(t, net, dirB, 2, false)
	waitRole(t, b, repl.RoleReplica)
	waitRole(t, a, repl.RolePrimary)
	put(t, a.cli, "both", "1")
	b.stop()
	waitRole(t, a, repl.RoleSolo)
	put(t, a.cli, "solo-only", "2")
	a.stop()

	hbs := heartbeatLog(t, net, 2)
	b = pairNode(t, net, dirB, 2, false)
	// A node that led last would lead alone after 2 leases of waiting;
	// this one must still wait after 8 of its own.
	hbs.holds(t, repl.RoleWaiting, 8*testLease)
	if r := b.srv.Role(); r != repl.RoleWaiting {
		t.Fatalf("former replica alone: role %s, want waiting", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testLease)
	_, err := b.cli.Put(ctx, "k", "v")
	cancel()
	if err == nil {
		t.Fatal("a waiting node acknowledged a write")
	}
	b.stop()

	if _, err := server.ForcePrimary(dirB); err != nil {
		t.Fatal(err)
	}
	b = pairNode(t, net, dirB, 2, false)
	waitRole(t, b, repl.RoleSolo)
	if v, _ := get(t, b.cli, "both"); v != "1" {
		t.Fatalf("forced node lost a replicated write: %q", v)
	}
	put(t, b.cli, "after-force", "3")
}
