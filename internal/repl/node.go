package repl

import (
	"errors"
	"fmt"
	"time"
)

// Node is the protocol core of one node of a pair, in the shape of etcd
// raft's RawNode: the driver feeds it inputs (Propose, Step, Tick,
// Persisted, Applied, Fenced, ...), then takes one Ready at a time, carries
// it out (persist, send, apply, answer, run the slow effects off its loop)
// and calls Advance. Every decision of the two-zone protocol is made here;
// the driver decides nothing.
//
// A Node is owned by one goroutine (the driver's loop): it is not safe for
// concurrent use, and nothing in it blocks.
//
// # Positions
//
// The log runs [1, Last]. Persisted <= Last is what the driver reported
// durable; Commit is what may be acknowledged (synchronous epoch: the lower
// of this node's persisted index and the replica's acknowledged one; solo:
// this node's persisted index; a replica, once a catch-up answer verified
// its log as a prefix of the leader's, learns it from its leader, or from
// ProtocolV4 on takes the lower of its own persisted index and the one its
// leader announced, which may run ahead of the leader's own);
// Applied is what the driver reported applied. The rules assume only
// Persisted <= Last; a driver that persists and applies in one transaction
// reports both at once (Applied may then run ahead of Commit).
type Node struct {
	cfg Config
	det *Detector

	now int64 // the newest time given by the caller
	// started: when the driver started running this node (Start), from
	// which the wait for the peer after a restart counts.
	started int64

	role Role
	// epochs is the epoch history (oldest first), as persisted, plus what
	// the pending HardState adds.
	epochs  []EpochRecord
	maxTerm uint64
	// epoch: the epoch this node leads, or of the newest entry it followed.
	epoch Epoch
	// ledLast: the newest epoch this node knows of is its own (it may
	// serve alone after a restart).
	ledLast bool
	// followed: the newest term of a leader this node followed (durable,
	// HardState.Followed). A leader that goes synchronous without writing
	// leaves no record of its epoch in its replica's history, so that
	// history may still end in the replica's own older solo epoch; an own
	// last epoch older than followed is no claim to have led last
	// (simulator seed 9049).
	followed uint64
	// holdOff says why this node must not take the lead alone: the peer's
	// last heartbeat said it does not hear this node ("" : it may).
	holdOff string
	// thawed: when this node, as primary, thawed from a freeze long
	// enough for its replica to have taken over (noticeFreeze); until the
	// peer reports having heard it since, it does not lead alone (0: no
	// such freeze pending).
	thawed int64
	// following is the epoch of the primary this replica follows;
	// followSoloFrom, the SoloFrom of the heartbeat that led it there (the
	// start of that leader's trailing run of solo epochs; crossedWinner).
	following      Epoch
	followSoloFrom uint64
	// crossedSince: since when this replica and its peer have each followed
	// the other's epoch (0: they do not; crossedWinner). crossWon: this
	// node won such a crossing and waits to lead again (stepWaiting).
	crossedSince int64
	crossWon     bool
	// verified: a catch-up answer confirmed this replica's log is a
	// prefix of the leader's; until then live entries are not taken and
	// the commit index does not move (it would cover entries the leader
	// may not have).
	verified bool
	// leaderDurable: the newest durable index the leader this replica
	// follows announced (its heartbeats' Applied), in its current run and
	// epoch; 0 when unknown. It is forgotten whenever the log must be
	// verified again (unverify). Under ProtocolV4 the replica commits up
	// to the lower of it and its own durable index (commitDurable).
	leaderDurable uint64
	// lastEpoch, lastSolo: the epoch and solo flag stored with the newest
	// entry this node holds.
	lastEpoch Epoch
	lastSolo  bool

	last, persisted, applied, commit uint64
	// leadFrom: the last index this node held when it last started to
	// lead (setRole). Everything acknowledged before that, by any leader,
	// is in its log up to there; a read on the leader waits until the
	// commit index covers it (newRead).
	leadFrom uint64
	rev      int64 // the revision of the newest persisted entry
	// unapplied holds entries taken (proposed or followed) and not yet
	// reported applied, oldest first; handed out as CommittedEntries up
	// to commit (nextApply is the first not yet handed out).
	unapplied []Entry
	nextApply uint64
	// inflight: for each proposed batch not yet acknowledged by the
	// replica, its last index and when it was proposed (ack timeout).
	inflight []idxAt
	// catchupAt: entries of a catch-up answer being persisted end here
	// (0: none); once persisted, the next catch-up is asked.
	catchupAt uint64
	// dropAt: a Ready asked the driver to drop the log after this index
	// (Ready.Truncate) and Truncated has not reported yet (0: none). No
	// catch-up is asked meanwhile: it would name the suffix being
	// dropped.
	dropAt uint64
	// probe: after a divergence answer, the search for where the two
	// logs part (catchupRefused); inactive (hi 0) otherwise. Forgotten
	// whenever the log must be verified again (unverify).
	probe probe

	peer *Progress

	reqSeq uint64 // the last catch-up or snapshot request ID used
	stuck  string // why this node waits for an operator ("": it does not)

	// Split brain: bothLeadSince (0: not both leading), mergeRev (the
	// loser waits for the leader's revision to pass it; 0: not merging),
	// mergeAsked, mergedAbove (leader: revision of its last merge).
	bothLeadSince int64
	mergeRev      int64
	mergeAsked    int64
	mergedAbove   int64
	splitPending  bool // conflict records asked for, not yet kept

	handover *handoverState
	tookOver Epoch
	// handoffUntil: writes that find this node not leading wait for the
	// primary it handed over to until then (0: none).
	handoffUntil int64

	fencing, fenced bool

	proto protoState // the protocol versions spoken with the peer (admit.go)

	reads []readWait
	// settled is what the last releaseReads pass answered the pending
	// reads against, when that pass left every one of them registered
	// and waiting (valid); see ReadIndex.
	settled readsSettled

	rd           Ready     // what the next Ready will carry
	handedCommit uint64    // the commit index of the last Ready handed out
	handedGrant  ReadGrant // the read grant of the last Ready handed out
}

