package ddsnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// Config configures a Net.
type Config struct {
	DDS     dds.Config
	Cluster uint64 // messages of other clusters are dropped
	Node    uint64 // this node's ID; its own samples are dropped
	// Prefix of the topic names. Default "dyad".
	Prefix string
	// SendTimeout bounds how long Send blocks at the writer's high-water
	// mark on the Catchup class (bulk transfer, sent off the replication
	// loop). Default 2s.
	SendTimeout time.Duration
	// Backlog bounds, per class, the payload bytes that Send queues behind
	// a writer at its high-water mark on every class but Catchup (those
	// Sends never wait: the replication loop makes them). Default the
	// writers' high-water mark (dds.Config.WhcHigh).
	Backlog int
	// ReaderMaxSamples bounds each reader's history. Default 4096.
	ReaderMaxSamples int
	// Batch is the most messages of one class handed over at once
	// (MaxBatch). Default 256.
	Batch int
	// OnNotify, if set, is called on Cyclone's delivery thread each time
	// a reader of class c signals the consumer (StartBatch only), before
	// the consumer is woken; it must be quick. With WaitSet it is called
	// instead on the consumer's goroutine, once per class a Wait took
	// from, right after the Wait's C call returned. Instrumentation: dyad
	// perf times the layers of a round trip with it.
	OnNotify func(c transport.Class)
	// WaitSet (StartBatch only; dyad serve sets it unless
	// --dds-waitset=false) makes the consumer wait in C instead of on
	// Ready: Wait blocks in one cgo call
	// on a waitset over every class's reader and a guard condition, takes
	// what arrived and offers it, on the consumer's goroutine; Cyclone's
	// thread calls no Go code and Ready never fires. Events of the
	// consumer's own (proposals, timers) must call Wake; Close wakes it
	// too (waitset.go).
	WaitSet bool
	// OnWrite, if set, is called on Send's goroutine after each of Send's
	// own writes (not the flusher's) of class c, with what the write
	// measured (dds.Writer.WriteStamped), unless StampWrites turned it
	// off. Instrumentation: dyad perf splits Send's time with it.
	OnWrite func(c transport.Class, st dds.WriteStamp)
}

// Net is one node's DDS transport.
type Net struct {
	cfg Config
	p   *dds.Participant
	w   [transport.NumClasses]*dds.Writer
	r   [transport.NumClasses]*dds.Reader

	// h is the consumer's handler, set once by StartBatch before any
	// reader exists. in[c] is class c's hand-over state.
	h  transport.BatchHandler
	in [transport.NumClasses]inlet
	// Which classes Resume pumps, one bit per class (1<<c). notified:
	// Cyclone signalled the class's reader since the last Resume (set by
	// the notification only, cleared by Resume before it pumps). retry:
	// the class may hold a refused batch; set before each offer and
	// cleared after an accepted one, both under the class's inlet.mu, so
	// that a refusal is always seen by a later Resume (see pump). Two
	// masks, because clearing a bit after an accepted offer must not
	// lose a notification that arrived meanwhile. Resume pumps only
	// these classes: a take of a reader with nothing waiting is a cgo
	// call and a lock for nothing. ready wakes the consumer when a
	// notification sets notified (StartBatch).
	notified, retry atomic.Uint32
	ready           chan struct{}
	// ws is the consumer's waitset (Config.WaitSet), set by StartBatch
	// before it returns.
	ws atomic.Pointer[dds.WaitSet]

	// out[c] is class c's send side (send.go). The flusher goroutine
	// writes backlogs out: kick wakes it, stop ends it, flushed is closed
	// when it has.
	out     [transport.NumClasses]outlet
	kick    chan struct{}
	stop    chan struct{}
	flushed chan struct{}

	// unstamped turns Config.OnWrite off (StampWrites).
	unstamped atomic.Bool

	// Counters (Stats).
	sendTimeouts atomic.Uint64
	sendBlocked  atomic.Uint64
	refused      atomic.Uint64
	batches      atomic.Uint64
	messages     atomic.Uint64
	takes        atomic.Uint64

	mu      sync.Mutex
	started bool
	closed  bool

	// Samples the readers dropped: of another cluster, this node's own,
	// and envelopes too short for their version's header.
	droppedForeign, droppedOwn, droppedShort atomic.Uint64

	// sendBufs recycles the buffers Send lays an addressed envelope's
	// payload out in (*[]byte).
	sendBufs sync.Pool
}

// addrBytes is the size of the addressee (Message.To) that envelopes of
// transport.VersionAddressed and later carry, big-endian, before the
// message's payload in the sample's payload sequence. The IDL type stays
// as it is, so that every version's samples match on every topic and a
// node can read the version of a message it cannot decode.
const addrBytes = 8

