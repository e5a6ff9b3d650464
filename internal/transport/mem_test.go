package transport

import (
	"testing"
	"time"
)

// BlockClass cuts one class of one direction: that class's messages are
// dropped, every other class and the other direction still deliver, and
// the peer no longer counts as matched until the class is restored.
func TestMemBlockClass(t *testing.T) {
	net := NewMemNet()
	a, b := net.Endpoint(7, 1), net.Endpoint(7, 2)
	got := make(chan *Message, 16)
	for _, e := range []*Mem{a, b} {
		if err := e.Start(func(m *Message) { got <- m }); err != nil {
			t.Fatal(err)
		}
		defer e.Close()
	}
	net.BlockClass(2, 1, Ack, true)
	if a.PeerMatched() || b.PeerMatched() {
		t.Fatal("a peer with one class cut still counts as matched")
	}
	// Sent in this order on one endpoint, each class on its own queue:
	// the cut one is dropped at Send, so only the others can arrive.
	send := func(e *Mem, c Class, kind uint16) {
		t.Helper()
		if err := e.Send(&Message{Class: c, Kind: kind}); err != nil {
			t.Fatal(err)
		}
	}
	send(b, Ack, 1)       // cut
	send(b, Heartbeat, 2) // open
	send(a, Ack, 3)       // the other direction: open
	seen := map[uint16]uint64{}
	deadline := time.After(10 * time.Second)
	for len(seen) < 2 {
		select {
		case m := <-got:
			seen[m.Kind] = m.From
		case <-deadline:
			t.Fatalf("delivered %v, want kinds 2 and 3", seen)
		}
	}
	if _, ok := seen[1]; ok || seen[2] != 2 || seen[3] != 1 {
		t.Fatalf("delivered %v (kind: sender), want 2 from 2 and 3 from 1 only", seen)
	}

	net.BlockClass(2, 1, Ack, false)
	if !a.PeerMatched() || !b.PeerMatched() {
		t.Fatal("restoring the class did not match the peers again")
	}
	send(b, Ack, 4)
	select {
	case m := <-got:
		if m.Kind != 4 {
			t.Fatalf("delivered kind %d after the restore, want 4", m.Kind)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restored class delivers nothing")
	}
}
