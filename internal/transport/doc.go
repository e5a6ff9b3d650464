// Package transport is the seam between dyad's replication protocol
// (internal/repl, internal/cluster) and the network that carries it.
//
// It owns the Message, the Transport interface and Mem, an in-memory
// transport for tests that can drop, delay and partition traffic. The DDS
// implementation lives in internal/ddsnet, so that this package, and every
// protocol package above it, builds and tests without cgo.
//
// A Transport gives these guarantees, which the protocol relies on:
//   - Messages of one Class from one sender arrive in send order, without
//     duplicates; a Class may lose its tail when the peer goes away (RELIABLE
//     delivery ends with the peer's liveliness), never a message in the
//     middle while the peer stays matched. The exception is Heartbeat:
//     heartbeats may be lost, and (rarely) overtake one another; each
//     restates the sender's whole state, and the receiver ignores one older
//     than the newest it has.
//   - Send never drops silently: it returns an error (ErrTimeout under
//     sustained back-pressure, ErrClosed after Close) or the message is
//     queued for reliable delivery.
//   - Every other node gets every message, as DDS delivers a topic's
//     samples to every reader; Message.To names the node it is for, and the
//     receiver drops what is addressed to another. To travels only in
//     envelopes of VersionAddressed and later.
//   - The handler runs on the transport's receive goroutine(s), one at a
//     time per Class; it must be quick and must not call Close. The Message
//     and its Payload belong to the handler once delivered, until the
//     handler calls Message.Release: a transport that lends its receive
//     storage (ddsnet) reuses it once every message in it is released,
//     so a handler releases a message only when nothing it keeps aliases
//     the payload, and keeps (never releases) the rest.
package transport
