package transport

import (
	"errors"
	"time"
)

// Class picks the channel (a DDS topic) a message travels on. Each class is
// ordered on its own; there is no order across classes.
type Class uint8

const (
	// Log carries log entries from the primary to the replica.
	Log Class = iota
	// Ack carries the replica's acknowledgements to the primary.
	Ack
	// Heartbeat carries both nodes' heartbeats (sent from the apply loop).
	Heartbeat
	// Control carries forwarded requests, replies, hand-over and rejoin
	// negotiation.
	Control
	// Catchup carries bulk catch-up: old log entries and snapshot chunks.
	Catchup
	// NumClasses is the number of classes.
	NumClasses
)

func (c Class) String() string {
	switch c {
	case Log:
		return "log"
	case Ack:
		return "ack"
	case Heartbeat:
		return "heartbeat"
	case Control:
		return "control"
	case Catchup:
		return "catchup"
	}
	return "class?"
}

// Message is one unit of replication traffic. Cluster, From, Term and Index
// travel in the fixed envelope header so a receiver can filter before it
// decodes Payload; Kind says how to decode Payload. Their meaning belongs to
// the protocol, not to the transport.
type Message struct {
	Class Class
	// Version is the protocol version the message is written in (the
	// envelope's version field); 0 on send means VersionBase. The sender
	// picks it (internal/repl settles it, admit.go); a transport only lays out
	// the envelope by it.
	Version uint16
	Kind    uint16
	Flags   uint32
	Cluster uint64 // cluster ID; a transport drops messages of other clusters
	From    uint64 // sender node ID
	// To is the node the message is for; 0: the sender's peer (a pair has
	// only one). Transports deliver to every node and the receiver drops
	// what is addressed to another. Only envelopes of VersionAddressed
	// and later carry it: a message of an older version arrives with 0.
	To      uint64
	Term    uint64
	Index   uint64
	Payload []byte
	// Received is stamped by the receiving node on its own clock when the
	// message arrives (not sent on the wire), so that a busy owner still
	// times its peer by arrival, not by when it got round to the message.
	Received int64
	// Recv is the receiving transport's storage that the message and its
	// Payload live in, or nil when they belong to the handler outright
	// (see Release).
	Recv Releaser
}

// Releaser is storage a receiving transport lends with a message
// (Message.Recv): several messages of one batch may share it, and the
// transport reuses it once each of them is released.
type Releaser interface{ Release() }

// Release hands m back to the transport that received it: after it,
// neither m nor anything that aliases m.Payload may be used, because the
// transport reuses both for later messages. A handler that keeps a
// payload (or something decoded from it that aliases it) simply never
// releases that message: its storage is then left to the garbage
// collector, as if the handler owned it. Release once per message, on
// the message the transport handed over (not a copy of it); a message
// without Recv (sent, or from a transport that does not lend) ignores it.
func (m *Message) Release() {
	if r := m.Recv; r != nil {
		m.Recv = nil // before: once released, m may be another message
		r.Release()
	}
}

// Envelope versions: what a transport must know of Message.Version to lay
// out the envelope. The protocol's own versions (internal/repl) build on
// these; every version from VersionAddressed on carries To.
const (
	// VersionBase is the envelope without an addressee (dyad before
	// protocol versions; its version field was always 1).
	VersionBase uint16 = 1
	// VersionAddressed is the first envelope that carries To.
	VersionAddressed uint16 = 2
	// VersionCommitted is the version in which a replica shows only what
	// the commit index covers, so that a primary may send before its own
	// flush (internal/repl, ProtocolV3). Its envelope is
	// VersionAddressed's: a transport lays it out the same way.
	VersionCommitted uint16 = 3
	// VersionDurableCommit is the version in which a replica commits what
	// both nodes hold durably, from the durable index its primary
	// announces (internal/repl, ProtocolV4). Its envelope is
	// VersionAddressed's too.
	VersionDurableCommit uint16 = 4
)

// EffectiveVersion is m's version, 0 read as VersionBase.
func (m *Message) EffectiveVersion() uint16 {
	if m.Version == 0 {
		return VersionBase
	}
	return m.Version
}

// Handler receives messages. See the package doc for its constraints.
type Handler func(*Message)

