package server_test

import (
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// ackSends records, for every ack a replica sends while armed, the index
// it acknowledges, the last index in the replica's journal and the last
// index it has applied, all read at the send, on the apply loop (sends
// run there, and the loop is the only goroutine that appends to the
// journal or applies).
type ackSends struct {
	server.SendTap
	srv  *server.Server // nil: not armed; guarded by the tap's lock
	acks []ackSend
}

type ackSend struct{ index, journaled, applied uint64 }

func newAckSends() *ackSends {
	a := &ackSends{}
	a.On = func(m *transport.Message) {
		if m.Kind == repl.KindAck && a.srv != nil {
			a.acks = append(a.acks, ackSend{index: m.Index, journaled: server.JournalLast(a.srv), applied: server.AppliedIndexLoop(a.srv)})
		}
	}
	return a
}

func (a *ackSends) arm(srv *server.Server) { a.Reset(func() { a.srv, a.acks = srv, nil }) }

func (a *ackSends) get() []ackSend {
	var acks []ackSend
	a.With(func() { acks = append(acks, a.acks...) })
	return acks
}

// A replica acknowledges the leader's entries once they are in its
// journal, and applies them to its store only after the ack is sent: the
// ack promises durability, nothing more, so the apply is not on the
// write's path. Every write is still shown on the replica once committed.
func TestReplicaAcksJournaledEntriesBeforeApplying(t *testing.T) {
	net := transport.NewMemNet()
	acks := newAckSends()
	a := pairNodeWith(t, net, t.TempDir(), 1, true, nil)
	b := pairNodeWith(t, net, t.TempDir(), 2, false, func(c *server.ReplConfig) {
		acks.Transport = c.Transport
		c.Transport = acks
	})
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	// The first batches of an epoch carry its records (a hard state),
	// which commit synchronously; the next finds the journal behind and
	// restarts it. From then on every batch is journaled ahead.
	put(t, a.cli, "k", "first")
	put(t, a.cli, "k", "second")
	waitLease(t, b)

	acks.arm(b.srv)
	const writes = 5
	for i := 0; i < writes; i++ {
		put(t, a.cli, "k", "v")
	}
	got := acks.get()
	if len(got) < writes {
		t.Fatalf("the replica sent %d acks for %d acknowledged writes", len(got), writes)
	}
	for _, ack := range got {
		if ack.journaled < ack.index {
			t.Fatalf("the replica acknowledged index %d with only %d in its journal", ack.index, ack.journaled)
		}
		if ack.applied >= ack.index {
			t.Fatalf("the replica acknowledged index %d after applying it (applied %d): the apply delayed the ack", ack.index, ack.applied)
		}
	}
	if v, _ := get(t, b.cli, "k"); v != "v" {
		t.Fatalf("the replica shows k=%q after the acknowledged writes, want v", v)
	}
}
