package server

import (
	"fmt"
	"sync/atomic"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// Reasons accept refuses a message for (the reason label of
// dyad_replication_refused_messages_total). A stale catch-up answer or
// snapshot chunk is counted in dyad_stale_catchup_answers_total instead.
const (
	refusalAddressee = "addressee" // addressed to another node
	refusalSender    = "sender"    // from a node other than the peer
	refusalVersion   = "version"   // written in a version this node does not speak
	refusalAck       = "ack"       // acknowledges entries this node never sent
)

// refusalReasons lists every reason, for the metric's series.
func refusalReasons() []string {
	return []string{refusalAddressee, refusalSender, refusalVersion, refusalAck}
}

// acceptState is what accept keeps about the peer: who it is and which
// protocol versions it speaks (repl.Negotiate). The apply loop owns the
// plain fields; the atomics are read by whoever sends (the stamping
// transport) and by PairStatus.
type acceptState struct {
	// own is the range this node speaks: the build's, its minimum
	// raised by ReplConfig.MinProtocol.
	own repl.ProtocolRange
	// peerRange is the range the peer's newest accepted heartbeat
	// advertised (valid only while ranged).
	peerRange repl.ProtocolRange
	ranged    bool

	// peer is the node messages are accepted from: the configured peer,
	// else the sender of the first heartbeat heard (0: none yet).
	peer atomic.Uint64
	// speak is the version sends are written in: the highest both nodes
	// speak once the peer's range is known, else own.Min. hbSpeak is
	// heartbeats' version: the lowest both speak, so that a peer that
	// restarts as an older build still reads them until it is heard.
	speak, hbSpeak atomic.Uint32
	// refusal says why the peer is refused (nil: it is not), for
	// PairStatus.
	refusal atomic.Pointer[string]
}

// init sets the range this node speaks; minimum 0 keeps the build's.
func (a *acceptState) init(minimum uint16) {
	a.own = repl.Supported()
	if minimum > a.own.Min {
		a.own.Min = min(minimum, a.own.Max)
	}
	a.forgetRange()
}

// forgetRange goes back to speaking own.Min until the peer is heard
// again: a peer that stops may return as another build.
func (a *acceptState) forgetRange() {
	a.ranged = false
	a.speak.Store(uint32(a.own.Min))
	a.hbSpeak.Store(uint32(a.own.Min))
}

// accept decides whether onMessage acts on m at all, before anything of it
// is decoded. It drops, and counts, a message addressed to another node,
// one from a node other than the peer, one in a protocol version this node
// does not speak, an ack of entries this node never sent, and a catch-up
// answer or snapshot chunk that answers no outstanding request (a late
// one may describe a log or state this node has left since). The peer's
// heartbeats also settle the protocol version (negotiate). Apply loop.
func (s *Server) accept(m *transport.Message) bool {
	r := s.repl
	switch {
	case m.To != 0 && m.To != s.memberID:
		return s.refuse(refusalAddressee)
	case !s.fromPeer(m):
		return s.refuse(refusalSender)
	case m.Kind == repl.KindHeartbeat && !s.negotiate(m):
		return false
	case !r.acc.own.Speaks(m.EffectiveVersion()):
		return s.refuse(refusalVersion)
	}
	switch m.Kind {
	case repl.KindAck:
		// A replica holds at most what this node sent, and this node
		// sends only what it applied: a higher ack would count entries
		// sent later as acknowledged before the replica has them.
		if m.Index > s.appliedIdx {
			return s.refuse(refusalAck)
		}
	case repl.KindCatchup:
		if r.catchupReq == 0 || m.Term < r.catchupFirst || m.Term > r.catchupReq {
			s.m.StaleAnswers.Inc()
			return false
		}
	case repl.KindSnapChunk:
		// The first chunk of an answer to the outstanding request, or
		// the next of the snapshot being received.
		first := r.snap == nil && r.snapReq != 0 && m.Term >= r.snapFirst && m.Term <= r.snapReq && m.Index == 0
		if !first && (r.snap == nil || m.Term != r.snap.id) {
			s.m.StaleAnswers.Inc()
			return false
		}
	case repl.KindLeaving:
		r.acc.forgetRange()
	}
	return true
}

func (s *Server) refuse(reason string) bool {
	s.m.Refused.WithLabelValues(reason).Inc()
	return false
}

// fromPeer reports whether m comes from the peer: the configured one, or
// else the first node heard from in a heartbeat (in-memory test pairs
// configure none).
func (s *Server) fromPeer(m *transport.Message) bool {
	a := &s.repl.acc
	want := a.peer.Load()
	if want == 0 {
		switch {
		case s.cfg.Peer != nil && s.cfg.Peer.ID != 0:
			want = s.cfg.Peer.ID
		case m.Kind == repl.KindHeartbeat:
			want = m.From
		default:
			return false
		}
		a.peer.Store(want)
	}
	return m.From == want
}

// negotiate reads the range of protocol versions the peer's heartbeat m
// advertises (whatever version m is written in) and settles the version
// the pair speaks. It refuses a peer with which this node shares no
// version: it logs why (once per change), counts every refused heartbeat,
// publishes the refusal to PairStatus, and holds this node off taking the
// lead alone, since the peer is alive even though it is not heard (the
// apply loop clears holdOff at the next heartbeat it accepts).
func (s *Server) negotiate(m *transport.Message) bool {
	r := s.repl
	a := &r.acc
	pr := repl.HeartbeatProtocols(m.Flags)
	v, ok := repl.Negotiate(a.own, pr)
	if !ok {
		s.m.ProtocolMismatch.Inc()
		s.m.PeerProtocol.Set(0)
		why := fmt.Sprintf("peer %x speaks protocol versions %v, this node %v: no common version", m.From, pr, a.own)
		if old := a.refusal.Load(); old == nil || *old != why {
			s.log.Error("refusing the peer: it speaks no protocol version this node speaks; upgrade or roll back one node (docs/OPERATIONS.md, version skew)",
				"peer", fmt.Sprintf("%x", m.From), "peer-versions", pr.String(), "own-versions", a.own.String())
			a.refusal.Store(&why)
		}
		a.forgetRange()
		r.holdOff = "the peer runs a build that speaks no protocol version this node speaks"
		return false
	}
	if !a.ranged || a.peerRange != pr || a.refusal.Load() != nil {
		s.log.Info("peer protocol", "version", v, "peer-versions", pr.String(), "own-versions", a.own.String())
	}
	a.refusal.Store(nil)
	a.peerRange, a.ranged = pr, true
	a.speak.Store(uint32(v))
	a.hbSpeak.Store(uint32(max(a.own.Min, pr.Min)))
	s.m.PeerProtocol.Set(float64(v))
	return true
}

// stampedTransport writes every message in the version the pair speaks,
// heartbeats with this node's range in their flags, and addresses what
// names no addressee to the peer.
type stampedTransport struct {
	transport.Transport
	a *acceptState
}

// stamp wraps tr; a batching tr stays one (inbox.go).
func (a *acceptState) stamp(tr transport.Transport) transport.Transport {
	st := &stampedTransport{Transport: tr, a: a}
	if b, ok := tr.(transport.Batcher); ok {
		return stampedBatcher{Batcher: b, st: st}
	}
	return st
}

// Send implements transport.Transport.
func (t *stampedTransport) Send(m *transport.Message) error {
	if m.Class == transport.Heartbeat {
		m.Version = uint16(t.a.hbSpeak.Load())
		m.Flags = t.a.own.Flags()
	} else {
		m.Version = uint16(t.a.speak.Load())
	}
	if m.To == 0 {
		m.To = t.a.peer.Load()
	}
	return t.Transport.Send(m)
}

// stampedBatcher is stampedTransport over a transport.Batcher.
type stampedBatcher struct {
	transport.Batcher
	st *stampedTransport
}

// Send implements transport.Transport.
func (t stampedBatcher) Send(m *transport.Message) error { return t.st.Send(m) }

// protocolStatus is the protocol part of PairStatus: the range this node
// speaks, the version the pair speaks (0: none yet), and why the peer is
// refused ("" if it is not).
func (s *Server) protocolStatus() (own string, speaks uint16, refused string) {
	a := &s.repl.acc
	if p := a.refusal.Load(); p != nil {
		return a.own.String(), 0, *p
	}
	return a.own.String(), uint16(gaugeValue(s.m.PeerProtocol)), ""
}