// Dropped reports how many received samples were dropped because they
// belong to another cluster, and because this node sent them. Counted
// before the drop, so a test can tell "dropped" from "not arrived yet".
func (n *Net) Dropped() (otherCluster, own uint64) {
	return n.droppedForeign.Load(), n.droppedOwn.Load()
}

// DroppedShort reports how many received samples were dropped because
// their payload was too short for their envelope version's addressee.
func (n *Net) DroppedShort() uint64 { return n.droppedShort.Load() }

// inlet is one class's hand-over. mu is held across a take from the
// class's reader and the offer of what it took, so that batches reach the
// consumer in the writer's order whichever thread pumps (Cyclone's, on
// arrival, or the consumer's, in Resume). It is held only for a take, a
// copy and a non-blocking offer, never while waiting for the consumer.
type inlet struct {
	r    atomic.Pointer[dds.Reader] // nil until NewReader returned
	mu   sync.Mutex
	held []*transport.Message // a batch the consumer refused: offered first
	// The batch being taken (collect, build), under mu: hdrs and offs
	// are scratch, reused; pend is the storage the payloads are copied
	// into and the messages built in, lent to the consumer with the batch
	// (rxbuf.go), nil until the batch's first sample; bufs pools the
	// class's released ones.
	hdrs []dds.Header
	offs []int
	pend *rxBuf
	bufs sync.Pool
	// pendHint is the previous batch's payload bytes (at most
	// maxPendHint): a new buffer starts with that room, so that a steady
	// stream is copied once instead of regrown from nothing per batch.
	pendHint int
}

// maxPendHint bounds inlet.pendHint, so that one batch of large entries
// does not make every later batch reserve as much.
const maxPendHint = 1 << 20

// Stats are a Net's counters since New.
type Stats struct {
	SendTimeouts uint64 // Sends refused: their backlog was full, or (Catchup) they waited SendTimeout
	SendBlocked  uint64 // Sends queued behind a writer at its high-water mark
	Refused      uint64 // batches the consumer refused (its queue was full)
	Batches      uint64 // batches handed over
	Messages     uint64 // messages handed over
	Takes        uint64 // takes from the readers (cgo calls), empty ones included
}

// Collectors are the counters as Prometheus series, for the node's
// registry.
func (n *Net) Collectors() []prometheus.Collector {
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		counter("dyad_dds_send_timeouts_total", "Replication sends refused because the DDS writer stayed at its high-water mark: the queue behind it was full, or a catch-up send waited SendTimeout (the message was not sent; entries are caught up from the log).", &n.sendTimeouts),
		counter("dyad_replication_send_blocked_total", "Replication sends that found the DDS writer at its high-water mark (the peer not acknowledging) and were queued behind it instead of blocking the replication loop.", &n.sendBlocked),
		counter("dyad_dds_receive_refused_batches_total", "Received batches the replication loop's full inbox refused; they waited in DDS and were offered again.", &n.refused),
		counter("dyad_dds_receive_batches_total", "Received batches handed to the replication loop.", &n.batches),
		counter("dyad_dds_receive_messages_total", "Received messages handed to the replication loop.", &n.messages),
	}
}

// Stats returns the counters.
func (n *Net) Stats() Stats {
	return Stats{SendTimeouts: n.sendTimeouts.Load(), SendBlocked: n.sendBlocked.Load(), Refused: n.refused.Load(), Batches: n.batches.Load(), Messages: n.messages.Load(), Takes: n.takes.Load()}
}

var (
	_ transport.Batcher     = (*Net)(nil)
	_ transport.BatchSender = (*Net)(nil)
)

// TopicName is the DDS topic of class c.
func TopicName(prefix string, c transport.Class) string { return prefix + "_" + c.String() }

// bestEffort reports whether class c travels BEST_EFFORT. Heartbeats do:
// each one restates the sender's whole state, so a lost one costs nothing,
// while a RELIABLE heartbeat topic stops delivering at the first lost frame
// for as long as the receiver's acknowledgements cannot reach the sender.
// On a link that fails one way that would make the side that still
// receives deaf too, and both would lead alone (docs/ARCHITECTURE.md,
// "One-way link failures"). Every other class is RELIABLE.
func bestEffort(c transport.Class) bool { return c == transport.Heartbeat }

// writerQoS is the writer QoS of class c: a BEST_EFFORT writer keeps only
// its newest sample (nothing waits for acknowledgement). Only Catchup's
// writer waits at the high-water mark (SendTimeout); every other one
// refuses at once (the shortest max_blocking_time Cyclone takes) and Send
// queues the sample behind it (send.go).
func writerQoS(c transport.Class, cfg Config) dds.QoS {
	wait := time.Nanosecond
	if blocking(c) {
		wait = cfg.SendTimeout
	}
	if bestEffort(c) {
		return dds.QoS{BestEffort: true, HistoryDepth: 1, MaxBlockingTime: wait}
	}
	return dds.QoS{MaxBlockingTime: wait}
}

