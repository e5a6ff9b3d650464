package ddsnet

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// Config.OnWrite sees each of Send's writes, with its class and what the
// write measured, on Send's goroutine; the message travels as without it.
func TestOnWriteStampsSends(t *testing.T) {
	cfg := dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second}
	var mu sync.Mutex
	var seen []transport.Class
	var stamps []dds.WriteStamp
	onWrite := func(c transport.Class, st dds.WriteStamp) {
		mu.Lock()
		defer mu.Unlock()
		seen, stamps = append(seen, c), append(stamps, st)
	}
	got := make(chan *transport.Message, 16)
	a, _ := startPair(t, Config{DDS: cfg, Cluster: 7, Node: 1, OnWrite: onWrite}, Config{DDS: cfg, Cluster: 7, Node: 2}, discard, handTo(got))
	sent := []transport.Class{transport.Log, transport.Ack, transport.Catchup}
	for i, c := range sent {
		if err := a.Send(&transport.Message{Class: c, Index: uint64(i), Payload: bytes.Repeat([]byte{byte(i)}, 100)}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n != i+1 {
			t.Fatalf("after Send %d, OnWrite was called %d times", i+1, n)
		}
		m := recv(t, got)
		if m.Class != c || m.Index != uint64(i) || !bytes.Equal(m.Payload, bytes.Repeat([]byte{byte(i)}, 100)) {
			t.Fatalf("received %+v, want class %s #%d with its payload", *m, c, i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, c := range sent {
		if seen[i] != c {
			t.Errorf("OnWrite %d: class %s, want %s", i, seen[i], c)
		}
		if st := stamps[i]; st.Write <= 0 || st.Call < st.Write {
			t.Errorf("OnWrite %d: stamp %+v, want 0 < Write <= Call", i, st)
		}
	}
}

// StampWrites(false) stops the stamping: Send writes plainly and OnWrite is
// not called, the message still arrives; StampWrites(true) resumes it.
func TestStampWritesOff(t *testing.T) {
	cfg := dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second}
	var calls atomic.Int64
	onWrite := func(transport.Class, dds.WriteStamp) { calls.Add(1) }
	got := make(chan *transport.Message, 16)
	a, _ := startPair(t, Config{DDS: cfg, Cluster: 7, Node: 1, OnWrite: onWrite}, Config{DDS: cfg, Cluster: 7, Node: 2}, discard, handTo(got))
	for i, stamp := range []bool{false, false, true} {
		a.StampWrites(stamp)
		before := calls.Load()
		if err := a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		want := before
		if stamp {
			want++
		}
		if n := calls.Load(); n != want {
			t.Errorf("Send %d with stamping %v: OnWrite called %d times, want %d", i, stamp, n-before, want-before)
		}
		if m := recv(t, got); m.Index != uint64(i) || !bytes.Equal(m.Payload, []byte{byte(i)}) {
			t.Fatalf("received %+v, want #%d", *m, i)
		}
	}
}
