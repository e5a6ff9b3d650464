package repl

import "fmt"

// Protocol versions of the replication wire. Every message carries the
// version it is written in (Message.Version; on the wire the envelope's
// version field, transport.Message.Version); each node advertises the range
// it speaks in its heartbeats (ProtocolRange.Flags) and writes the highest
// version both speak (Negotiate, admit.go). docs/OPERATIONS.md ("Upgrades
// and version skew") states what may pair. The numbers are the transport's
// envelope versions (transport.VersionBase, VersionAddressed: the core may
// not import the transport; a driver test checks they agree).
const (
	// ProtocolV1 is the wire of dyad before protocol versions: the base
	// envelope, no addressee, heartbeats without a range (Flags 0).
	ProtocolV1 uint16 = 1
	// ProtocolV2 adds the addressee (Message.To) to the envelope and the
	// advertised range to heartbeats.
	ProtocolV2 uint16 = 2
	// ProtocolV3 is the version in which a replica shows, watches and
	// answers only what the commit index covers (not all it holds
	// durably), so a primary may send a batch before its own flush and
	// the two zones flush at once (SendsBeforeFlush). Below it, a primary
	// flushes first: a replica of ProtocolV2 shows an entry as soon as it
	// persists it, and a primary that crashed before its own flush and
	// led again would take back a write that replica had already served.
	// The envelope is ProtocolV2's.
	ProtocolV3 uint16 = 3
	// ProtocolV4 is the version in which a replica takes as committed the
	// lower of its own durable index and its leader's (durable commit),
	// not only what its leader's commit index says, so that a write
	// forwarded by the replica is answered, and any entry shown there,
	// once both zones hold it durably: two fewer messages between the
	// zones than waiting for the leader to learn the replica's ack and
	// pass its commit index on. The leader announces its durable index in
	// a heartbeat as soon as it moves (instead of its commit index as soon
	// as that moves). Every build that speaks it makes a leader's
	// linearizable read wait also for the durable index the leader had
	// when the read arrived (reads.go, leaderIndex): the replica may
	// already have shown what is durable on both before the leader's
	// commit index covers it. The envelope is ProtocolV2's.
	ProtocolV4 uint16 = 4
	// ProtocolV5 exists only in builds with the dyad_protocol_next tag:
	// it is ProtocolV4 under the next number, so that a rolling upgrade
	// to a newer protocol, its negotiation, its refusal and the rollback
	// are tested before a release needs one. A real V5 replaces it.
	ProtocolV5 = ProtocolV4 + 1
)

// MinProtocol and MaxProtocol bound what this build speaks (MaxProtocol is
// one higher in a dyad_protocol_next build: protocol_next.go).
const (
	MinProtocol = ProtocolV1
	MaxProtocol = ProtocolV4 + protocolNext
)

// ProtocolRange is a closed range of protocol versions.
type ProtocolRange struct{ Min, Max uint16 }

// Supported is the range this build speaks.
func Supported() ProtocolRange { return ProtocolRange{MinProtocol, MaxProtocol} }

// Valid reports whether r names at least one version.
func (r ProtocolRange) Valid() bool { return r.Min >= 1 && r.Min <= r.Max }

// Speaks reports whether v lies in r.
func (r ProtocolRange) Speaks(v uint16) bool { return r.Min <= v && v <= r.Max }

func (r ProtocolRange) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(r.Min)
	}
	return fmt.Sprintf("%d..%d", r.Min, r.Max)
}

// Flags is r as a heartbeat's envelope flags: Min in the high 16 bits,
// Max in the low. The flags of a heartbeat mean nothing else, in every
// version, so that a node reads its peer's range whatever version the
// heartbeat is written in; a ProtocolV1 sender leaves them 0.
func (r ProtocolRange) Flags() uint32 { return uint32(r.Min)<<16 | uint32(r.Max) }

// HeartbeatProtocols is the range a heartbeat's envelope flags advertise
// (0: a sender from before protocol versions, which speaks ProtocolV1
// only). The result may be invalid (a corrupt or hostile sender): such a
// peer cannot be spoken with.
func HeartbeatProtocols(flags uint32) ProtocolRange {
	if flags == 0 {
		return ProtocolRange{ProtocolV1, ProtocolV1}
	}
	return ProtocolRange{Min: uint16(flags >> 16), Max: uint16(flags)}
}

// Negotiate returns the version two nodes speaking own and peer use: the
// highest both speak. ok is false when they share none.
func Negotiate(own, peer ProtocolRange) (v uint16, ok bool) {
	if !own.Valid() || !peer.Valid() {
		return 0, false
	}
	v = min(own.Max, peer.Max)
	if v < max(own.Min, peer.Min) {
		return 0, false
	}
	return v, true
}

// OwnProtocols is the range a node of a build speaking build (zero: this
// build, Supported) speaks: the build's, its minimum raised to minimum (0:
// kept; above the build's maximum: the maximum). Only tests name another
// build, to stand a node in for an older or newer one.
func OwnProtocols(build ProtocolRange, minimum uint16) ProtocolRange {
	r := build
	if r == (ProtocolRange{}) {
		r = Supported()
	}
	if minimum > r.Min {
		r.Min = min(minimum, r.Max)
	}
	return r
}