// New creates the participant and the writers; Start adds the readers.
func New(cfg Config) (*Net, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "dyad"
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 2 * time.Second
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = int(cfg.DDS.WhcHigh)
		if cfg.Backlog <= 0 {
			cfg.Backlog = dds.DefaultWhcHigh
		}
	}
	if cfg.ReaderMaxSamples <= 0 {
		cfg.ReaderMaxSamples = 4096
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	p, err := dds.NewParticipant(cfg.DDS)
	if err != nil {
		return nil, err
	}
	n := &Net{cfg: cfg, p: p, ready: make(chan struct{}, 1),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), flushed: make(chan struct{})}
	for c := range n.in {
		n.in[c].bufs.New = newRxBuf(&n.in[c].bufs)
	}
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		w, err := p.NewWriter(TopicName(cfg.Prefix, c), writerQoS(c, cfg))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("ddsnet: writer %s: %w", c, err)
		}
		n.w[c] = w
	}
	go n.flusher()
	return n, nil
}

// Start implements transport.Transport through StartBatch: h runs on
// Cyclone's delivery thread and every batch is accepted, so a handler that
// blocks stalls delivery on every topic of the participant. Replication uses
// StartBatch.
func (n *Net) Start(h transport.Handler) error {
	return n.start(func(ms []*transport.Message) bool {
		for _, m := range ms {
			h(m)
		}
		return true
	}, false)
}

// MaxBatch implements transport.Batcher.
func (n *Net) MaxBatch() int { return n.cfg.Batch }

// StartBatch implements transport.Batcher: one ReceiveNotify reader per
// class; on arrival Cyclone's delivery thread only wakes the consumer
// (Ready), once until the consumer takes, and the consumer's Resume takes
// the waiting messages of the classes that signalled (or hold a refused
// batch) and offers them to h (pump).
func (n *Net) StartBatch(h transport.BatchHandler) error { return n.start(h, true) }

// Ready implements transport.Batcher.
func (n *Net) Ready() <-chan struct{} { return n.ready }

// start creates the readers. pull: notifications wake the consumer, who
// pumps in Resume; otherwise Cyclone's thread pumps (h runs there).
func (n *Net) start(h transport.BatchHandler, pull bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return transport.ErrClosed
	}
	if n.started {
		return errors.New("ddsnet: started twice")
	}
	n.started = true
	n.h = h
	if pull && n.cfg.WaitSet {
		return n.startWaitSet()
	}
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		class := c
		r, err := n.p.NewReader(TopicName(n.cfg.Prefix, c), dds.ReaderOptions{
			QoS:   dds.QoS{MaxSamples: n.cfg.ReaderMaxSamples, BestEffort: bestEffort(c)},
			Mode:  dds.ReceiveNotify,
			Batch: n.cfg.Batch,
			Notify: func() {
				if !pull {
					n.pump(class)
					return
				}
				if f := n.cfg.OnNotify; f != nil {
					f(class)
				}
				n.notified.Or(1 << class)
				select {
				case n.ready <- struct{}{}:
				default: // already signalled
				}
			},
		})
		if err != nil {
			return fmt.Errorf("ddsnet: reader %s: %w", c, err)
		}
		n.r[c] = r
		n.in[c].r.Store(r)
		n.pump(c) // what arrived before the reader was stored
	}
	return nil
}

// Resume implements transport.Batcher: it pumps, on the caller's
// goroutine, the classes notified since the last Resume and those that may
// hold a refused batch, and no other.
func (n *Net) Resume() {
	due := n.notified.Swap(0) | n.retry.Load()
	for c := transport.Class(0); due != 0; c++ {
		if due&(1<<c) != 0 {
			due &^= 1 << c
			n.pump(c)
		}
	}
}

