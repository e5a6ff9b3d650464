package ddsnet

import (
	"sync"
	"sync/atomic"

	"github.com/dyad-db/dyad/internal/transport"
)

// Received batches' storage.
//
// A batch's payloads are copied out of Cyclone's loan into one buffer, and
// its messages live in one slice; both are an rxBuf, lent to the consumer
// with the batch (transport.Message.Recv). The consumer releases each
// message it is done with (transport.Message.Release); when the last
// message of a batch is released, the rxBuf goes back to its class's pool
// and a later batch of that class is taken into it, so a steady stream
// neither allocates (and zeroes) a buffer per batch nor leaves one to the
// garbage collector. A message the consumer keeps is never released; its
// batch's rxBuf is then never pooled again and the collector frees it
// once nothing refers to it, which is what every batch cost before.
//
// Ownership: an rxBuf belongs to the inlet that takes into it (under
// inlet.mu) until build hands its messages over; from then on to the
// messages, refs counting those not yet released; the release that takes
// refs to zero puts it in the pool, and only a later take gets it back.
// In race builds (poisonReleased) a released buffer is overwritten with
// poisonByte and its messages with poisonMessage, so that a consumer that
// keeps something it released reads garbage in the race-enabled tests
// instead of passing by luck.
type rxBuf struct {
	b    []byte
	msgs []transport.Message
	ptrs []*transport.Message
	// refs is the number of the batch's messages not yet released.
	refs atomic.Int32
	pool *sync.Pool
}

// maxPooledBuf bounds the buffers a pool keeps: a batch of large entries
// leaves its buffer to the collector rather than pin it.
const maxPooledBuf = maxPendHint

// poisonByte fills released buffers in race builds.
const poisonByte = 0xdb

// poisonMessage is what a released message holds in race builds.
var poisonMessage = transport.Message{Class: transport.NumClasses, Version: 0xdbdb, Kind: 0xdbdb,
	Cluster: 0xdbdbdbdbdbdbdbdb, From: 0xdbdbdbdbdbdbdbdb}

// Release implements transport.Releaser: the batch's last release pools
// b. More releases than messages is a bug of the consumer's (a message
// released twice through copies of it) and panics rather than hand the
// storage out twice.
func (b *rxBuf) Release() {
	n := b.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		panic("ddsnet: a received batch released more often than it has messages")
	}
	if poisonReleased {
		full := b.b[:cap(b.b)]
		for i := range full {
			full[i] = poisonByte
		}
		for i := range b.msgs {
			b.msgs[i] = poisonMessage
		}
	}
	if cap(b.b) > maxPooledBuf {
		b.b = nil
	}
	b.b = b.b[:0]
	b.pool.Put(b)
}

// newRxBuf is an inlet pool's New.
func newRxBuf(pool *sync.Pool) func() any {
	return func() any { return &rxBuf{pool: pool} }
}
