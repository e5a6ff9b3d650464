package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// A node of a pair that knows no primary refuses a linearizable read with
// etcd's "no leader" (the core refuses it), and still serves a
// serializable one from its own state (no round trip to the core).
func TestPairNodeWithoutPrimaryRefusesLinearizableReads(t *testing.T) {
	// Member 2 never bootstraps and its peer never starts: it waits.
	b := pairNode(t, transport.NewMemNet(), t.TempDir(), 2, false)
	defer b.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	if _, err := b.srv.Range(ctx, &pb.RangeRequest{Key: []byte("k")}); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		t.Fatalf("linearizable read on a waiting node: %v, want %v", err, rpctypes.ErrGRPCNoLeader)
	}
	if r := b.srv.Role(); r != repl.RoleWaiting {
		t.Fatalf("the node is %s, want waiting", r)
	}
	if _, err := b.srv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Serializable: true}); err != nil {
		t.Fatalf("serializable read on a waiting node: %v", err)
	}
}

// Linearizable reads on both nodes see every write acknowledged before
// they began, whichever node took the write.
func TestPairLinearizableReadsSeeAcknowledgedWrites(t *testing.T) {
	a, b := newPair(t)
	waitLease(t, b)
	for i, w := range []*node{a, b, a, b} {
		v := string(rune('a' + i))
		put(t, w.cli, "k", v)
		for _, r := range []*node{a, b} {
			if got, _ := get(t, r.cli, "k"); got != v {
				t.Fatalf("write %d (%q through %s): %s reads %q", i, v, w.cfg.Name, r.cfg.Name, got)
			}
		}
	}
}

// Linearizable reads on the primary while it hands its role over are not
// refused: they wait for the node to serve again, as the new primary's
// replica.
func TestPairReadsDuringMoveLeaderAreNotRefused(t *testing.T) {
	a, b := newPair(t)
	waitLease(t, b)
	put(t, a.cli, "k", "v")
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed error
		reads  int
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 20*testLease)
				resp, err := a.srv.Range(rctx, &pb.RangeRequest{Key: []byte("k")})
				rcancel()
				mu.Lock()
				switch {
				case ctx.Err() != nil:
				case err != nil && failed == nil:
					failed = err
				case err == nil && (len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v") && failed == nil:
					failed = errors.New("read lost the acknowledged write")
				case err == nil:
					reads++
				}
				mu.Unlock()
			}
		}()
	}
	served := func() int {
		mu.Lock()
		defer mu.Unlock()
		return reads
	}
	moveLeader(t, a, 2)
	waitRole(t, a, repl.RoleReplica)
	waitLease(t, a)
	// Reads go on until some more were served on the new replica.
	after, deadline := served(), time.Now().Add(20*testLease)
	for served() < after+20 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	if failed != nil {
		t.Fatalf("a read on the node handing over failed: %v", failed)
	}
	if n := served(); n < after+20 {
		t.Fatalf("%d reads served on the new replica, want 20", n-after)
	}
}

// A replica serves a linearizable read under its read grant while its
// apply loop is stuck persisting a batch: the read does not wait for a
// turn of the loop. (Through the loop it would wait until the commit
// returns, which here is never before the read is answered.)
func TestPairReplicaReadsUnderGrantWhileLoopPersists(t *testing.T) {
	net := transport.NewMemNet()
	// A lease long enough that a loaded machine does not run the
	// replica's read lease out while its loop is held.
	cfgA, cfgB := pairConfig(net, t.TempDir(), 1, true), pairConfig(net, t.TempDir(), 2, false)
	cfgA.Repl.Lease, cfgB.Repl.Lease = 2*time.Second, 2*time.Second
	a, b := startNode(t, cfgA), startNode(t, cfgB)
	defer a.stop()
	defer b.stop()
	deadline := time.Now().Add(20 * cfgA.Repl.Lease)
	for b.srv.Role() != repl.RoleReplica || !b.srv.HasLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("no synchronous pair: %s and %s", a.srv.Role(), b.srv.Role())
		}
		time.Sleep(5 * time.Millisecond)
	}
	put(t, a.cli, "k", "old")
	if got, _ := get(t, b.cli, "k"); got != "old" {
		t.Fatalf("replica reads %q, want %q", got, "old")
	}

	// Hold the replica's next commit (its loop persisting a batch).
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	server.InjectStorageFault(b.srv, func() error {
		once.Do(func() { close(entered) })
		<-release
		return nil
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	unblock := sync.OnceFunc(func() { close(release); server.InjectStorageFault(b.srv, nil) })
	defer unblock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 20*cfgA.Repl.Lease)
		defer cancel()
		_, _ = a.srv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("new")})
	}()
	select {
	case <-entered:
	case <-time.After(20 * cfgA.Repl.Lease):
		t.Fatal("the replica never persisted the write")
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfgB.Repl.Lease)
	defer cancel()
	resp, err := b.srv.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatalf("linearizable read on the replica while its loop persists: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "old" {
		t.Fatalf("read %v, want k=old (the held write is not acknowledged)", resp.Kvs)
	}
	unblock()
}