// pump hands class c's waiting messages to the consumer, a batch at a
// time, until the reader is empty or the consumer refuses one; the refused
// batch is held and offered first next time, and what follows it stays in
// the reader's history (bounded by ReaderMaxSamples: the peer's writer then
// blocks, never Cyclone's thread). It runs in Resume, or on Cyclone's
// delivery thread after Start.
//
// The class's retry bit is set before each offer, not after a refusal: the
// refusal found the consumer's queue full, so the consumer has messages
// left and calls Resume after consuming one, which is after the bit was
// set. An accepted offer clears it (nothing is held); a notification that
// arrives meanwhile sets the other mask.
func (n *Net) pump(c transport.Class) {
	in := &n.in[c]
	r := in.r.Load()
	if r == nil {
		return // StartBatch pumps once the reader is stored
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if ws := n.ws.Load(); ws != nil {
		n.offerHeld(ws, in, c, r) // Wait takes; Resume only re-offers
		return
	}
	for {
		batch := in.held
		last := false
		if batch == nil {
			var taken int
			batch, taken = n.take(in, c, r)
			// A short batch emptied the reader: what arrives later
			// notifies again (the listener waits for mu), so stop here
			// rather than pay another take to find nothing.
			last = taken < n.cfg.Batch
			if len(batch) == 0 {
				if last {
					return
				}
				continue // all dropped (other cluster, own, no data)
			}
		}
		n.retry.Or(1 << c)
		if !n.h(batch) {
			in.held = batch
			n.refused.Add(1)
			return
		}
		n.retry.And(^uint32(1 << c))
		in.held = nil
		n.batches.Add(1)
		n.messages.Add(uint64(len(batch)))
		if last {
			return
		}
	}
}

// take takes one batch of class c: the messages, and how many samples
// were taken (0: the reader is empty). Samples of another cluster and the
// node's own are dropped. Payloads are copied out of Cyclone's loan into
// one buffer per batch, which the messages are built in too (rxbuf.go).
func (n *Net) take(in *inlet, c transport.Class, r *dds.Reader) ([]*transport.Message, int) {
	n.takes.Add(1)
	taken, err := r.Take(func(h *dds.Header, p []byte) { n.collect(in, h, p) })
	batch := n.build(in, c)
	if err != nil {
		return nil, taken
	}
	return batch, taken
}

// collect adds one taken sample to in's pending batch (in.hdrs, in.offs,
// in.pend), or drops it: of another cluster, the node's own, or too short
// for its version's addressee. p is copied.
func (n *Net) collect(in *inlet, h *dds.Header, p []byte) {
	if h.Cluster != n.cfg.Cluster {
		n.droppedForeign.Add(1)
		return
	}
	if h.Node == n.cfg.Node {
		n.droppedOwn.Add(1)
		return
	}
	if h.Version >= transport.VersionAddressed && len(p) < addrBytes {
		n.droppedShort.Add(1)
		return
	}
	pb := in.pend
	if pb == nil {
		pb = in.bufs.Get().(*rxBuf)
		in.pend = pb
	}
	if len(pb.b) == 0 && cap(pb.b) < len(p) {
		// A fresh buffer, or a pooled one too small for even this
		// sample: room for a batch like the previous one. A pooled one
		// keeps its room; append regrows it if this batch is larger.
		pb.b = make([]byte, 0, max(in.pendHint, len(p)))
	}
	in.hdrs = append(in.hdrs, *h)
	in.offs = append(in.offs, len(pb.b))
	pb.b = append(pb.b, p...) // a larger batch than the room regrows once
}

// build makes the messages of in's pending batch (nil if none) in its
// rxBuf, which the messages then hold (transport.Message.Recv), and starts
// a new batch. An rxBuf that received nothing stays for the next one.
func (n *Net) build(in *inlet, c transport.Class) []*transport.Message {
	hdrs, offs := in.hdrs, in.offs
	if len(hdrs) == 0 {
		return nil
	}
	pb := in.pend
	in.hdrs, in.offs, in.pend = hdrs[:0], offs[:0], nil
	buf := pb.b
	in.pendHint = min(len(buf), maxPendHint)
	if cap(pb.msgs) < len(hdrs) {
		// Exactly this batch's: a kept batch (never pooled) costs no
		// more than it did, and a pooled one grows to its class's
		// largest batch.
		pb.msgs = make([]transport.Message, len(hdrs))
		pb.ptrs = make([]*transport.Message, len(hdrs))
	}
	msgs, out := pb.msgs[:len(hdrs)], pb.ptrs[:len(hdrs)]
	pb.refs.Store(int32(len(hdrs)))
	for i, h := range hdrs {
		end := len(buf)
		if i+1 < len(offs) {
			end = offs[i+1]
		}
		start := offs[i]
		var to uint64
		if h.Version >= transport.VersionAddressed {
			to = binary.BigEndian.Uint64(buf[start:])
			start += addrBytes
		}
		msgs[i] = transport.Message{
			Class: c, Version: h.Version, Kind: h.Kind, Flags: h.Flags, Cluster: h.Cluster, From: h.Node, To: to,
			Term: h.Term, Index: h.Index, Payload: buf[start:end:end], Recv: pb,
		}
		out[i] = &msgs[i]
	}
	return out
}

// PeerMatched implements transport.Transport.
func (n *Net) PeerMatched() bool {
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		if k, err := n.w[c].Matched(); err != nil || k < 1 {
			return false
		}
		if r := n.r[c]; r != nil {
			if k, err := r.Matched(); err != nil || k < 1 {
				return false
			}
		}
	}
	return true
}

// Close implements transport.Transport: it deletes the participant, so the
// peer sees this node leave at once.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	close(n.stop)
	<-n.flushed
	return n.p.Close()
}
