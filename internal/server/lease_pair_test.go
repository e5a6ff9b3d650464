package server_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// Only the leader times leases. A primary whose role lease has expired
// may already be replaced (its replica is promoting, here held up in its
// fence), so it must not answer a keep-alive as if it still led: the
// client would believe in a lease the next primary times on its own. It
// refuses, as etcd does without a leader.
func TestPairDeposedPrimaryRefusesKeepAlive(t *testing.T) {
	net := transport.NewMemNet()
	fencing := make(chan struct{}, 1)
	gate := make(chan struct{})
	defer close(gate)
	a := pairNode(t, net, t.TempDir(), 1, true)
	b := pairNodeWith(t, net, t.TempDir(), 2, false, func(c *server.ReplConfig) {
		c.Fence = func(ctx context.Context) error {
			select {
			case fencing <- struct{}{}:
			default:
			}
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return errors.New("fence refused by the test")
		}
	})
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, a)
	lg, err := a.cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}

	net.Block(1, 2, true) // the replica stops hearing the primary and takes over
	<-fencing
	ctx, cancel := context.WithTimeout(context.Background(), 2*testLease)
	defer cancel()
	if a.srv.Role() == repl.RolePrimary && !a.srv.HasLeader() {
		if _, err := a.cli.KeepAliveOnce(ctx, lg.ID); err == nil {
			t.Fatal("a primary without its role lease (its replica is taking over) renewed a lease")
		}
	} else {
		t.Fatalf("the primary is %s (lease held: %v) while its replica fences", a.srv.Role(), a.srv.HasLeader())
	}
}
