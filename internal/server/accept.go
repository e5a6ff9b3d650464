package server

import (
	"sync/atomic"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// The driver's half of what a node admits and the protocol version it
// speaks. The rules (addressee, sender, version, ack range, negotiation)
// are the core's (repl.Node.Admit, internal/repl/admit.go); here the wire's
// To and Version are mapped to and from the core's messages, what the core
// reports is counted and logged, and what the driver sends itself (forwarded
// writes, replies, catch-up answers, snapshot chunks, member records) is
// written in the version the core settled on.

// refusalReasons lists every reason label of
// dyad_replication_refused_messages_total, for its series.
func refusalReasons() []string {
	out := make([]string, 0, repl.NumRefusals)
	for r := repl.Refusal(0); r < repl.NumRefusals; r++ {
		out = append(out, r.String())
	}
	return out
}

// setProtocol publishes what the core now speaks with the peer (at a start
// of the core, and from a Ready that changed it): for the stamping
// transport and PairStatus, in dyad_peer_protocol_version, and in the log
// (once per change, as the core reports only changes). Apply loop (or
// before it starts).
func (s *Server) setProtocol(st repl.ProtocolStatus) {
	old := s.repl.proto.Swap(&st)
	s.m.PeerProtocol.Set(float64(st.Version))
	switch {
	case st.Refused != "" && old.Refused != st.Refused:
		s.log.Error("refusing the peer: it speaks no protocol version this node speaks; upgrade or roll back one node (docs/OPERATIONS.md, version skew)",
			"why", st.Refused, "own-versions", st.Own.String())
	case st.Version != 0 && (old.Version != st.Version || old.Peer != st.Peer):
		s.log.Info("peer protocol", "version", st.Version, "peer-versions", st.Peer.String(), "own-versions", st.Own.String())
	}
}

// countRefusals adds the core's refusals to the metrics.
func (s *Server) countRefusals(c *repl.Counters) {
	for r, n := range c.Refused {
		if n != 0 {
			s.m.Refused.WithLabelValues(repl.Refusal(r).String()).Add(float64(n))
		}
	}
	s.m.ProtocolMismatch.Add(float64(c.ProtocolMismatch))
}

// protocolStatus is the protocol part of PairStatus: the range this node
// speaks, the version the pair speaks (0: none yet), and why the peer is
// refused ("" if it is not).
func (s *Server) protocolStatus() (own string, speaks uint16, refused string) {
	st := s.repl.proto.Load()
	return st.Own.String(), st.Version, st.Refused
}

// stampedTransport writes what names no version in the version the pair
// speaks, and addresses what names no addressee to the peer. The core's
// own messages come stamped (repl.Node stamps what it sends, heartbeats
// with this node's range in their flags); the rest is the driver's.
type stampedTransport struct {
	transport.Transport
	proto *atomic.Pointer[repl.ProtocolStatus]
	peer  *atomic.Uint64
}

// stamp wraps tr; a batching tr stays one (inbox.go).
func (r *replState) stamp(tr transport.Transport) transport.Transport {
	st := &stampedTransport{Transport: tr, proto: &r.proto, peer: &r.peerID}
	if b, ok := tr.(transport.Batcher); ok {
		return stampedBatcher{Batcher: b, st: st}
	}
	return st
}

// Send implements transport.Transport.
func (t *stampedTransport) Send(m *transport.Message) error {
	t.fill(m)
	return t.Transport.Send(m)
}

// SendAll implements transport.BatchSender: it stamps every message, then
// sends them with one SendAll of the wrapped transport (one Send each if
// it has none).
func (t *stampedTransport) SendAll(ms []*transport.Message) (int, error) {
	for _, m := range ms {
		t.fill(m)
	}
	return transport.SendAll(t.Transport, ms)
}

// fill stamps m with the version the pair speaks and the peer, where m
// names neither.
func (t *stampedTransport) fill(m *transport.Message) {
	if m.Version == 0 {
		m.Version = t.proto.Load().Send
	}
	if m.To == 0 {
		m.To = t.peer.Load()
	}
}

// stampedBatcher is stampedTransport over a transport.Batcher.
type stampedBatcher struct {
	transport.Batcher
	st *stampedTransport
}

// Send implements transport.Transport.
func (t stampedBatcher) Send(m *transport.Message) error { return t.st.Send(m) }

// The loop's turn goes to the transport in one SendAll through every
// wrapper (flushSends), batching or not.
var (
	_ transport.BatchSender = (*stampedTransport)(nil)
	_ transport.BatchSender = stampedBatcher{}
	_ transport.BatchSender = (*meteredTransport)(nil)
	_ transport.BatchSender = (*meteredBatcher)(nil)
)

// SendAll implements transport.BatchSender.
func (t stampedBatcher) SendAll(ms []*transport.Message) (int, error) { return t.st.SendAll(ms) }
