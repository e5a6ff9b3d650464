package ddsnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// flushWait bounds one wait of the flusher for the peer's acknowledgements
// of a class whose writer is at its high-water mark, so that Close never
// waits longer for it.
const flushWait = 20 * time.Millisecond

// outlet is one class's send side. A class whose writer never blocks
// (every class but Catchup) writes without waiting; a sample its writer
// refuses at the high-water mark is copied into backlog, and so is every
// later one of the class until backlog has drained, so that the class
// keeps its order. The flusher writes the backlog out as the peer
// acknowledges. mu is held across a write and the backlog it decides on
// (non-blocking writes only); lock order: outlet.mu -> dds.Writer.mu.
type outlet struct {
	mu      sync.Mutex
	backlog []queued
	bytes   int // payload bytes in backlog
}

// queued is a sample waiting in a backlog: the header and its own copy of
// the payload as the writer will send it (addressee included).
type queued struct {
	h       dds.Header
	payload []byte
}

// blocking reports whether class c's writer waits at its high-water mark:
// only Catchup's, whose sender is off the replication loop and wants the
// back-pressure (a bulk transfer paced by the peer).
func blocking(c transport.Class) bool { return c == transport.Catchup }

// Send implements transport.Transport. On every class but Catchup it never
// waits for the peer: a sample the writer refuses at its high-water mark
// queues behind it (counted in SendBlocked) up to Config.Backlog bytes per
// class, and beyond that Send returns transport.ErrTimeout at once
// (counted in SendTimeouts). A Catchup Send waits at the mark up to
// SendTimeout, then returns ErrTimeout.
func (n *Net) Send(m *transport.Message) error { return n.send(m, nil, true) }

// SendAll sends ms in order, each as Send would, and returns how many it
// took (sent, or queued behind a writer at its high-water mark) and the
// error of the first one it did not take. In a participant with
// dds.Config.WriteBatch the messages of one class share datagrams: each
// but a Catchup message is queued (dds.Writer.Queue) and every class
// written is flushed once before SendAll returns, so a burst of small
// messages costs a few datagrams instead of one each. Without
// WriteBatch, SendAll is a loop of Sends.
//
// A class's last message in ms is written with a flush (one cgo call, as
// Send's), so that a class with one message costs what Send does, and
// one with k costs k calls and the datagrams its bytes need.
func (n *Net) SendAll(ms []*transport.Message) (int, error) {
	var flush uint32 // classes with samples to flush, 1<<c
	defer func() {
		for c := transport.Class(0); flush != 0; c++ {
			if flush&(1<<c) != 0 {
				flush &^= 1 << c
				n.w[c].Flush() // fails only once closed, when nothing is sent anyway
			}
		}
	}()
	var last [transport.NumClasses]int // index in ms of each class's last message
	if n.cfg.DDS.WriteBatch {
		for i, m := range ms {
			if m.Class < transport.NumClasses {
				last[m.Class] = i
			}
		}
	}
	for i, m := range ms {
		if err := n.send(m, &flush, m.Class < transport.NumClasses && last[m.Class] == i); err != nil {
			return i, err
		}
	}
	return len(ms), nil
}

// send is Send; with flush (SendAll) in a batching participant a
// non-blocking class's write only queues, and the class is added to
// *flush for the caller to flush, unless final (the class's last message
// of the SendAll): that one is written with a flush, which sends what
// the class queued before it too, and the class leaves *flush.
func (n *Net) send(m *transport.Message, flush *uint32, final bool) error {
	if m.Class >= transport.NumClasses {
		return fmt.Errorf("ddsnet: no class %d", m.Class)
	}
	select {
	case <-n.stop:
		return transport.ErrClosed // a backlog would never drain
	default:
	}
	h := dds.Header{Version: m.EffectiveVersion(), Kind: m.Kind, Flags: m.Flags, Cluster: n.cfg.Cluster, Node: n.cfg.Node, Term: m.Term, Index: m.Index}
	payload := m.Payload
	if h.Version >= transport.VersionAddressed {
		bp, _ := n.sendBufs.Get().(*[]byte)
		if bp == nil {
			bp = new([]byte)
		}
		b := binary.BigEndian.AppendUint64((*bp)[:0], m.To)
		payload = append(b, m.Payload...)
		// Write serialises synchronously and keeps nothing of payload;
		// a backlog keeps its own copy.
		defer func() {
			*bp = payload[:0]
			n.sendBufs.Put(bp)
		}()
	}
	if blocking(m.Class) {
		return n.sendErr(n.write(m.Class, &h, payload))
	}
	o := &n.out[m.Class]
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.backlog) == 0 {
		var err error
		switch {
		case flush != nil && n.cfg.DDS.WriteBatch && final:
			if err = n.write(m.Class, &h, payload); err == nil {
				*flush &^= 1 << m.Class // the write flushed the class
			}
		case flush != nil && n.cfg.DDS.WriteBatch:
			err = n.w[m.Class].Queue(&h, payload)
			*flush |= 1 << m.Class
		default:
			err = n.write(m.Class, &h, payload)
		}
		if !errors.Is(err, dds.ErrTimeout) {
			return n.sendErr(err)
		}
	}
	if o.bytes+len(payload) > n.cfg.Backlog && len(o.backlog) > 0 {
		n.sendTimeouts.Add(1)
		return transport.ErrTimeout
	}
	o.backlog = append(o.backlog, queued{h: h, payload: append([]byte(nil), payload...)})
	o.bytes += len(payload)
	n.sendBlocked.Add(1)
	select {
	case n.kick <- struct{}{}:
	default: // the flusher is already due to run
	}
	return nil
}

