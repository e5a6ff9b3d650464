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

// TestReadGrantRevokedBySnapshot: a verified replica under its read lease
// has a read grant ending with the lease; the Ready of the step that asks
// for a snapshot carries a grant narrowing it to nothing (the driver
// publishes that before it drops the state it shows).
func TestReadGrantRevokedBySnapshot(t *testing.T) {
	const now = int64(10 * time.Second)
	n := NewNode(Config{ID: 2, Peer: 1}, RestartState{Now: now, Last: 3, Applied: 3})
	n.role = RoleReplica
	n.verified = true
	n.det.leaseUntil = now + int64(time.Second)

	if !n.HasReady() {
		t.Fatal("a new grant gives no Ready")
	}
	g := n.Ready().ReadGrant
	n.Advance()
	if want := (ReadGrant{Until: now + int64(time.Second), Index: 3}); g != want {
		t.Fatalf("grant %+v, want %+v", g, want)
	}
	if !g.Covers(now) || g.Covers(g.Until) {
		t.Fatalf("grant %+v: covers now %v, covers its end %v", g, g.Covers(now), g.Covers(g.Until))
	}

	n.askSnapshot(3)
	rd := n.Ready()
	if rd.ReadGrant != (ReadGrant{}) || !rd.ReadGrant.Narrows(g) {
		t.Fatalf("grant after asking for a snapshot: %+v, want none", rd.ReadGrant)
	}
}