// Config configures a Node.
type Config struct {
	// ID is this node's member ID (never 0).
	ID uint64
	// Lease is the failure-detection lease (--peer-lease).
	Lease time.Duration
	// AckTimeout declares the replica dead when an entry stays
	// unacknowledged this long (0: 2 × Lease).
	AckTimeout time.Duration
	// Drift covers clock rate differences of the two machines (0: Lease/10
	// + 10 ms).
	Drift time.Duration
	// FreezeGrace and FreezeGraceFrom: see Detector.
	FreezeGrace, FreezeGraceFrom time.Duration
	// Peer is the peer's member ID (0: the sender of the first heartbeat
	// heard; Admit takes messages from the peer only).
	Peer uint64
	// MinProtocol raises the lowest protocol version this node speaks (0:
	// the build's lowest; see OwnProtocols). A peer that speaks nothing
	// from here to the build's highest is refused.
	MinProtocol uint16
	// Bootstrap lets this node start a new pair alone when it holds
	// nothing.
	Bootstrap bool
	// Preferred: this node is in the preferred zone (split brain and
	// cold-start ties).
	Preferred bool
	// Fence: a fence command must succeed before this node promotes
	// itself (Ready.Fence, then Fenced).
	Fence bool
	// ManualSplitBrain: after a split brain in which both sides wrote,
	// the losing node waits for Resolve.
	ManualSplitBrain bool
	// SnapPatience is how long a replica waits for the next snapshot
	// chunk before it asks again (0: max(20 × Lease, 10 s)).
	SnapPatience time.Duration
	// Run identifies this run of the node (random, never 0: Detector).
	Run uint64
	// Build is the range of protocol versions the build speaks (zero:
	// Supported()). Only tests set it, to pair two builds (the scenario
	// harness; the driver's tests stand a node in for an older build).
	Build ProtocolRange
	// ReqSeed is the first catch-up and snapshot request ID of this run,
	// less one (random below 2^63, so that answers to an earlier run's
	// requests are not taken for this run's).
	ReqSeed uint64
}

// RestartState is what the driver read from its durable state at start.
type RestartState struct {
	Epochs  []EpochRecord
	MaxTerm uint64 // the highest term persisted (meta term)
	// Followed is the newest leader's term this node followed, as
	// persisted from HardState.Followed (0: none).
	Followed uint64
	// Last is the last durable log index; LastEpoch and LastSolo are the
	// epoch and solo flag stored with that entry (zero if none).
	Last      uint64
	LastEpoch Epoch
	LastSolo  bool
	// Applied is the last index applied (<= Last); Rev the revision there.
	Applied uint64
	Rev     int64
	// Commit is a lower bound of the commit index the driver kept durably
	// (a commit index this node knew at some point before it stopped,
	// possibly stale): the node starts with it as its commit index, so a
	// suffix above it that the leader lacks can be dropped in place
	// (catchupRefused) rather than resynced from a snapshot. 0 (none kept:
	// a data dir written before the bound existed, or nothing committed
	// yet) and anything above Applied mean Applied, as before: every
	// entry held counts as committed.
	Commit uint64
	// Now is the caller's clock at the restart.
	Now int64
}