// write is Send's write of class c, stamped for Config.OnWrite when set
// and not turned off (StampWrites).
func (n *Net) write(c transport.Class, h *dds.Header, payload []byte) error {
	f := n.cfg.OnWrite
	if f == nil || n.unstamped.Load() {
		return n.w[c].Write(h, payload)
	}
	var st dds.WriteStamp
	err := n.w[c].WriteStamped(h, payload, &st)
	f(c, st)
	return err
}

// StampWrites turns Config.OnWrite's stamping of Send's writes off (false)
// or back on (true, the default). Off, Send writes as if OnWrite were
// unset and does not call it: a stamped write costs two getrusage calls
// and a few clock reads more than a plain one, which a throughput
// measurement should not pay (dyad perf stamps its round trips only).
// Safe to call from any goroutine; a Send running meanwhile may still
// stamp.
func (n *Net) StampWrites(on bool) { n.unstamped.Store(!on) }

// sendErr maps a write's error to the transport's, counting timeouts.
func (n *Net) sendErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dds.ErrTimeout):
		n.sendTimeouts.Add(1)
		return transport.ErrTimeout
	case errors.Is(err, dds.ErrClosed):
		return transport.ErrClosed
	}
	return err
}

// flusher writes the classes' backlogs out, oldest first, as their writers
// take them. It is the Net's one goroutine, started by New and stopped by
// Close (before the participant is deleted); it sleeps while no backlog
// waits. While one does, it waits for the peer's acknowledgements on the
// writer that refused (flushWait at a time) and tries that class again
// only once they are all in. Each refused write makes Cyclone send a
// heartbeat that asks the peer for acknowledgements, so a frozen peer
// would otherwise get one per wait; and retrying sooner does not pay:
// a flusher that retried after 100 µs (doubling while refused) cut dyad
// perf's 4 KiB throughput from about 25,000 to about 1,000 messages/s
// (docs/BENCHMARKS.md). (Cyclone logs nothing for a refusal between two
// processes; the "could not deliver data on time" errors of this
// package's tests come from in-process peers, whose full reader refuses
// a local delivery.) A peer that goes away is no longer waited for
// (nothing is unacknowledged without a matched reader), so the backlog
// then drains.
func (n *Net) flusher() {
	defer close(n.flushed)
	for {
		select {
		case <-n.stop:
			return
		case <-n.kick:
		}
		waitOn := transport.NumClasses // a class not to write until its peer has acknowledged
		for {
			stuck := transport.NumClasses
			for c := transport.Class(0); c < transport.NumClasses; c++ {
				refused := c == waitOn // its backlog stays: only the flusher drains backlogs
				if !refused {
					refused = !n.flush(c)
				}
				if refused && stuck == transport.NumClasses {
					stuck = c
				}
			}
			if stuck == transport.NumClasses {
				break
			}
			select {
			case <-n.stop:
				return
			default:
			}
			waitOn = transport.NumClasses
			if err := n.w[stuck].WaitForAcks(flushWait); errors.Is(err, dds.ErrTimeout) {
				waitOn = stuck
			}
		}
	}
}

// flush writes class c's backlog until it is empty (true) or the writer
// refuses again (false). A write that fails otherwise (the writer closed)
// drops the backlog: the transport is going away, and RELIABLE delivery
// ends with it. In a batching participant the backlog's samples are
// queued and go out together (Cyclone sends what was queued when a write
// is refused at the mark, and the deferred Flush the rest), not one
// datagram each.
func (n *Net) flush(c transport.Class) bool {
	o := &n.out[c]
	o.mu.Lock()
	defer o.mu.Unlock()
	write := n.w[c].Write
	if n.cfg.DDS.WriteBatch {
		write = n.w[c].Queue
		defer n.w[c].Flush()
	}
	for len(o.backlog) > 0 {
		q := &o.backlog[0]
		err := write(&q.h, q.payload)
		if errors.Is(err, dds.ErrTimeout) {
			return false
		}
		o.bytes -= len(q.payload)
		*q = queued{}
		o.backlog = o.backlog[1:]
	}
	o.backlog = nil // let the array go
	return true
}
