package repl

import (
	"encoding/binary"
	"time"
)

// Kinds of transport messages (transport.Message.Kind). The class each one
// travels on is given beside it.
const (
	KindEntries    uint16 = iota + 1 // Log: live entries, EncodeEntries
	KindAck                          // Ack: Message.Index = last index durable on the replica
	KindHeartbeat                    // Heartbeat: Heartbeat
	KindForward                      // Control: Forward, replica -> primary
	KindReply                        // Control: Reply, primary -> replica
	KindCatchupReq                   // Control: CatchupReq, replica -> primary; Term = request ID
	KindCatchup                      // Catchup: EncodeEntries of old entries, or none with a Flag; Term = the request's ID
	KindSnapReq                      // Control: replica -> leader, send a snapshot; Term = request ID, Index = lowest index it must hold
	KindSnapChunk                    // Catchup: Term = the request's ID, Index = offset, Payload = bytes; FlagLast on the end
	KindMergeReq                     // Control: loser of a split brain -> leader, Payload = MergeData(its newest revision)
)

// Kinds of the hand-over of the primary role, numbered apart from the
// others so that new kinds above never renumber them.
const (
	KindHandover    uint16 = iota + 32 // Control: Handover, primary -> replica: take the role over now
	KindHandoverAck                    // Control: Handover (Refused set or not), replica -> primary
)

// KindLeaving (Control, Message.Term = the term of the epoch the replica
// follows, payload: the replica's run, 8 bytes big-endian; empty from a
// sender without runs), replica -> primary: the replica stops on purpose
// and no longer serves clients; the primary may lead alone at once instead
// of waiting out its silence and read lease, and the run's heartbeats
// still in flight are stale.
const KindLeaving uint16 = 48

// Flags of KindCatchup and KindSnapChunk messages.
const (
	// FlagLogGone: the log no longer reaches back to the index asked for.
	FlagLogGone uint32 = 1
	// FlagDiverged: the asker's log is not a prefix of the leader's. The
	// payload is the leader's epoch history (EncodeEpochs).
	FlagDiverged uint32 = 2
	// FlagLast marks the last snapshot chunk.
	FlagLast uint32 = 4
)