// Message is a protocol message as the core sees it: decoded, addressed,
// and stamped with its arrival time. The driver maps it to and from the
// wire (transport.Message): Kind, Term, Index and Flags keep their wire
// meaning (msg.go), the body is in the field its kind names.
type Message struct {
	Kind     uint16
	From, To uint64 // To: 0 on receipt means the receiver (older envelopes carry none)
	// Version is the protocol version the message is written in (0:
	// ProtocolV1). The core stamps what it sends (Protocol); Admit
	// refuses what this node does not speak.
	Version uint16
	Term    uint64 // epoch term, or a request ID (KindCatchup*, KindSnap*)
	Index   uint64
	Flags   uint32

	Entries   []Entry       // KindEntries, KindCatchup
	Heartbeat Heartbeat     // KindHeartbeat
	Catchup   CatchupReq    // KindCatchupReq
	Handover  Handover      // KindHandover, KindHandoverAck
	Epochs    []EpochRecord // KindCatchup with FlagDiverged: the leader's history
	Run       uint64        // KindLeaving: the sender's run (0: a sender without runs)
	MergeRev  int64         // KindMergeReq
	Chunk     []byte        // KindSnapChunk

	// Received is the arrival time on the receiver's clock (set by the
	// receiving driver, not sent).
	Received int64
}

// Ready is what the driver must carry out, in this order:
//
//  1. drop the log after Truncate (if set) and report Truncated; persist
//     HardState, then Entries;
//     nothing of this Ready is sent before HardState is durable;
//  2. send Messages (each to its To; 0: the peer);
//     (publish ReadGrant before anything else: a grant it revokes must
//     be gone before any effect of this Ready, see ReadGrant);
//  3. apply CommittedEntries; answer ReadStates;
//  4. carry out the rest (RoleChange, Fence, Serve, Snapshot, SplitBrain,
//     Merge), slow ones off the loop, reporting back through the inputs;
//  5. call Advance, then report Persisted and Applied as they happen.
type Ready struct {
	HardState HardState
	Entries   []Entry
	Messages  []Message
	// Commit is the commit index: what may be acknowledged and made
	// visible.
	Commit           uint64
	CommittedEntries []Entry
	ReadStates       []ReadState
	// ReadGrant is the read grant in force from this Ready on (reads.go):
	// the driver publishes it to its request goroutines before it carries
	// out anything else of this Ready, and those serve a linearizable
	// read at once while it covers their own clock reading.
	ReadGrant ReadGrant
	// RoleChange is set when the role changed (the last change, if several
	// happened since the last Ready; Reason names it).
	RoleChange *RoleChange
	// Fence: run the fence command (off the loop) and report with Fenced.
	Fence bool
	// Serve: catch-up or snapshot requests of the replica, for the driver
	// to answer from its log or data file (off the loop).
	Serve []ServeRequest
	// Snapshot: chunks of the snapshot this node asked for, in order, to
	// write; the last one is installed, and reported with Installed.
	Snapshot []SnapshotChunk
	// DropSnapshot: abandon any snapshot being received.
	DropSnapshot bool
	// Truncate (not 0): drop this replica's log after index Truncate in
	// place, before the Entries are appended: the entries, what applying
	// them changed, and the epoch records that start after it, in one
	// durable step. It is a synchronous suffix its leader's log lacks,
	// never acknowledged. Report with Truncated; a driver that cannot
	// undo those entries' effects in place reports an error, changing
	// nothing, and the core resyncs from a snapshot instead.
	Truncate uint64
	// SplitBrain: keep this node's diverged writes as conflict records,
	// then report with ConflictsKept.
	SplitBrain *SplitBrain
	// Merge: the split brain's loser had reached revision Merge; log a
	// merge entry (an Entry with Merge set, through Propose) that jumps
	// the revision above both sides': max(Merge, this node's revision)+1.
	Merge int64
	// HandoverResult: the hand-over asked for with Handover ended (Err
	// nil: the peer leads now).
	HandoverResult *HandoverResult
	// Stuck changed: why this node now waits for an operator ("" : no
	// longer).
	Stuck *string
	// Counters are events to count (metrics).
	Counters Counters
	// Protocol changed: what this node now speaks with its peer (the
	// driver stamps the messages it sends itself by it, and reports it).
	Protocol *ProtocolStatus
}

// HardState is the durable protocol state to write: the meta term, the
// epoch records added and dropped (TrimEpochs), and the term followed.
type HardState struct {
	Term uint64
	Put  []EpochRecord
	Drop []EpochRecord
	// Followed (not 0): the newest term of a leader this node followed
	// rose to Followed. It is durable before this node acknowledges
	// anything to that leader: the epoch history records a leader's
	// epoch only with its entries, and a node that followed a newer epoch
	// than its own last one did not lead last (Node.followed).
	Followed uint64
}

