package transport

import (
	"testing"
	"time"
)

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