// EncodeEpochs encodes an epoch history.
func EncodeEpochs(h []EpochRecord) []byte {
	b := binary.AppendUvarint(nil, uint64(len(h)))
	for _, r := range h {
		b = binary.AppendUvarint(b, r.Epoch.Term)
		b = binary.BigEndian.AppendUint64(b, r.Epoch.Node)
		b = binary.AppendUvarint(b, r.Start)
		if r.Solo {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

// DecodeEpochs decodes EncodeEpochs' output.
func DecodeEpochs(b []byte) ([]EpochRecord, error) {
	d := decoder{b: b}
	n := d.uvarint()
	if d.err != nil || n > uint64(len(b)) {
		return nil, ErrDecode
	}
	out := make([]EpochRecord, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var r EpochRecord
		r.Epoch.Term = d.uvarint()
		r.Epoch.Node = d.u64()
		r.Start = d.uvarint()
		if d.err == nil && len(d.b) < 1 {
			d.err = ErrDecode
		}
		if d.err == nil {
			r.Solo = d.b[0] == 1
			d.b = d.b[1:]
		}
		out = append(out, r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrDecode
	}
	return out, d.err
}

// SoloSuffix reports whether own (a node's epoch history, applied up to
// index applied) holds entries from a solo epoch of node self that the
// leader's history does not know: writes acknowledged while split, which
// must never be truncated. A solo epoch that holds no entry (the next
// epoch starts where it starts) does not count, nor one whose entries all
// lie below the floor of the leader's trimmed history (entries both nodes
// share; see TrimEpochs).
func SoloSuffix(own, leader []EpochRecord, self, applied uint64) bool {
	known := make(map[Epoch]bool, len(leader))
	for _, r := range leader {
		known[r.Epoch] = true
	}
	floor := HistoryFloor(leader)
	for i, r := range own {
		end := applied
		if i+1 < len(own) && own[i+1].Start-1 < end {
			end = own[i+1].Start - 1
		}
		if r.Solo && r.Epoch.Node == self && r.Start <= end && end >= floor && !known[r.Epoch] {
			return true
		}
	}
	return false
}

// SoloFrom returns the first index of the trailing run of solo epochs led
// by self in history h, or 0 if h does not end in one.
func SoloFrom(h []EpochRecord, self uint64) uint64 {
	from := uint64(0)
	for i := len(h) - 1; i >= 0 && h[i].Solo && h[i].Epoch.Node == self; i-- {
		from = h[i].Start
	}
	return from
}

// Divergence returns the last index up to which own and leader (two epoch
// histories) assign every index to the same epoch, capped at applied: the
// end of the common prefix of the two logs. It errs early rather than
// late: a node's history may place entries it shares with the other in a
// later epoch of its own (the entries in flight when it went solo). Below
// the floor of either history (trimmed: see TrimEpochs) the logs agree.
func Divergence(own, leader []EpochRecord, applied uint64) uint64 {
	floor := max(HistoryFloor(own), HistoryFloor(leader))
	var points []uint64
	for _, r := range own {
		points = append(points, r.Start)
	}
	for _, r := range leader {
		points = append(points, r.Start)
	}
	first := applied + 1 // the first index where they differ
	for _, p := range points {
		if p >= floor && p < first && EpochAt(own, p) != EpochAt(leader, p) {
			first = p
		}
	}
	return first - 1
}

// YieldAfterSplit decides which of two leading nodes steps down when they
// meet again: the one that acknowledged nothing alone (it just catches
// up); if both did, or neither, the one outside the preferred zone.
func YieldAfterSplit(wrote, peerWrote, preferred bool) bool {
	if wrote != peerWrote {
		return !wrote
	}
	return !preferred
}

// Role is what a node is doing, as announced in its heartbeats.
type Role uint8

const (
	// RoleWaiting: not serving writes; waiting for a peer (or for
	// force-primary) after a start, or after losing its primary.
	RoleWaiting Role = iota
	// RoleReplica: follows a primary.
	RoleReplica
	// RolePrimary: leads with a synchronous replica (protocol C).
	RolePrimary
	// RoleSolo: leads alone, acknowledging without the peer.
	RoleSolo
)

func (r Role) String() string {
	switch r {
	case RoleWaiting:
		return "waiting"
	case RoleReplica:
		return "replica"
	case RolePrimary:
		return "primary"
	case RoleSolo:
		return "solo"
	}
	return "role?"
}

// Leads reports whether a node in role r takes writes.
func (r Role) Leads() bool { return r == RolePrimary || r == RoleSolo }

// Heartbeat is sent from the apply loop every lease/4. SentAt and Echo are
// monotonic clock readings (ns): SentAt on the sender's clock, Echo the
// newest SentAt the sender has received from its peer (so, on the
// receiver's own clock). A node holds a lease from its peer until Echo +
// lease on its own clock.
type Heartbeat struct {
	Role    Role
	Epoch   Epoch  // the sender's current epoch (its primary's, for a replica)
	Applied uint64 // last index applied and durable
	Commit  uint64 // last index known committed
	Rev     int64  // revision visible at the sender
	SentAt  int64
	Echo    int64
	LedLast bool // the sender's newest epoch is its own (it may serve alone)
	// CatchingUp: a replica whose log the leader has not yet confirmed as
	// a prefix of its own; the leader must not count it as synchronous.
	CatchingUp bool
	MaxTerm    uint64
	// EpochStart is the first index of the sender's epoch while it leads:
	// a replica that has not applied everything before a synchronous
	// epoch's start is still catching up and must not promote itself.
	EpochStart uint64
	// SoloFrom is the first index of the sender's trailing run of its own
	// solo epochs while it leads (0: none). Applied >= SoloFrom means it
	// acknowledged writes alone: what decides who yields after a split.
	SoloFrom uint64
	// HeardAgo is how long the sender had not heard the receiver when it
	// sent this heartbeat, on its own running time (a freeze of the sender
	// restarts it unless the sender already reported it over Lease/2:
	// Detector.Silence), to the millisecond; -1: never. A peer that stops
	// hearing a live node is about to take over (or has gone solo): the
	// node must then not take the lead alone (docs/ARCHITECTURE.md,
	// "One-way link failures").
	HeardAgo time.Duration
	// Run identifies the sender's run (a restart makes a new one; 0: a
	// sender that predates runs); EchoRun is the run whose send time Echo
	// carries. SentAt and Echo are only comparable within one run.
	Run     uint64
	EchoRun uint64
}

// maxHeardAgoMs is the largest HeardAgo, in milliseconds, a Duration holds.
const maxHeardAgoMs = uint64(1<<63-1) / uint64(time.Millisecond)

// Hears reports whether the sender had heard the receiver within d.
func (h *Heartbeat) Hears(d time.Duration) bool { return h.HeardAgo >= 0 && h.HeardAgo <= d }

// WroteSolo reports whether the sender acknowledged entries alone in its
// current run of solo epochs.
func (h *Heartbeat) WroteSolo() bool { return h.SoloFrom != 0 && h.Applied >= h.SoloFrom }

// Encode returns h's encoding.
func (h *Heartbeat) Encode() []byte {
	b := make([]byte, 0, 64)
	b = append(b, byte(h.Role))
	b = binary.AppendUvarint(b, h.Epoch.Term)
	b = binary.BigEndian.AppendUint64(b, h.Epoch.Node)
	b = binary.AppendUvarint(b, h.Applied)
	b = binary.AppendUvarint(b, h.Commit)
	b = binary.AppendVarint(b, h.Rev)
	b = binary.AppendVarint(b, h.SentAt)
	b = binary.AppendVarint(b, h.Echo)
	var flags byte
	if h.LedLast {
		flags |= 1
	}
	if h.CatchingUp {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, h.MaxTerm)
	b = binary.AppendUvarint(b, h.EpochStart)
	b = binary.AppendUvarint(b, h.SoloFrom)
	var ago uint64 // 0: never; else milliseconds + 1
	if h.HeardAgo >= 0 {
		ago = uint64(h.HeardAgo/time.Millisecond) + 1
	}
	b = binary.AppendUvarint(b, ago)
	b = binary.BigEndian.AppendUint64(b, h.Run)
	return binary.BigEndian.AppendUint64(b, h.EchoRun)
}

// DecodeHeartbeat decodes Heartbeat.Encode's output.
func DecodeHeartbeat(b []byte) (Heartbeat, error) {
	var h Heartbeat
	if len(b) < 1 {
		return h, ErrDecode
	}
	h.Role = Role(b[0])
	d := decoder{b: b[1:]}
	h.Epoch.Term = d.uvarint()
	h.Epoch.Node = d.u64()
	h.Applied = d.uvarint()
	h.Commit = d.uvarint()
	h.Rev = d.varint()
	h.SentAt = d.varint()
	h.Echo = d.varint()
	if d.err == nil && len(d.b) < 1 {
		d.err = ErrDecode
	}
	if d.err == nil {
		h.LedLast, h.CatchingUp = d.b[0]&1 != 0, d.b[0]&2 != 0
		d.b = d.b[1:]
		h.MaxTerm = d.uvarint()
		h.EpochStart = d.uvarint()
		h.SoloFrom = d.uvarint()
		// An older sender does not report HeardAgo: taken as hearing.
		if len(d.b) > 0 {
			h.HeardAgo = -1
			switch ago := d.uvarint(); {
			case ago > maxHeardAgoMs+1:
				d.err = ErrDecode
			case ago > 0:
				h.HeardAgo = time.Duration(ago-1) * time.Millisecond
			}
		}
		// An older sender does not report runs: 0.
		if d.err == nil && len(d.b) > 0 {
			h.Run = d.u64()
			h.EchoRun = d.u64()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrDecode
	}
	return h, d.err
}

// Forward kinds.
const (
	ForwardWrite     uint8 = 1 // Data: an InternalRaftRequest to log
	ForwardKeepAlive uint8 = 2 // Data: the lease ID, 8 bytes big-endian
)

// Forward is a request the replica hands to the primary. A write's answer
// is the local result of applying the entry that carries (Origin, ReqID);
// a keep-alive is answered by a Reply.
type Forward struct {
	Op    uint8
	ReqID uint64
	Data  []byte
}

// Encode returns f's encoding.
func (f *Forward) Encode() []byte {
	b := make([]byte, 0, len(f.Data)+16)
	b = append(b, f.Op)
	b = binary.AppendUvarint(b, f.ReqID)
	b = binary.AppendUvarint(b, uint64(len(f.Data)))
	return append(b, f.Data...)
}

// DecodeForward decodes Forward.Encode's output; Data aliases b.
func DecodeForward(b []byte) (Forward, error) {
	var f Forward
	if len(b) < 1 {
		return f, ErrDecode
	}
	f.Op = b[0]
	d := decoder{b: b[1:]}
	f.ReqID = d.uvarint()
	f.Data = d.bytes()
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrDecode
	}
	return f, d.err
}

// Reply answers a forwarded keep-alive: the TTL, or an error code.
type Reply struct {
	ReqID uint64
	TTL   int64
	Err   uint8 // 0 ok, ReplyLeaseNotFound, ReplyNotPrimary
}

// Reply error codes.
const (
	ReplyOK            uint8 = 0
	ReplyLeaseNotFound uint8 = 1
	ReplyNotPrimary    uint8 = 2
)

// Encode returns r's encoding.
func (r *Reply) Encode() []byte {
	b := binary.AppendUvarint(nil, r.ReqID)
	b = binary.AppendVarint(b, r.TTL)
	return append(b, r.Err)
}

// DecodeReply decodes Reply.Encode's output.
func DecodeReply(b []byte) (Reply, error) {
	var r Reply
	d := decoder{b: b}
	r.ReqID = d.uvarint()
	r.TTL = d.varint()
	if d.err == nil && len(d.b) != 1 {
		d.err = ErrDecode
	}
	if d.err == nil {
		r.Err = d.b[0]
	}
	return r, d.err
}

// Handover hands the primary role to the replica without waiting for a
// lease to expire (etcdctl move-leader, or a primary that can no longer
// persist). Before sending it the primary stopped taking writes and
// serving linearizable reads, and the replica acknowledged every entry up
// to Last; Epoch is the primary's. The replica takes over only if it
// applied exactly that far; it answers with the same Handover, Refused set
// when it did not take over.
type Handover struct {
	Epoch Epoch
	Last  uint64
	// Final: the sender stops after this (its storage failed), so the
	// receiver leads alone at once instead of waiting for it to follow.
	Final   bool
	Refused bool
}

// Encode returns h's encoding.
func (h *Handover) Encode() []byte {
	b := binary.AppendUvarint(nil, h.Epoch.Term)
	b = binary.BigEndian.AppendUint64(b, h.Epoch.Node)
	b = binary.AppendUvarint(b, h.Last)
	var flags byte
	if h.Final {
		flags |= 1
	}
	if h.Refused {
		flags |= 2
	}
	return append(b, flags)
}

// DecodeHandover decodes Handover.Encode's output.
func DecodeHandover(b []byte) (Handover, error) {
	var h Handover
	d := decoder{b: b}
	h.Epoch.Term = d.uvarint()
	h.Epoch.Node = d.u64()
	h.Last = d.uvarint()
	if d.err == nil && len(d.b) != 1 {
		d.err = ErrDecode
	}
	if d.err == nil {
		h.Final, h.Refused = d.b[0]&1 != 0, d.b[0]&2 != 0
	}
	return h, d.err
}

// CatchupReq asks the primary for the entries from From on. Prev is the
// epoch of the asker's entry at From-1 (zero if none), so the primary can
// tell a replica whose log diverged from its own.
type CatchupReq struct {
	From uint64
	Prev Epoch
}

// Encode returns c's encoding.
func (c *CatchupReq) Encode() []byte {
	b := binary.AppendUvarint(nil, c.From)
	b = binary.AppendUvarint(b, c.Prev.Term)
	return binary.BigEndian.AppendUint64(b, c.Prev.Node)
}

// DecodeCatchupReq decodes CatchupReq.Encode's output.
func DecodeCatchupReq(b []byte) (CatchupReq, error) {
	var c CatchupReq
	d := decoder{b: b}
	c.From = d.uvarint()
	c.Prev.Term = d.uvarint()
	c.Prev.Node = d.u64()
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrDecode
	}
	return c, d.err
}

// KindMember (Control, Payload = a JSON member record: ID, name, peer and
// client URLs), each node -> its peer, every few seconds: what the peer
// lists for this node in MemberList. Handled beside the protocol (it
// changes no replication state); a node that does not know the kind
// ignores it.
const KindMember uint16 = 64
