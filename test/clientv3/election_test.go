package clientv3

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func timeAfter() <-chan time.Time { return time.After(waitTimeout) }

// observer collects the leader values Observe reports.
type observer struct {
	ch <-chan clientv3.GetResponse
}

func observe(t *testing.T, srv interface {
	Client(testing.TB) *clientv3.Client
}, prefix string) *observer {
	t.Helper()
	s, err := concurrency.NewSession(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &observer{ch: concurrency.NewElection(s, prefix).Observe(ctx)}
}

// next waits for the next observed leader value.
func (o *observer) next(t *testing.T) string {
	t.Helper()
	select {
	case resp, ok := <-o.ch:
		if !ok {
			t.Fatal("observe channel closed")
		}
		if len(resp.Kvs) == 0 {
			t.Fatal("observe delivered a response without a leader key")
		}
		return string(resp.Kvs[0].Value)
	case <-timeAfter():
		t.Fatalf("no leader observed within %v", waitTimeout)
		return ""
	}
}

// expect waits until the observed leader value is want. Observe may skip
// intermediate values but never reports one that was not proclaimed.
func (o *observer) expect(t *testing.T, want string, allowed ...string) {
	t.Helper()
	for {
		got := o.next(t)
		if got == want {
			return
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == got
		}
		if !ok {
			t.Fatalf("observed leader %q, want %q", got, want)
		}
	}
}

func leaderValue(t *testing.T, e *concurrency.Election) string {
	t.Helper()
	resp, err := e.Leader(context.Background())
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	return string(resp.Kvs[0].Value)
}

// TestElectionCampaignProclaimResign: the first candidate wins, proclaims a
// new value, and on resignation the waiting candidate takes over; an
// observer sees each leader value in order.
func TestElectionCampaignProclaimResign(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	s1, cli := newSession(t, srv, 30)
	s2, _ := newSession(t, srv, 30)
	e1 := concurrency.NewElection(s1, "/elect/")
	e2 := concurrency.NewElection(s2, "/elect/")

	if _, err := e1.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader before any campaign: err = %v, want ErrElectionNoLeader", err)
	}
	obs := observe(t, srv, "/elect/")

	if err := e1.Campaign(ctx, "e1-first"); err != nil {
		t.Fatalf("e1.Campaign: %v", err)
	}
	obs.expect(t, "e1-first")
	if got := leaderValue(t, e2); got != "e1-first" {
		t.Errorf("Leader() = %q, want e1-first", got)
	}

	camp2 := goAsync(func() error { return e2.Campaign(ctx, "e2") })
	waitKeys(t, cli, "/elect/", 2)
	camp2.pending(t, "e2.Campaign while e1 leads")

	if err := e1.Proclaim(ctx, "e1-second"); err != nil {
		t.Fatalf("e1.Proclaim: %v", err)
	}
	obs.expect(t, "e1-second")
	if got := leaderValue(t, e2); got != "e1-second" {
		t.Errorf("Leader() after Proclaim = %q, want e1-second", got)
	}
	// A candidate that never won cannot proclaim. (e2 itself could: its
	// Proclaim rewrites its own queued key, a client-side detail.)
	if err := concurrency.NewElection(s2, "/elect/").Proclaim(ctx, "usurp"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Errorf("Proclaim by a non-leader: err = %v, want ErrElectionNotLeader", err)
	}
	camp2.pending(t, "e2.Campaign after Proclaim")

	if err := e1.Resign(ctx); err != nil {
		t.Fatalf("e1.Resign: %v", err)
	}
	if err := camp2.wait(t, "e2.Campaign after e1 resigned"); err != nil {
		t.Fatalf("e2.Campaign: %v", err)
	}
	obs.expect(t, "e2")
	if got := leaderValue(t, e1); got != "e2" {
		t.Errorf("Leader() after resignation = %q, want e2", got)
	}
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitKeys(t, cli, "/elect/", 0)
	if _, err := e1.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader after everyone resigned: err = %v, want ErrElectionNoLeader", err)
	}
}

// TestElectionFailover: when the leader's session lease is revoked (its
// process died) the waiting candidate is elected, the observer follows,
// and the old leader can no longer proclaim.
func TestElectionFailover(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	s1, cli := newSession(t, srv, 30)
	s2, _ := newSession(t, srv, 30)
	s3, _ := newSession(t, srv, 30)
	e1 := concurrency.NewElection(s1, "/failover/")
	e2 := concurrency.NewElection(s2, "/failover/")
	e3 := concurrency.NewElection(s3, "/failover/")
	obs := observe(t, srv, "/failover/")

	if err := e1.Campaign(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	obs.expect(t, "n1")
	camp2 := goAsync(func() error { return e2.Campaign(ctx, "n2") })
	waitKeys(t, cli, "/failover/", 2)
	camp3 := goAsync(func() error { return e3.Campaign(ctx, "n3") })
	waitKeys(t, cli, "/failover/", 3)
	camp2.pending(t, "e2.Campaign")
	camp3.pending(t, "e3.Campaign")

	if _, err := cli.Revoke(ctx, s1.Lease()); err != nil {
		t.Fatalf("revoke leader's lease: %v", err)
	}
	// The next in line (by create revision) wins; the third keeps waiting.
	if err := camp2.wait(t, "e2.Campaign after the leader's lease was revoked"); err != nil {
		t.Fatalf("e2.Campaign: %v", err)
	}
	obs.expect(t, "n2")
	camp3.pending(t, "e3.Campaign while e2 leads")
	if err := e1.Proclaim(ctx, "zombie"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Errorf("Proclaim by the deposed leader: err = %v, want ErrElectionNotLeader", err)
	}
	if got := leaderValue(t, e3); got != "n2" {
		t.Errorf("Leader() = %q, want n2", got)
	}

	// Same again for the second leader, through lease expiry of a closed
	// session instead of an explicit revoke: Close revokes the lease.
	if err := s2.Close(); err != nil {
		t.Fatalf("closing e2's session: %v", err)
	}
	if err := camp3.wait(t, "e3.Campaign after e2's session closed"); err != nil {
		t.Fatalf("e3.Campaign: %v", err)
	}
	obs.expect(t, "n3")
	if err := e3.Proclaim(ctx, "n3-again"); err != nil {
		t.Fatalf("e3.Proclaim: %v", err)
	}
	obs.expect(t, "n3-again")
}