// IsEmpty reports whether h holds nothing to write.
func (h *HardState) IsEmpty() bool {
	return h.Term == 0 && len(h.Put) == 0 && len(h.Drop) == 0 && h.Followed == 0
}

// RoleChange describes a role change.
type RoleChange struct {
	From, To Role
	Reason   string
	Epoch    Epoch
	// ResetLeases: every lease gets its full TTL from now (a new leader).
	ResetLeases bool
	// SteppedDown: the node stopped leading; its batches not yet
	// committed get "request timed out" (a later primary keeps or drops
	// them).
	SteppedDown bool
	// LeftReplica: the node stopped following; the writes it forwarded
	// get "request timed out" (unless AdoptForwards).
	LeftReplica bool
	// AdoptForwards: the writes this node forwarded were never logged
	// (the old primary handed over): propose them here instead of failing
	// them.
	AdoptForwards bool
}

// ReadState says that the read registered with ReadIndex(ID) may be
// served now, once the entries up to Index are applied (Index is 0 on an
// empty log: nothing to wait for), or, with Refused, that it may not be
// served (the driver answers "no leader").
type ReadState struct {
	ID      uint64
	Index   uint64
	Refused bool
}

// ServeRequest is a catch-up (or, with Snapshot, a snapshot) request to
// answer: the answer messages carry ID in Term and go To the asker.
type ServeRequest struct {
	To       uint64
	ID       uint64
	Snapshot bool
	Catchup  CatchupReq
}

// SnapshotChunk is one accepted chunk of an incoming snapshot. First: a
// new snapshot starts (drop any partial one). Last: install it; it must
// hold at least the entries up to Floor (else Installed gets
// ErrStaleSnapshot and nothing changes).
type SnapshotChunk struct {
	ID     uint64
	Offset uint64
	Data   []byte
	First  bool
	Last   bool
	Floor  uint64
}

// HandoverResult is the outcome of a hand-over (Ready.HandoverResult).
type HandoverResult struct {
	Err error
	// Final: the hand-over was asked for after a storage failure.
	Final bool
}

// SplitBrain asks the driver to keep this node's writes above DivergedAt
// as conflict records against the winner's history Leader.
type SplitBrain struct {
	Leader     []EpochRecord
	DivergedAt uint64
}

// Counters are events since the last Ready.
type Counters struct {
	StaleAnswers, Failovers, FalseFailovers, SoloEntered, SplitBrains int
	// Refused counts the messages Admit dropped, by reason;
	// ProtocolMismatch the peer's heartbeats dropped because the two
	// nodes share no protocol version.
	Refused          [NumRefusals]int
	ProtocolMismatch int
}

// Status is what request goroutines need from the core, published by the
// driver after each Ready.
type Status struct {
	Role Role
	// Epoch is the epoch this node leads or follows; Current the epoch of
	// its newest entry, or the one it leads.
	Epoch   Epoch
	Current Epoch
	Leader  uint64 // the primary this node knows (0: none)
	// LeaseUntil is the time until which this node holds its peer's lease
	// (a replica's read lease, a primary's role lease).
	LeaseUntil int64
	// Resyncing: a snapshot is requested or being installed.
	Resyncing bool
	// HandingOver: a hand-over from this node is under way; no proposal
	// is taken meanwhile. HandoffUntil: until then, writes that find this
	// node not leading wait for the primary it handed over to.
	HandingOver  bool
	HandoffUntil int64
	Stuck        string
	Last         uint64
	Applied      uint64
	Commit       uint64
	Peer         Heartbeat // the peer's newest heartbeat
	PeerFresh    bool      // Peer was heard within a lease
	PeerID       uint64
	HeardAgo     time.Duration // -1: never
}

// Errors of the inputs.
var (
	// ErrNotLeader: a proposal or hand-over on a node that does not lead.
	ErrNotLeader = errors.New("repl: not leading")
	// ErrHandingOver: a proposal while a hand-over is under way.
	ErrHandingOver = errors.New("repl: handing the role over")
	// ErrStaleSnapshot: an installed snapshot was older than its floor.
	ErrStaleSnapshot = errors.New("repl: the snapshot is older than this node's state")
	// ErrNotSynchronous: no live synchronous replica to hand over to.
	ErrNotSynchronous = errors.New("repl: the replica is not a live synchronous replica")
	// ErrPeerLeft: the replica stopped on purpose (KindLeaving) without
	// taking the hand-over; it is an ErrNotSynchronous.
	ErrPeerLeft = fmt.Errorf("%w: it is stopping", ErrNotSynchronous)
	// ErrBusy: a hand-over is already under way.
	ErrBusy = errors.New("repl: a hand-over is already under way")
)

// idxAt is an index at a time.
type idxAt struct {
	at  int64
	idx uint64
}
