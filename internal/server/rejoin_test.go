package server_test

import (
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// The primary A stops and its replica B takes over alone. A comes back
// while it cannot hear B, and as the node that led last it leads alone
// too, in a term above B's (every restart takes a new term), without
// writing anything. When the link returns, A yields (it acknowledged
// nothing alone) and follows B, whose epoch has the lower term. A must
// still catch up with B and become its synchronous replica: it used to
// drop every entry of B's epoch as the sample of an old epoch, asking for
// catch-up again and again and never applying the answer.
func TestPairRejoinsLeaderOfLowerTerm(t *testing.T) {
	net := transport.NewMemNet()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startPair(t, net, dirA, dirB)
	put(t, a.cli, "before", "1")
	a.stop()
	waitRole(t, b, repl.RoleSolo)
	solo := put(t, b.cli, "solo", "1")

	net.Partition(1, 2, true)
	a = pairNode(t, net, dirA, 1, true)
	waitRole(t, a, repl.RoleSolo) // led last, peer absent: leads alone
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
