package server_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// serializable reads key at n without a round trip to any primary.
func serializable(t *testing.T, n *node, key string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	resp, err := n.cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		t.Fatalf("%s: serializable get %s: %v", n.cfg.Name, key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", resp.Header.Revision
	}
	return string(resp.Kvs[0].Value), resp.Header.Revision
}

// A write the replica applied (and, both nodes holding it durably, shows)
// but whose ack the primary never received is in flight on the primary when the replica takes over and the primary
// steps down. The new primary keeps it, so the old primary, following
// again, makes it visible: a watch on the old primary must deliver it
// before the new primary's next write (or end as compacted), never skip it.
func TestPairStepDownKeepsWatchEvents(t *testing.T) {
	net := transport.NewMemNet()
	a, b, logs := startPairLoggingPrimary(t, net)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	base := put(t, a.cli, "k", "V")
	held := a.srv.Status(context.Background()).RaftAppliedIndex // V's entry
	// The replica shows V once the primary's commit index reaches it,
	// just after the primary acknowledged it.
	deadline := time.Now().Add(20 * testLease)
	for v, _ := serializable(t, b, "k"); v != "V"; v, _ = serializable(t, b, "k") {
		if time.Now().After(deadline) {
			t.Fatal("the replica never showed V")
		}
		time.Sleep(2 * time.Millisecond)
	}

	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	wch := a.cli.Watch(wctx, "k", clientv3.WithRev(base+1))

	// The replica's acks stop reaching the primary: W is applied on both
	// nodes but never acknowledged.
	net.Block(2, 1, true)
	putDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
		defer cancel()
		_, err := a.cli.Put(ctx, "k", "W")
		putDone <- err
	}()
	deadline = time.Now().Add(20 * testLease)
	for b.srv.Status(context.Background()).RaftAppliedIndex <= held {
		if time.Now().After(deadline) {
			t.Fatal("the replica never applied W")
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Durable on both nodes, though the primary never heard the ack: the
	// replica shows it once the primary announces its own flush (durable
	// commit, protocol version 4), the primary does not.
	deadline = time.Now().Add(20 * testLease)
	for v, _ := serializable(t, b, "k"); v != "W"; v, _ = serializable(t, b, "k") {
		if time.Now().After(deadline) {
			t.Fatalf("the replica shows %q, want W: durable on both nodes", v)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if v, _ := serializable(t, a, "k"); v != "V" {
		t.Fatalf("the primary shows %q before its commit index covers it, want V", v)
	}
	// Now the other way round: the replica stops hearing the primary
	// (and takes over), the primary hears that and steps down.
	net.Block(1, 2, true)
	net.Block(2, 1, false)
	waitRole(t, b, repl.RoleSolo)
	// The old primary waits only until it hears the new one's heartbeat
	// (some 20 ms on the in-memory net), then follows it: the logged step
	// down is the proof, not a role a poll may miss.
	logs.roleChange(t, repl.RolePrimary, repl.RoleWaiting)
	<-putDone // its outcome was unknown to the primary: either answer is honest
	x := put(t, b.cli, "k", "X")
	net.Block(1, 2, false)
	waitRole(t, a, repl.RoleReplica)
	if v, rev := get(t, a.cli, "k"); v != "X" || rev < x {
		t.Fatalf("old primary reads %q at %d, want X at >= %d", v, rev, x)
	}

	var seen []string
	timeout := time.After(40 * testLease)
	for len(seen) == 0 || seen[len(seen)-1] != "X" {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("watch closed after %v", seen)
			}
			if wr.CompactRevision != 0 {
				return // cancelled as compacted: the client re-lists
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("watch: %v after %v", err, seen)
			}
			for _, ev := range wr.Events {
				seen = append(seen, string(ev.Kv.Value))
			}
		case <-timeout:
			t.Fatalf("watch delivered %v, never X", seen)
		}
	}
	if len(seen) != 2 || seen[0] != "W" {
		t.Fatalf("watch on the old primary delivered %v, want [W X]", seen)
	}
}
