package server_test

import (
	"syscall"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// A batch whose journal append fails is refused to its callers, yet the
// node's Close (or the background commit before it) writes what Apply
// left in memory to the data file: the refused batch is durable there, as
// after a crash between a commit and the answer, and its callers' outcome
// is unknown (closeJournal says why that is kept). In a pair that batch
// is a suffix of the failed primary's log alone (its replica never
// received it). When the node comes back and follows the replica that
// took over, the rejoin takes the suffix back: the node converges on the
// new leader's history, without the refused write: dropped in place (the
// commit bound it kept is below the refused batch) or, should a drop not
// be possible, from a snapshot.
func TestJournalFailedBatchIsTakenBackOnRejoin(t *testing.T) {
	net := transport.NewMemNet()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startPair(t, net, dirA, dirB)
	put(t, a.cli, "k", "1")
	before := server.AppliedIndex(a.srv)

	net.Block(1, 2, true) // the batch never reaches the replica
	server.InjectJournalFault(a.srv, func() error { return syscall.EIO })
	putUnacknowledged(t, a.cli, "refused")
	a.stop()
	if ci := consistentIndex(t, dirA); ci <= before {
		t.Fatalf("the failed primary's data file is at index %d, as before the refused write (%d): the test needs the refused batch in it", ci, before)
	}

	waitRole(t, b, repl.RoleSolo)
	put(t, b.cli, "after", "1")
	net.Block(1, 2, false)
	a = pairNode(t, net, dirA, 1, true)
	waitRole(t, a, repl.RoleReplica)
	waitRole(t, b, repl.RolePrimary)
	waitLease(t, a)
	last := put(t, b.cli, "last", "1")
	for k, want := range map[string]string{"k": "1", "refused": "", "after": "1", "last": "1"} {
		if v, rev := get(t, a.cli, k); v != want || rev < last {
			t.Errorf("the rejoined node reads %s = %q at revision %d, want %q at >= %d", k, v, rev, want, last)
		}
	}
	if ha, hb := hashAt(t, a, last), hashAt(t, b, last); ha != hb {
		t.Errorf("HashKV at revision %d: %x on the rejoined node, %x on the leader", last, ha, hb)
	}
	dropped, installed := counter(t, a.cfg.Metrics.SuffixesDropped), counter(t, a.cfg.Metrics.SnapshotsInstalled)
	if dropped+installed == 0 {
		t.Error("the rejoined node neither dropped its suffix nor installed a snapshot: the refused batch was never taken back")
	}
	t.Logf("the rejoin dropped %v suffixes in place and installed %v snapshots", dropped, installed)
}
