package repl

import "fmt"

// What a node acts on at all, and the protocol version it speaks with its
// peer. Every received message passes Admit before any rule of the core
// reads it: this is the one place for the rules on who may speak to a node
// and how.

// Refusal is why Admit dropped a received message (counted in
// Counters.Refused; the driver's metric labels them by String).
type Refusal uint8

const (
	// RefusedAddressee: addressed to another node (transports deliver
	// every message to every node; the receiver filters).
	RefusedAddressee Refusal = iota
	// RefusedSender: from a party other than the peer.
	RefusedSender
	// RefusedVersion: written in a protocol version this node does not
	// speak.
	RefusedVersion
	// RefusedAck: acknowledges entries this node never sent. A replica
	// holds at most what its leader sent, and a leader sends only what it
	// logged: a higher ack would count entries logged later as held by
	// the replica before it has them.
	RefusedAck
	// NumRefusals is the number of reasons.
	NumRefusals
)

func (r Refusal) String() string {
	switch r {
	case RefusedAddressee:
		return "addressee"
	case RefusedSender:
		return "sender"
	case RefusedVersion:
		return "version"
	case RefusedAck:
		return "ack"
	}
	return "refusal?"
}

// ProtocolStatus is what a node speaks with its peer (Node.Protocol;
// Ready.Protocol when it changed).
type ProtocolStatus struct {
	// Own is the range this node speaks: the build's, its minimum raised
	// by Config.MinProtocol.
	Own ProtocolRange
	// Peer is the range the peer's newest admitted heartbeat advertised
	// (zero: not known since the start, the peer's leaving or a refusal).
	Peer ProtocolRange
	// Version is the version the pair speaks, the highest both speak (0:
	// the peer's range is not known). Everything but heartbeats is written
	// in Send.
	Version uint16
	// Send is the version of what this node sends other than heartbeats:
	// Version, else Own.Min. Heartbeat the version of its heartbeats: the
	// lowest both speak, so that a peer that restarts as an older build
	// still reads them until it is heard; else Own.Min.
	Send, Heartbeat uint16
	// Refused says why the peer is refused ("": it is not): it speaks no
	// version this node speaks.
	Refused string
}

// protoState is the core's protocol version state.
type protoState struct {
	own     ProtocolRange
	peer    ProtocolRange // valid only while ranged
	ranged  bool
	refused string
}

// Protocol returns what this node speaks with its peer.
func (n *Node) Protocol() ProtocolStatus {
	p := &n.proto
	st := ProtocolStatus{Own: p.own, Send: p.own.Min, Heartbeat: p.own.Min, Refused: p.refused}
	if p.ranged {
		st.Peer = p.peer
		st.Version, _ = Negotiate(p.own, p.peer)
		st.Send, st.Heartbeat = st.Version, max(p.own.Min, p.peer.Min)
	}
	return st
}

// SendsBeforeFlush reports whether a leader may send the batch it proposes
// before its own flush of it (the driver's choice of write path): only
// when the batch goes out in ProtocolV3 or later. A replica that admits
// such a message shows only what the commit index covers, and the commit
// index waits for the leader's Persisted, so an entry that a leader's
// crash before its flush takes back was never shown anywhere. A replica of
// an older version shows what it persists: the leader flushes first. One
// that speaks no version from ProtocolV3 on refuses the message
// (RefusedVersion) should it meet one, say after restarting as an older
// build before this node heard of it.
func (n *Node) SendsBeforeFlush() bool { return n.Protocol().Send >= ProtocolV3 }

// durableCommit reports whether the pair speaks ProtocolV4 or later: the
// replica commits what both nodes hold durably (commitDurable), and the
// leader announces its durable index as it moves instead of its commit
// index. It takes the version both nodes settled on: a peer that
// advertises ProtocolV4 is a build whose leader reads wait for what such
// a replica may show (leaderIndex).
func (n *Node) durableCommit() bool { return n.Protocol().Version >= ProtocolV4 }

