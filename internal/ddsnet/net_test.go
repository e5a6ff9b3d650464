package ddsnet

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// testDomain keeps concurrent test binaries apart (DDS domains 0..232).
func testDomain() uint32 { return uint32(100 + os.Getpid()%100) }

func pair(t *testing.T, clusterB uint64) (*Net, *Net, chan *transport.Message, chan *transport.Message) {
	t.Helper()
	cfg := dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second}
	a, err := New(Config{DDS: cfg, Cluster: 7, Node: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{DDS: cfg, Cluster: clusterB, Node: 2})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ga, gb := make(chan *transport.Message, 100000), make(chan *transport.Message, 100000)
	if err := a.Start(func(m *transport.Message) { ga <- m }); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(func(m *transport.Message) { gb <- m }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !a.PeerMatched() || !b.PeerMatched() {
		if time.Now().After(deadline) {
			t.Fatal("the two nets never matched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a, b, ga, gb
}

func recv(t *testing.T, c chan *transport.Message) *transport.Message {
	t.Helper()
	select {
	case m := <-c:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return nil
	}
}

func TestEveryClassInOrder(t *testing.T) {
	a, _, _, gb := pair(t, 7)
	sizes := []int{0, 1, 1344, 65536, 1 << 20}
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		for i, n := range sizes {
			p := bytes.Repeat([]byte{byte(c), byte(i)}, n/2)
			if err := a.Send(&transport.Message{Class: c, Kind: uint16(i + 1), Flags: 3, Term: 9, Index: uint64(i), Payload: p}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[transport.Class][]uint64{}
	for k := 0; k < int(transport.NumClasses)*len(sizes); k++ {
		m := recv(t, gb)
		if m.From != 1 || m.Cluster != 7 || m.Term != 9 || m.Flags != 3 || m.Kind != uint16(m.Index+1) {
			t.Fatalf("header: %+v", *m)
		}
		want := bytes.Repeat([]byte{byte(m.Class), byte(m.Index)}, sizes[m.Index]/2)
		if !bytes.Equal(m.Payload, want) {
			t.Fatalf("class %s #%d: payload of %d bytes differs", m.Class, m.Index, len(m.Payload))
		}
		got[m.Class] = append(got[m.Class], m.Index)
	}
	for c, idx := range got {
		if fmt.Sprint(idx) != "[0 1 2 3 4]" {
			t.Errorf("class %s arrived as %v", c, idx)
		}
	}
}

func TestManyMessagesArriveCompleteAndInOrder(t *testing.T) {
	a, _, _, gb := pair(t, 7)
	const n = 10000
	go func() {
		for i := 0; i < n; i++ {
			a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: make([]byte, 200)})
		}
	}()
	for i := 0; i < n; i++ {
		if m := recv(t, gb); m.Index != uint64(i) {
			t.Fatalf("message %d arrived as %d", i, m.Index)
		}
	}
}

// TestOtherClusterAndOwnSamplesDropped sends on a reliable class (a lost
// best-effort sample would pass for a dropped one) and waits until each
// side's reader has seen the other's sample and dropped it; only then is
// "nothing delivered" a fact rather than "nothing delivered yet".
func TestOtherClusterAndOwnSamplesDropped(t *testing.T) {
	a, b, ga, gb := pair(t, 8) // b belongs to another cluster
	if err := a.Send(&transport.Message{Class: transport.Control, Index: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(&transport.Message{Class: transport.Control, Index: 2}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fa, _ := a.Dropped()
		fb, _ := b.Dropped()
		if fa >= 1 && fb >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("samples of the other cluster dropped: a %d, b %d; want both to see one", fa, fb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case m := <-gb:
		t.Fatalf("b received a message of another cluster: %+v", *m)
	case m := <-ga:
		t.Fatalf("a received a message of another cluster or its own: %+v", *m)
	default:
	}
	// A node's own samples, if Cyclone delivers them to its readers at
	// all, reach them inside the write, before Send returns: they too
	// would be in ga or gb by now.
	_, oa := a.Dropped()
	_, ob := b.Dropped()
	t.Logf("own samples dropped: a %d, b %d", oa, ob)
}

func TestSendAfterClose(t *testing.T) {
	a, _, _, _ := pair(t, 7)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := a.Send(&transport.Message{Class: transport.Log}); err != transport.ErrClosed {
		t.Fatalf("Send after Close: %v", err)
	}
}
