package repl

import (
	"slices"
	"testing"
	"time"
)

// verifiedReplica is a replica that verified its log (last index last,
// applied up to applied) and holds its read lease for a second after now.
func verifiedReplica(now int64, last, applied uint64) *Node {
	n := NewNode(Config{ID: 2, Peer: 1}, RestartState{Now: now, Last: last, Applied: applied})
	n.role = RoleReplica
	n.verified = true
	n.det.leaseUntil = now + int64(time.Second)
	return n
}

// TestReplicaResyncingRefusesReads: a replica holding its read lease
// refuses a linearizable read while it replaces its state from a
// snapshot, and serves one once it no longer does. (The interaction
// scenarios cannot isolate this: a leader withholds the read lease from a
// replica that needs a snapshot in every path they reach.)
func TestReplicaResyncingRefusesReads(t *testing.T) {
	const now = int64(10 * time.Second)
	n := verifiedReplica(now, 3, 3)
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
	n := verifiedReplica(now, 3, 3)

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

// TestReadsWaitingForTheCommitIndex: reads reaching a replica while a
// write is in flight (durable here, not yet known committed) wait for the
// commit index; one arriving while nothing else changed only joins them,
// and one arriving after the commit index moved, by any path, is answered
// with all of them.
func TestReadsWaitingForTheCommitIndex(t *testing.T) {
	const now = int64(10 * time.Second)
	served := func(ids ...uint64) []ReadState {
		var rs []ReadState
		for _, id := range ids {
			rs = append(rs, ReadState{ID: id, Index: 5})
		}
		return rs
	}
	for _, tc := range []struct {
		name   string
		change func(n *Node)
		want   []ReadState
	}{
		{"nothing changed", func(*Node) {}, nil},
		{"the lease was renewed", func(n *Node) { n.det.leaseUntil += int64(time.Second) }, nil},
		{"the commit index covers them", func(n *Node) { n.commit = 5 }, served(1, 2, 3)},
		{"the commit index covers them after a renewal", func(n *Node) {
			n.det.leaseUntil += int64(time.Second)
			n.commit = 5
		}, served(1, 2, 3)},
		{"the lease ran out", func(n *Node) { n.det.leaseUntil = now }, []ReadState{{ID: 3, Refused: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := verifiedReplica(now, 5, 3)
			n.commit = 3
			if n.persisted != 5 {
				t.Fatalf("durable index %d, want 5", n.persisted)
			}
			n.ReadIndex(1, now)
			n.ReadIndex(2, now)
			if rs := n.Ready().ReadStates; len(rs) != 0 {
				t.Fatalf("reads answered before the commit index covers them: %+v", rs)
			}
			n.Advance()
			tc.change(n)
			n.ReadIndex(3, now+int64(time.Millisecond))
			if rs := n.Ready().ReadStates; !slices.Equal(rs, tc.want) {
				t.Fatalf("answered %+v, want %+v", rs, tc.want)
			}
		})
	}
}

// BenchmarkReadsWaiting: one op registers a read on a replica that holds
// b.N reads already waiting for a write in flight; it costs the same
// however many wait.
func BenchmarkReadsWaiting(b *testing.B) {
	const now = int64(10 * time.Second)
	n := verifiedReplica(now, 5, 3)
	n.det.leaseUntil = now + int64(time.Hour)
	n.commit = 3
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n.ReadIndex(uint64(i+1), now)
	}
	b.StopTimer()
	if w := len(n.reads); w != b.N {
		b.Fatalf("%d reads waiting after %d", w, b.N)
	}
}
