package ddsnet

import (
	"errors"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

func waitSetConfig() Config {
	return Config{DDS: dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second},
		WaitSet: true, Batch: 8}
}

// With Config.WaitSet, Wait takes every class's messages: a burst
// interleaving the RELIABLE classes, each several batches long, arrives
// whole, each class in the writer's order, with intact payloads, and
// nothing signals Ready.
func TestWaitSetEveryClassNoLoss(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 100000)}
	a, b := batchPair(t, waitSetConfig(), g)
	classes := []transport.Class{transport.Log, transport.Ack, transport.Control, transport.Catchup}
	const per = 100 // more than Batch: several Waits per class
	for i := 0; i < per; i++ {
		for _, c := range classes {
			if err := a.Send(&transport.Message{Class: c, Index: uint64(i), Payload: []byte{byte(i), byte(c)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[transport.Class]uint64{}
	for range per * len(classes) {
		m := next(t, b, g)
		if m.Index != want[m.Class] || len(m.Payload) != 2 || m.Payload[0] != byte(m.Index) || m.Payload[1] != byte(m.Class) {
			t.Fatalf("%s: message %d arrived as %d (payload %v)", m.Class, want[m.Class], m.Index, m.Payload)
		}
		want[m.Class]++
	}
	for _, c := range classes {
		if want[c] != per {
			t.Errorf("%s: %d of %d messages", c, want[c], per)
		}
	}
	select {
	case <-b.Ready():
		t.Error("Ready fired with Config.WaitSet")
	default:
	}
}

// No wake-up is lost between a consumer's last look at its queues and its
// Wait (the apply loop queues, then wakes; internal/server/loopwait.go):
// Wakes before a Wait make that Wait return at once, reporting them, and
// coalesce into that one; the next Wait waits again. Waits reports the
// mode.
func TestWaitSetWakeBeforeWait(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 10)}
	_, b := batchPair(t, waitSetConfig(), g)
	if !b.Waits() {
		t.Fatal("Waits is false with Config.WaitSet")
	}
	b.Wake()
	b.Wake()
	// A Wake lost before the Wait would leave this one to its timeout,
	// which reports no wake-up.
	if woken, err := b.Wait(time.Minute); err != nil || !woken {
		t.Fatalf("Wait after Wake: woken %v, %v", woken, err)
	}
	if woken, err := b.Wait(10 * time.Millisecond); err != nil || woken {
		t.Fatalf("the Wait after the one that reported the Wakes: woken %v, %v (want a plain timeout)", woken, err)
	}
}

// Wake ends a Wait without timeout from another goroutine; Close ends one
// too, and every Wait after Close returns transport.ErrClosed. A Net
// without Config.WaitSet refuses Wait.
func TestWaitSetWakeAndClose(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 10)}
	_, b := batchPair(t, waitSetConfig(), g)
	type result struct {
		woken bool
		err   error
	}
	got := make(chan result, 1)
	wait := func() {
		woken, err := b.Wait(-1)
		got <- result{woken, err}
	}
	go wait()
	b.Wake()
	select {
	case r := <-got:
		if r.err != nil || !r.woken {
			t.Fatalf("Wait ended by Wake: woken %v, %v", r.woken, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not end a Wait without timeout")
	}

	go wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		// Woken by Close before the waitset went, or found it gone.
		if r.err != nil && !errors.Is(r.err, transport.ErrClosed) {
			t.Fatalf("Wait ended by Close: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a Wait without timeout")
	}
	if _, err := b.Wait(-1); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	b.Wake() // harmless after Close

	plain, err := New(Config{DDS: waitSetConfig().DDS, Cluster: 7, Node: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.StartBatch(g.offer); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Wait(0); err == nil {
		t.Fatal("Wait without Config.WaitSet succeeded")
	}
	if plain.Waits() {
		t.Fatal("Waits is true without Config.WaitSet")
	}
}
