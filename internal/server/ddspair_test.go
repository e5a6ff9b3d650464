package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/ddsnet"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
)

// ddsLease is the lease of the pairs over real DDS: the default
// --peer-lease, so that a loaded test machine does not fail them over.
const ddsLease = time.Second

// ddsPairNode starts member id of a pair over real DDS on loopback
// (ddsnet) in domain, cluster; waitInC makes its loop wait in C on the
// transport's waitset (ReplConfig.WaitInC, ddsnet.Config.WaitSet).
func ddsPairNode(t *testing.T, domain uint32, cluster uint64, id uint64, bootstrap, waitInC bool) *node {
	t.Helper()
	tr, err := ddsnet.New(ddsnet.Config{
		DDS:     dds.Config{Domain: domain, Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second},
		Cluster: cluster, Node: id, WaitSet: waitInC,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Defaults()
	cfg.Name = fmt.Sprintf("n%d", id)
	cfg.DataDir = t.TempDir()
	cfg.UnsafeNoFsync = true
	cfg.ClusterID, cfg.MemberID = cluster, id
	cfg.Repl = &server.ReplConfig{
		Transport: tr, Lease: ddsLease, Bootstrap: bootstrap, Preferred: bootstrap, WaitInC: waitInC,
		Retention: repl.Retention{MaxBytes: 64 << 20, KeepLast: 1000},
	}
	cfg.Metrics = server.NewMetrics(nil)
	return startNode(t, cfg)
}

// waitRoleWithin is waitRole with a deadline for a pair over real DDS
// (discovery and the first leases take a few seconds).
func waitRoleWithin(t *testing.T, n *node, want repl.Role, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for n.srv.Role() != want || want == repl.RoleReplica && !n.srv.HasLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: role %s (leader known %v), want %s", n.cfg.Name, n.srv.Role(), n.srv.HasLeader(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A pair over real DDS works with either way of waiting for the peer:
// writes on the primary and forwarded from the replica, linearizable
// reads on both (the primary's go through the loop's read queue), and a
// hand-over there and back (the loop's hand-over channel), all from
// several goroutines at once, each acknowledged; both nodes end with the
// same data. With WaitInC every one of these producers must wake a loop
// asleep in C: a lost wake-up leaves an operation waiting until its
// deadline.
func TestDDSPairLoopWait(t *testing.T) {
	for _, waitInC := range []bool{false, true} {
		t.Run(fmt.Sprintf("waitInC=%v", waitInC), func(t *testing.T) {
			domain := uint32(1 + (os.Getpid()+map[bool]int{false: 0, true: 1}[waitInC])%230)
			cluster := rand.Uint64() | 1
			a := ddsPairNode(t, domain, cluster, 1, true, waitInC)
			b := ddsPairNode(t, domain, cluster, 2, false, waitInC)
			waitRoleWithin(t, a, repl.RolePrimary, 60*time.Second)
			waitRoleWithin(t, b, repl.RoleReplica, 60*time.Second)

			const workers, each = 4, 40
			var wg sync.WaitGroup
			errc := make(chan error, 4*workers)
			run := func(f func(ctx context.Context, w, i int) error) {
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range each {
							ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
							err := f(ctx, w, i)
							cancel()
							if err != nil {
								errc <- err
								return
							}
						}
					}()
				}
			}
			run(func(ctx context.Context, w, i int) error {
				_, err := a.cli.Put(ctx, fmt.Sprintf("a/%d/%d", w, i), "v")
				return err
			})
			run(func(ctx context.Context, w, i int) error {
				_, err := b.cli.Put(ctx, fmt.Sprintf("b/%d/%d", w, i), "v")
				return err
			})
			run(func(ctx context.Context, w, i int) error {
				_, err := a.cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				return err
			})
			run(func(ctx context.Context, w, i int) error {
				_, err := b.cli.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				return err
			})
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatalf("an operation failed: %v", err)
			}

			// The role there and back: the loop takes each MoveLeader
			// from its hand-over channel.
			for _, hop := range []struct {
				from, to *node
				id       uint64
			}{{a, b, 2}, {b, a, 1}} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := hop.from.cli.MoveLeader(ctx, hop.id)
				cancel()
				if err != nil {
					t.Fatalf("move the role to %s: %v", hop.to.cfg.Name, err)
				}
				waitRoleWithin(t, hop.to, repl.RolePrimary, 20*time.Second)
			}
			waitRoleWithin(t, b, repl.RoleReplica, 20*time.Second)

			rev := put(t, a.cli, "last", "v")
			for _, prefix := range []string{"a/", "b/"} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				resp, err := b.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if resp.Count != workers*each {
					t.Fatalf("the replica holds %d keys under %s, want %d", resp.Count, prefix, workers*each)
				}
			}
			if ha, hb := hashAt(t, a, rev), hashAt(t, b, rev); ha != hb {
				t.Fatalf("the nodes' data differ at revision %d: hash %x and %x", rev, ha, hb)
			}
		})
	}
}
