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

// endpoint starts member id of cluster 1 on net and returns what it receives.
func endpoint(t *testing.T, net *MemNet, id uint64) chan *Message {
	t.Helper()
	got := make(chan *Message, 16)
	m := net.Endpoint(1, id)
	if err := m.Start(func(msg *Message) { got <- msg }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return got
}

func next(t *testing.T, c chan *Message) *Message {
	t.Helper()
	select {
	case m := <-c:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered")
		return nil
	}
}

// Every endpoint gets every message whatever its addressee (the receiver
// filters, as on DDS); To arrives only with an addressed envelope.
func TestMemCarriesVersionAndAddressee(t *testing.T) {
	net := NewMemNet()
	a := net.Endpoint(1, 1)
	defer a.Close()
	b, c := endpoint(t, net, 2), endpoint(t, net, 3)
	if err := a.Send(&Message{Class: Control, Kind: 1, To: 2}); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(&Message{Class: Control, Kind: 2, Version: VersionAddressed, To: 2}); err != nil {
		t.Fatal(err)
	}
	for _, got := range []chan *Message{b, c} {
		if m := next(t, got); m.Kind != 1 || m.To != 0 || m.EffectiveVersion() != VersionBase || m.From != 1 {
			t.Errorf("base message arrived as %+v", *m)
		}
		if m := next(t, got); m.Kind != 2 || m.To != 2 || m.Version != VersionAddressed || m.From != 1 {
			t.Errorf("addressed message arrived as %+v", *m)
		}
	}
}

// Inject forges the sender, skips it, and honours cut links.
func TestMemInject(t *testing.T) {
	net := NewMemNet()
	a, b := endpoint(t, net, 1), endpoint(t, net, 2)
	net.Block(1, 2, true)
	if err := net.Inject(1, 1, &Message{Class: Control, Kind: 1}); err != nil {
		t.Fatal(err)
	}
	net.Block(1, 2, false)
	if err := net.Inject(1, 1, &Message{Class: Control, Kind: 2, From: 9}); err != nil {
		t.Fatal(err)
	}
	if m := next(t, b); m.Kind != 2 || m.From != 1 || m.Cluster != 1 {
		t.Fatalf("b got %+v, want kind 2 from 1 (kind 1 went over a cut link)", *m)
	}
	// a is the forged sender: it gets nothing. Proven by a later message
	// from b arriving first.
	bEP := net.endpoints[2]
	if err := bEP.Send(&Message{Class: Control, Kind: 3}); err != nil {
		t.Fatal(err)
	}
	if m := next(t, a); m.Kind != 3 {
		t.Fatalf("the forged sender received %+v", *m)
	}
}