// readsWaitDurable reports whether this build's leader makes a
// linearizable read wait for the durable index it had when the read
// arrived: every build that speaks ProtocolV4 does, whatever version the
// pair speaks now, since a replica that spoke it with this node may have
// shown an entry before this node's commit index covered it and then
// stopped (a rollback to an older build) before its ack arrived.
func (n *Node) readsWaitDurable() bool { return n.proto.own.Max >= ProtocolV4 }

// Admit decides whether this node acts on m at all. It drops, and counts
// (Counters.Refused), a message addressed to another node, one from a party
// other than the peer, one in a protocol version this node does not speak,
// and an ack of entries beyond this node's log. The peer's heartbeats also
// settle the protocol version (negotiate); one that shares no version with
// this node is dropped and counted in Counters.ProtocolMismatch. Step calls
// it first; the driver calls it for the kinds it handles itself (forwarded
// writes and their replies), so that each of these rules has one place.
func (n *Node) Admit(m *Message) bool {
	switch {
	case m.To != 0 && m.To != n.cfg.ID:
		return n.refuse(RefusedAddressee)
	case !n.fromPeer(m):
		return n.refuse(RefusedSender)
	case m.Kind == KindHeartbeat && !n.negotiate(m):
		return false
	case !n.proto.own.Speaks(max(m.Version, ProtocolV1)): // 0: ProtocolV1
		return n.refuse(RefusedVersion)
	case m.Kind == KindAck && m.Index > n.last:
		return n.refuse(RefusedAck)
	}
	return true
}

func (n *Node) refuse(r Refusal) bool {
	n.rd.Counters.Refused[r]++
	return false
}

// fromPeer reports whether m comes from the peer: the configured one
// (Config.Peer), or else the first party heard from in a heartbeat (test
// pairs configure none). Once known, the peer does not change.
func (n *Node) fromPeer(m *Message) bool {
	pr := n.peer
	if pr.ID == 0 {
		if m.Kind != KindHeartbeat || m.From == 0 {
			return false
		}
		pr.ID = m.From
	}
	return m.From == pr.ID
}

// negotiate reads the range of protocol versions the peer's heartbeat m
// advertises (whatever version m is written in) and settles the version the
// pair speaks. A peer with which this node shares no version is refused:
// counted, its range forgotten, the reason published (Ready.Protocol), and
// this node held off taking the lead alone, since the peer is alive even
// though it is not heard (stepHeartbeat clears holdOff at the next heartbeat
// it takes).
func (n *Node) negotiate(m *Message) bool {
	pr := HeartbeatProtocols(m.Flags)
	if _, ok := Negotiate(n.proto.own, pr); !ok {
		n.rd.Counters.ProtocolMismatch++
		n.setProtocol(ProtocolRange{}, false,
			fmt.Sprintf("peer %x speaks protocol versions %v, this node %v: no common version", m.From, pr, n.proto.own))
		n.holdOff = "the peer runs a build that speaks no protocol version this node speaks"
		return false
	}
	n.setProtocol(pr, true, "")
	return true
}

// forgetProtocol goes back to speaking Own.Min until the peer is heard
// again: a peer that stops may return as another build.
func (n *Node) forgetProtocol() { n.setProtocol(ProtocolRange{}, false, "") }

// setProtocol records the peer's range (ranged) or the refusal, and hands
// the new ProtocolStatus out in the next Ready if anything changed.
func (n *Node) setProtocol(peer ProtocolRange, ranged bool, refused string) {
	p := &n.proto
	if p.peer == peer && p.ranged == ranged && p.refused == refused {
		return
	}
	p.peer, p.ranged, p.refused = peer, ranged, refused
	st := n.Protocol()
	n.rd.Protocol = &st
}

// stamp writes m in the version the pair speaks; a heartbeat in the
// heartbeats' version, with this node's range in its flags.
func (n *Node) stamp(m *Message) {
	st := n.Protocol()
	if m.Kind == KindHeartbeat {
		m.Version, m.Flags = st.Heartbeat, n.proto.own.Flags()
		return
	}
	m.Version = st.Send
}
