package server_test

import (
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// TestPairStatus: a formed pair reports itself synchronous from both
// nodes; after an acknowledged write the primary has timed a round trip to
// its replica; once the replica stops, the primary reports solo, not sync.
func TestPairStatus(t *testing.T) {
	net := transport.NewMemNet()
	a := pairNode(t, net, t.TempDir(), 1, true)
	b := pairNode(t, net, t.TempDir(), 2, false)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	put(t, a.cli, "k", "v")

	// Liveness is published by the apply loop every tick: wait for the
	// first tick that saw the peer on each side.
	waitFor(t, "both nodes report sync", func() bool { return a.srv.PairStatus().Sync && b.srv.PairStatus().Sync })
	pa, pb := a.srv.PairStatus(), b.srv.PairStatus()
	if pa.Role != "primary" || !pa.PeerAlive || pb.Role != "replica" || !pb.PeerAlive {
		t.Errorf("status a %+v, b %+v; want a synchronous primary and replica that hear each other", pa, pb)
	}
	if pa.PeerRoundTrip <= 0 || pa.RoundTripAge < 0 {
		t.Errorf("primary after an acknowledged write: round trip %v (%v ago), want one timed", pa.PeerRoundTrip, pa.RoundTripAge)
	}
	if pb.PeerRoundTrip != 0 {
		t.Errorf("replica reports a round trip of %v; only the primary times them", pb.PeerRoundTrip)
	}

	b.stop()
	waitRole(t, a, repl.RoleSolo)
	waitFor(t, "the primary reports solo", func() bool { s := a.srv.PairStatus(); return s.Role == "solo" && !s.Sync })
}

// waitFor polls cond until it holds, failing the test after a long bound
// (a bound on a hang, not a performance target).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(40 * testLease)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, 40*testLease)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