// Transport moves Messages between the two nodes of a pair.
type Transport interface {
	// Start begins delivering received messages to h. Called once.
	Start(h Handler) error
	// Send queues m for reliable, ordered delivery within m.Class. It may
	// block under back-pressure and returns ErrTimeout if that lasts too
	// long. m.Payload is not retained after Send returns.
	Send(m *Message) error
	// PeerMatched reports whether the peer's endpoints are discovered for
	// every class (not a liveness signal: see internal/cluster).
	PeerMatched() bool
	// Close stops delivery (waiting for a running handler) and releases the
	// network resources. Idempotent.
	Close() error
}

// BatchHandler takes a batch of received messages, all of one Class and in
// order, without blocking. It returns false when it has no room for the
// whole batch: then it took none of it, and the transport keeps the batch,
// and everything after it in that class, until Resume. Accepted messages
// and their payloads belong to the handler, which may Release them
// (Message.Release) to let the transport reuse their storage; the slice
// stays the transport's and must not be kept after the handler returns.
type BatchHandler func([]*Message) bool

// Batcher is a Transport whose consumer pulls received messages in
// batches: the network thread only signals Ready (ddsnet: Cyclone's
// delivery thread, which must never wait for the consumer), and the
// consumer's Resume hands over what waits. Use StartBatch instead of Start.
type Batcher interface {
	Transport
	// StartBatch sets the handler Resume offers to. Called once, instead
	// of Start.
	StartBatch(h BatchHandler) error
	// Ready receives a value when messages may wait for Resume.
	Ready() <-chan struct{}
	// Resume offers h what waits, in batches, including what h refused
	// before. The consumer calls it whenever Ready fires and after it has
	// consumed messages (every refusal is followed by a Resume that sees
	// it, as long as the consumer calls Resume after consuming any
	// message); it is cheap when nothing waits. It runs h on the caller's
	// goroutine.
	Resume()
	// MaxBatch is the largest batch h is offered: a consumer with room
	// for MaxBatch messages accepts any batch.
	MaxBatch() int
}

// Waiter is a Batcher whose consumer may wait inside the transport
// instead of on Ready (ddsnet with Config.WaitSet: one cgo call waits in C
// on every class's reader and takes what arrived, with no call into Go on
// the network thread and no goroutine for the scheduler to wake).
//
// With Waits true, Ready never fires and the consumer calls Wait where it
// would block on Ready; its other sources of work (its own queues, timers,
// a stop) must call Wake after they queue something, and Wait's timeout
// bounds the wait by the consumer's next deadline. Wake is level-triggered:
// a Wake before a Wait makes that Wait return at once (woken), and Wakes
// before it coalesce, so "queue, then Wake" is never lost between the
// consumer's last look at its queues and its Wait.
type Waiter interface {
	Batcher
	// Waits reports whether the consumer must use Wait (fixed at
	// construction).
	Waits() bool
	// Wait blocks until messages arrive, Wake is called, the transport is
	// closed (ErrClosed) or timeout passes (negative: none), then offers
	// what arrived to the BatchHandler, on the caller's goroutine. woken
	// reports a Wake since the previous Wait. Only the consumer calls it,
	// and only after StartBatch.
	Wait(timeout time.Duration) (woken bool, err error)
	// Wake makes the current or next Wait return. Any goroutine, any
	// time, also after Close.
	Wake()
}

// BatchSender is a Transport that sends several messages in one call
// (ddsnet: the messages of one class share datagrams and one flush).
// SendAll sends ms in order, each as Send would, and returns how many it
// took and the error of the first one it did not take (the rest are not
// sent). Per-class order is Send's: a class's messages go out in the
// order of ms; across classes there is no order, as with Send.
type BatchSender interface {
	SendAll(ms []*Message) (int, error)
}

// SendAll sends ms through t's SendAll when t is a BatchSender, and with
// one Send each otherwise; it returns what BatchSender.SendAll returns.
func SendAll(t Transport, ms []*Message) (int, error) {
	if b, ok := t.(BatchSender); ok {
		return b.SendAll(ms)
	}
	for i, m := range ms {
		if err := t.Send(m); err != nil {
			return i, err
		}
	}
	return len(ms), nil
}

var (
	// ErrTimeout: Send was blocked by back-pressure for too long; the
	// message was not queued.
	ErrTimeout = errors.New("transport: send timed out")
	// ErrClosed: the transport is closed.
	ErrClosed = errors.New("transport: closed")
)
