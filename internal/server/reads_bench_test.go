package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// BenchmarkPairRange measures linearizable reads on an in-memory pair,
// called on the node directly (no gRPC), on the primary and on the
// replica: by one client, by many (GOMAXPROCS × 16), and by many while
// one writer keeps a write in flight (reads on the primary then wait for
// the commit index; reads on the replica do not).
func BenchmarkPairRange(b *testing.B) {
	a, r := benchPair(b)
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		if _, err := a.srv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("key/%04d", i)), Value: make([]byte, 256)}); err != nil {
			b.Fatal(err)
		}
	}
	read := func(b *testing.B, n *node) {
		resp, err := n.srv.Range(ctx, &pb.RangeRequest{Key: []byte("key/0500")})
		if err != nil || len(resp.Kvs) != 1 {
			b.Fatalf("read: %v", err)
		}
	}
	for _, c := range []struct {
		name string
		n    *node
	}{{"primary", a}, {"replica", r}} {
		b.Run(c.name+"/1", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				read(b, c.n)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(p *testing.PB) {
				for p.Next() {
					read(b, c.n)
				}
			})
		})
		b.Run(c.name+"/writing", func(b *testing.B) {
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; !stop.Load(); i++ {
					if _, err := a.srv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("w/%d", i%100)), Value: make([]byte, 256)}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			b.ResetTimer()
			b.SetParallelism(16)
			b.RunParallel(func(p *testing.PB) {
				for p.Next() {
					read(b, c.n)
				}
			})
			b.StopTimer()
			stop.Store(true)
			<-done
		})
	}
}

// benchPair starts a synchronous pair on a memory transport for a
// benchmark, with a lease long enough that a loaded machine does not cost
// the pair its leases in the middle of a run, and waits until it is one.
func benchPair(b *testing.B) (primary, replica *node) {
	b.Helper()
	net := transport.NewMemNet()
	cfgA, cfgR := pairConfig(net, b.TempDir(), 1, true), pairConfig(net, b.TempDir(), 2, false)
	cfgA.Repl.Lease, cfgR.Repl.Lease = 2*time.Second, 2*time.Second
	a, r := startNode(b, cfgA), startNode(b, cfgR)
	for _, n := range []*node{a, r} {
		b.Cleanup(n.stop)
	}
	deadline := time.Now().Add(20 * cfgA.Repl.Lease)
	for a.srv.Role() != repl.RolePrimary || r.srv.Role() != repl.RoleReplica || !a.srv.HasLeader() || !r.srv.HasLeader() {
		if time.Now().After(deadline) {
			b.Fatalf("no synchronous pair: %s and %s", a.srv.Role(), r.srv.Role())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return a, r
}
