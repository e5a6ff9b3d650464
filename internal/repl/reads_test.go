package repl

import (
	"testing"
	"time"
)

// TestReplicaResyncingRefusesReads: a replica holding its read lease
// refuses a linearizable read while it replaces its state from a
// snapshot, and serves one once it no longer does. (The interaction
// scenarios cannot isolate this: a leader withholds the read lease from a
// replica that needs a snapshot in every path they reach.)
func TestReplicaResyncingRefusesReads(t *testing.T) {
	const now = int64(10 * time.Second)
	n := NewNode(Config{ID: 2, Peer: 1}, RestartState{Now: now, Last: 3, Applied: 3})
	n.role = RoleReplica
	n.verified = true
	n.det.leaseUntil = now + int64(time.Second)
	n.peer.Snap.Req = 7

	n.ReadIndex(1, now)
	if rs := n.Ready().ReadStates; len(rs) != 1 || rs[0] != (ReadState{ID: 1, Refused: true}) {
		t.Fatalf("read while resyncing: %+v, want read 1 refused", rs)
	}
	n.Advance()

	n.peer.Snap.Req = 0
	n.ReadIndex(2, now)
	if rs := n.Ready().ReadStates; len(rs) != 1 || rs[0] != (ReadState{ID: 2, Index: 3}) {
		t.Fatalf("read after the resync: %+v, want read 2 served at index 3", rs)
	}
}
