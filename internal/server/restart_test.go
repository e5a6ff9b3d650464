package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// Restarts of one node of a pair: what the peer remembers of the node's
// previous run (the send times it echoes, the request IDs it has seen)
// must not carry over into the new run.

// A replica's read lease is timed from its own send times that the primary
// echoes. After a restart the replica's clock starts again, so an echo of
// its previous run's (larger) send times must give it no lease: once the
// pair is cut and the primary acknowledges a write alone, the replica must
// not serve the value that write overwrote. The replica's fence blocks, so
// it stays a replica while the test reads (a slow fence command).
func TestPairReplicaRestartGetsNoOldLease(t *testing.T) {
	net := transport.NewMemNet()
	dirB := t.TempDir()
	gate := make(chan struct{})
	defer close(gate)
	slowFence := func(c *server.ReplConfig) {
		c.Fence = func(ctx context.Context) error {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return errors.New("fence refused by the test")
		}
	}
	a := pairNode(t, net, t.TempDir(), 1, true)
	b := pairNodeWith(t, net, dirB, 2, false, slowFence)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, b)
	// Setup, not proof: the replica's first run must last longer than
	// the rest of the test, so that its old send times lie ahead of the
	// clock of its second run.
	time.Sleep(20 * testLease)
	b.stop()
	b = pairNodeWith(t, net, dirB, 2, false, slowFence)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, b)

	put(t, a.cli, "k", "v1")
	net.Partition(1, 2, true)
	waitRole(t, a, repl.RoleSolo)
	put(t, a.cli, "k", "v2")

	ctx, cancel := context.WithTimeout(context.Background(), 2*testLease)
	defer cancel()
	resp, err := b.cli.Get(ctx, "k")
	if err == nil && (len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v2") {
		t.Fatalf("the cut-off replica (%s) served a linearizable read (%v at revision %d) after its primary acknowledged v2 alone", b.srv.Role(), resp.Kvs, resp.Header.Revision)
	}
}

// Forwarded writes carry request IDs that the primary deduplicates. A
// restarted replica must not reuse its previous run's IDs: the primary
// would drop its writes as duplicates (and a catch-up could hand the new
// caller an old entry's result).
func TestPairReplicaRestartForwardsWrites(t *testing.T) {
	net := transport.NewMemNet()
	dirB := t.TempDir()
	a, b := startPair(t, net, t.TempDir(), dirB)
	waitLease(t, b)
	for _, v := range []string{"1", "2", "3"} {
		put(t, b.cli, "old", v)
	}
	b = restartReplica(t, net, dirB, b)

	for _, v := range []string{"x", "y"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
		resp, err := b.cli.Put(ctx, "new", v)
		cancel()
		if errors.Is(err, rpctypes.ErrTimeout) {
			t.Fatalf("forwarded put %s after the replica's restart timed out (dropped as a duplicate?)", v)
		}
		if err != nil {
			t.Fatalf("forwarded put %s: %v", v, err)
		}
		got, err := a.cli.Get(context.Background(), "new")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != v || got.Kvs[0].ModRevision != resp.Header.Revision {
			t.Fatalf("forwarded put %s answered revision %d; the primary holds %v", v, resp.Header.Revision, got.Kvs)
		}
	}
}

// A single crash-stop of the primary must never produce conflict records:
// the replica takes over, and the restarted primary (which led last, in a
// synchronous epoch, and acknowledged nothing alone) follows it. Were it to
// lead again instead, a partition right after would let both sides
// acknowledge writes, and the merge would move the new primary's
// acknowledged writes to conflict records.
func TestPairRestartedPrimaryFollowsItsSuccessor(t *testing.T) {
	net := transport.NewMemNet()
	dirA := t.TempDir()
	a, b := startPair(t, net, dirA, t.TempDir())
	put(t, a.cli, "k", "before")
	a.stop() // a crash: no hand-over
	waitRole(t, b, repl.RoleSolo)

	a = pairNode(t, net, dirA, 1, true)
	deadline := time.Now().Add(20 * testLease)
	for a.srv.Role() == repl.RoleWaiting {
		if time.Now().After(deadline) {
			t.Fatal("the restarted node neither follows nor leads")
		}
		time.Sleep(5 * time.Millisecond)
	}
	net.Partition(1, 2, true)
	var acked []string
	for _, n := range []*node{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*testLease)
		if _, err := n.cli.Put(ctx, "from-"+n.cfg.Name, "v"); err == nil {
			acked = append(acked, "from-"+n.cfg.Name)
		}
		cancel()
	}
	net.Partition(1, 2, false)
	deadline = time.Now().Add(20 * testLease)
	for !(a.srv.Role() == repl.RoleReplica && b.srv.Role() == repl.RolePrimary || a.srv.Role() == repl.RolePrimary && b.srv.Role() == repl.RoleReplica) {
		if time.Now().After(deadline) {
			t.Fatalf("the pair did not form again: %s and %s", a.srv.Role(), b.srv.Role())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, n := range []*node{a, b} {
		if v := promtest.ToFloat64(n.cfg.Metrics.SplitBrains); v != 0 {
			t.Errorf("%s counted %v split brains after a single crash", n.cfg.Name, v)
		}
		for _, k := range acked {
			if v, _ := get(t, n.cli, k); v != "v" {
				t.Errorf("%s: acknowledged write %s reads %q", n.cfg.Name, k, v)
			}
		}
	}
}
