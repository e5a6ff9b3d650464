package server

import (
	"sync/atomic"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// fakeBatcher is a transport.Batcher whose batches the test offers by
// hand (offer), as ddsnet's Resume would.
type fakeBatcher struct {
	transport.Transport // nil: only the batching half is used
	h                   transport.BatchHandler
	ready               chan struct{}
}

func (f *fakeBatcher) StartBatch(h transport.BatchHandler) error { f.h = h; return nil }
func (f *fakeBatcher) Ready() <-chan struct{}                    { return f.ready }
func (f *fakeBatcher) Resume()                                   {}
func (f *fakeBatcher) MaxBatch() int                             { return 64 }

// The replication state's transport, stamped and metered, is still a
// Batcher when the network's is: the apply loop pulls batches (inbox.go)
// instead of leaving the network's delivery thread blocked on a full inbox.
// The metered batch handler counts each message once and takes each member
// record once, even when the consumer refuses a batch and is offered it
// again, and the consumer never sees member records.
func TestMeteredTransportKeepsBatching(t *testing.T) {
	fb := &fakeBatcher{ready: make(chan struct{})}
	r := newReplState(ReplConfig{Transport: fb})
	m := NewMetrics(nil)
	var members []*transport.Message
	r.tr = newMeteredTransport(r.tr, m, &r.peerID, func(msg *transport.Message) { members = append(members, msg) })
	b := r.batcher()
	if b == nil {
		t.Fatal("the metered, stamped transport hides the network's batching")
	}
	if b.Ready() != fb.ready || b.MaxBatch() != 64 {
		t.Fatal("the wrapped batcher does not pass Ready and MaxBatch through")
	}

	var got [][]*transport.Message
	var refuse atomic.Bool
	refuse.Store(true)
	if err := b.StartBatch(func(ms []*transport.Message) bool {
		if refuse.Load() {
			return false
		}
		got = append(got, ms)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	batch := []*transport.Message{
		{Kind: repl.KindEntries, From: 0xb, Payload: make([]byte, 10)},
		{Kind: repl.KindMember, From: 0xb, Payload: make([]byte, 20)},
		{Kind: repl.KindAck, From: 0xb},
	}
	want := float64(3*envelopeBytes + 30)

	if fb.h(batch) {
		t.Fatal("a batch the consumer refused was reported taken")
	}
	if v := promtest.ToFloat64(m.PeerReceivedBytes.WithLabelValues("b")); v != 0 || len(members) != 0 {
		t.Fatalf("a refused batch counted %v bytes and took %d member records; want none until it is taken", v, len(members))
	}
	refuse.Store(false)
	if !fb.h(batch) { // offered again, as Resume does
		t.Fatal("the batch was refused with room for it")
	}
	if len(got) != 1 || len(got[0]) != 2 || got[0][0].Kind != repl.KindEntries || got[0][1].Kind != repl.KindAck {
		t.Fatalf("the consumer got %v, want the entries and the ack, in order, without the member record", got)
	}
	if v := promtest.ToFloat64(m.PeerReceivedBytes.WithLabelValues("b")); v != want {
		t.Fatalf("received bytes %v, want %v (each message once)", v, want)
	}
	if len(members) != 1 || members[0] != batch[1] {
		t.Fatalf("member records taken: %d, want the one once", len(members))
	}

	// A batch of member records only never reaches the consumer.
	if !fb.h([]*transport.Message{{Kind: repl.KindMember, From: 0xb}}) || len(got) != 1 || len(members) != 2 {
		t.Fatalf("a batch of a member record: consumer batches %d, member records %d; want 1 and 2", len(got), len(members))
	}
}

// The metered batch handler counts what it read before the consumer took
// the batch: a consumer may handle and release the messages at once (the
// apply loop, when the transport offers from another goroutine), and a
// released message's storage may carry a later batch. Here the consumer
// overwrites each message it takes, as a reused buffer would; the bytes
// must still be counted for the sender and size that arrived.
func TestMeteredBatchCountsBeforeTheConsumerTakesIt(t *testing.T) {
	fb := &fakeBatcher{ready: make(chan struct{})}
	r := newReplState(ReplConfig{Transport: fb})
	m := NewMetrics(nil)
	r.tr = newMeteredTransport(r.tr, m, &r.peerID, func(*transport.Message) {})
	if err := r.batcher().StartBatch(func(ms []*transport.Message) bool {
		for _, msg := range ms {
			*msg = transport.Message{From: 0xdb, Payload: make([]byte, 1000)} // reused by a later batch
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	fb.h([]*transport.Message{
		{Kind: repl.KindEntries, From: 0xb, Payload: make([]byte, 10)},
		{Kind: repl.KindAck, From: 0xb},
	})
	if v, want := promtest.ToFloat64(m.PeerReceivedBytes.WithLabelValues("b")), float64(2*envelopeBytes+10); v != want {
		t.Fatalf("received bytes from b %v, want %v", v, want)
	}
	if n := promtest.CollectAndCount(m.PeerReceivedBytes); n != 1 {
		t.Fatalf("received bytes in %d series, want 1 (the sender's)", n)
	}
}
