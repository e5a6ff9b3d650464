package ddsnet

import (
	"errors"
	"fmt"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// Config.WaitSet: the consumer waits in C.
//
// dyad perf measured the binding's round trip with a goroutine that blocks
// in one cgo call on a waitset and answers from that goroutine
// (dyad-waitset) at about half of ddsnet's, whose consumer the Go
// scheduler wakes from a call into Go on Cyclone's thread
// (docs/BENCHMARKS.md). With Config.WaitSet, every class's reader is a
// dds.ReceiveWaitSet reader attached to one dds.WaitSet, and the consumer
// calls Wait where it would select on Ready: Cyclone's receive thread only
// signals a condition variable, the consumer's thread wakes in C, takes
// every class that holds samples (up to Batch each) and offers them, all
// on the consumer's goroutine.
//
// Refusals: a class whose batch the consumer refused is muted in the
// waitset until Resume hands the held batch over, so that Wait neither
// returns at once for it nor takes more of it; its later samples wait in
// the reader's history (ReaderMaxSamples), as in the notify design.

// startWaitSet creates the readers on one waitset. The caller holds n.mu.
func (n *Net) startWaitSet() error {
	ws, err := n.p.NewWaitSet()
	if err != nil {
		return fmt.Errorf("ddsnet: waitset: %w", err)
	}
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		r, err := n.p.NewReader(TopicName(n.cfg.Prefix, c), dds.ReaderOptions{
			QoS:   dds.QoS{MaxSamples: n.cfg.ReaderMaxSamples, BestEffort: bestEffort(c)},
			Mode:  dds.ReceiveWaitSet,
			Batch: n.cfg.Batch,
		})
		if err != nil {
			ws.Close()
			return fmt.Errorf("ddsnet: reader %s: %w", c, err)
		}
		n.r[c] = r
		n.in[c].r.Store(r)
		if err := ws.Attach(r); err != nil {
			ws.Close()
			return fmt.Errorf("ddsnet: reader %s: %w", c, err)
		}
	}
	n.ws.Store(ws)
	return nil
}

// errNoWaitSet is Wait's error on a Net not started with Config.WaitSet.
var errNoWaitSet = errors.New("ddsnet: Wait needs Config.WaitSet and StartBatch")

// Wait (Config.WaitSet) blocks until a message of any class arrives, Wake
// is called, the Net is closed or timeout passes (negative: no timeout),
// then offers what arrived to the handler, a batch per class (up to Batch
// messages; more waiting makes the next Wait return at once), on the
// caller's goroutine: one cgo call waits and takes. woken reports a Wake
// since the previous Wait. The consumer calls it where it would select on
// Ready, and still calls Resume after consuming (a refused batch is
// offered again there, not here). After Close it returns
// transport.ErrClosed.
func (n *Net) Wait(timeout time.Duration) (woken bool, err error) {
	ws := n.ws.Load()
	if ws == nil {
		return false, errNoWaitSet
	}
	var got uint32 // classes with a sample in this Wait
	res, err := ws.Wait(timeout, func(r *dds.Reader, h *dds.Header, p []byte) {
		c := n.classOf(r)
		if got&(1<<c) == 0 {
			got |= 1 << c
			if f := n.cfg.OnNotify; f != nil {
				f(c)
			}
		}
		n.collect(&n.in[c], h, p) // only this goroutine builds batches in this mode
	})
	if errors.Is(err, dds.ErrClosed) {
		return false, transport.ErrClosed
	}
	if err != nil {
		return false, err
	}
	n.takes.Add(1)
	for c := transport.Class(0); got != 0; c++ {
		if got&(1<<c) == 0 {
			continue
		}
		got &^= 1 << c
		in := &n.in[c]
		in.mu.Lock()
		batch := n.build(in, c)
		if len(batch) > 0 {
			// A muted class (held batch) is never taken, so nothing of
			// c is held here and the order stays the writer's.
			n.offer(ws, in, c, in.r.Load(), batch)
		}
		in.mu.Unlock()
	}
	return res.Woken, nil
}

// Wake (Config.WaitSet) makes the consumer's current or next Wait return
// with woken set; wake-ups before that Wait coalesce. Any goroutine may
// call it, also after Close; without Config.WaitSet it does nothing.
func (n *Net) Wake() {
	if ws := n.ws.Load(); ws != nil {
		ws.Wake()
	}
}

// WaitReturned (Config.WaitSet) is when the latest Wait's wait in C
// returned (dds.WaitSet.Returned; 0 without a waitset). Instrumentation:
// dyad perf splits a round trip's wake-up with it. The consumer's
// goroutine only (also from OnNotify, which Wait calls).
func (n *Net) WaitReturned() int64 {
	if ws := n.ws.Load(); ws != nil {
		return ws.Returned()
	}
	return 0
}

// classOf is the class whose reader r is.
func (n *Net) classOf(r *dds.Reader) transport.Class {
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		if n.r[c] == r {
			return c
		}
	}
	panic("ddsnet: a sample of a reader of no class")
}

// offer hands batch of class c to the handler; a refused one is held and
// the class muted until offerHeld hands it over. The caller holds in.mu.
// The retry bit is set before the offer, as in pump.
func (n *Net) offer(ws *dds.WaitSet, in *inlet, c transport.Class, r *dds.Reader, batch []*transport.Message) bool {
	n.retry.Or(1 << c)
	if !n.h(batch) {
		in.held = batch
		n.refused.Add(1)
		ws.Mute(r, true) // an error means the Net is closing
		return false
	}
	n.retry.And(^uint32(1 << c))
	in.held = nil
	n.batches.Add(1)
	n.messages.Add(uint64(len(batch)))
	return true
}

// offerHeld is Resume's part with Config.WaitSet: it offers class c's held
// batch again and, once it is accepted, waits on the class again (what
// arrived meanwhile makes the next Wait return at once). The caller holds
// in.mu.
func (n *Net) offerHeld(ws *dds.WaitSet, in *inlet, c transport.Class, r *dds.Reader) {
	if in.held == nil {
		n.retry.And(^uint32(1 << c))
		return
	}
	if n.offer(ws, in, c, r, in.held) {
		ws.Mute(r, false)
	}
}

// Waits implements transport.Waiter: whether the consumer waits in Wait
// (Config.WaitSet).
func (n *Net) Waits() bool { return n.cfg.WaitSet }

var _ transport.Waiter = (*Net)(nil)
