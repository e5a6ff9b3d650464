package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

// ReplConfig turns a node into one of a two-zone pair. See
// docs/ARCHITECTURE.md ("Two zones") for the protocol.
type ReplConfig struct {
	Transport transport.Transport
	// Lease is the failure-detection lease (--peer-lease).
	Lease time.Duration
	// AckTimeout declares the replica dead when an entry stays unacked
	// this long (--ack-timeout).
	AckTimeout time.Duration
	// Bootstrap lets this node start a new pair alone when its data dir
	// is empty (--initial-cluster-state new, first member or preferred
	// zone). Otherwise an empty node waits for a peer to follow.
	Bootstrap bool
	// Preferred: this node is in the preferred zone (split brain and
	// cold-start ties).
	Preferred bool
	// Fence, when set, must succeed before this node promotes itself.
	Fence func(ctx context.Context) error
	// FenceTimeout bounds one run of Fence (--fence-timeout); a run cut
	// off by it counts as failed. 0: 5 × Lease.
	FenceTimeout time.Duration
	// Retention bounds the replication log.
	Retention repl.Retention
	// ManualSplitBrain (--split-brain-policy manual): after a split brain
	// in which both sides acknowledged writes, the losing node waits for
	// `dyad resolve accept` instead of giving up its history at once.
	ManualSplitBrain bool
	// MinProtocol raises the lowest replication protocol version this
	// node speaks (--min-protocol-version; 0: the build's lowest). A peer
	// that speaks nothing from here to the build's highest is refused.
	MinProtocol uint16
}

// replState is the replication state. Fields are owned by the apply loop
// unless noted.
type replState struct {
	cfg ReplConfig
	tr  transport.Transport
	det *repl.Detector

	// inbox carries received messages to the apply loop; catchupc carries
	// catch-up requests to the catch-up server.
	inbox    chan *transport.Message
	catchupc chan catchupJob
	recv     recvState   // how the transport fills inbox (inbox.go)
	acc      acceptState // who and what the node accepts (accept.go)

	epochs  []repl.EpochRecord
	maxTerm uint64
	// ledLast: the newest epoch this node knows of is its own (read from
	// the epoch history at start; set on leading, cleared on following).
	ledLast bool
	// holdOff says why this node must not take the lead alone (promote, go
	// solo, or lead after a start without hearing its peer): the peer's
	// last heartbeat said it does not hear this node, so the peer takes
	// over or leads alone itself (a one-way link failure). Empty: it may.
	// Set from every heartbeat (docs/ARCHITECTURE.md, "One-way link
	// failures").
	holdOff  string
	started  int64
	peer     repl.Heartbeat
	peerSeen bool
	// following is the epoch of the primary this replica follows.
	following repl.Epoch
	// verified: a catch-up answer has confirmed that this replica's log is
	// a prefix of the leader's; until then live entries are not applied
	// (after a divergence index continuity alone proves nothing).
	verified bool
	// lastEpoch and lastSolo describe the newest entry this replica applied.
	lastEpoch repl.Epoch
	lastSolo  bool
	ackIdx    uint64
	mark      syncMark
	// behind: since when (detector time, 0: not) this replica has stood
	// still at index behindAt while its leader reported more applied.
	behind   int64
	behindAt uint64
	inflight []*pending
	fwdq     []*proposal // forwarded writes waiting for the next batch
	dedup    *dedup

	// Catch-up and snapshot requests (docs/ARCHITECTURE.md, "Catch-up").
	// Each request carries an ID and each answer names the request it
	// answers; only an answer to the outstanding request is acted upon. A
	// late one may describe a log position or a state this node has left
	// since (acting on it installed old snapshots over newer state). At
	// most one of catchupReq and snapReq is outstanding. Repeating a
	// request for the same position keeps its series: an answer to any
	// request of the series (IDs first..last) is as good, so a leader
	// slower than the re-ask interval still gets through.
	reqSeq                   uint64          // the last request ID used
	catchupFirst, catchupReq uint64          // the outstanding catch-up series (catchupReq 0: none)
	catchupPos               repl.CatchupReq // what the series asks for
	snapFirst, snapReq       uint64          // the outstanding snapshot series (snapReq 0: none)
	// snapMin is the lowest applied index a snapshot for snapReq may
	// bring: this node's applied index, or the end of the prefix it shares
	// with the leader when its suffix diverged. Anything older is stale.
	snapMin uint64
	// catchupAsked: detector time of the last request, or of the last
	// chunk of the snapshot being received.
	catchupAsked int64
	// stuck: why this node waits for an operator (empty: it does not).
	// Set only through setStuck, which also publishes it to Status.
	stuck string
	snap  *incomingSnap

	// Split brain (splitbrain.go). bothLeadSince: detector time since
	// which both nodes lead and this one does not yield (0: not so).
	// conflictSet: the conflict record of the split brain this node lost
	// and has not yet merged. mergeRev: the loser waits for the leader's
	// revision to pass it before it resyncs (0: not merging); mergeAsked:
	// when it last asked. mergedAbove: on the leader, the revision its
	// last merge jumped to.
	bothLeadSince int64
	conflictSet   string
	mergeRev      int64
	mergeAsked    int64
	mergedAbove   int64

	// handover is the hand-over of the primary role under way from this
	// node (nil: none); tookOver is the epoch this node last took over.
	handover  *handover
	handoverc chan *handover
	tookOver  repl.Epoch
	// adoptForwards: the next role change from replica proposes the
	// writes this node forwarded instead of failing them (takeOver).
	adoptForwards bool

	// The fence command runs in fencer, off the apply loop: fenceReq
	// starts it, fenceRes brings its result back (both hold one). fencing:
	// it runs; fenced: it just succeeded (set only while onFenced
	// evaluates the role rules).
	fenceReq chan struct{}
	fenceRes chan error
	fencing  bool
	fenced   bool

	// Shared with request goroutines (atomics).
	role       atomic.Uint32 // repl.Role
	stuckWhy   atomic.Pointer[string]
	leader     atomic.Uint64 // member ID of the primary this node knows (0: none)
	leaseUntil atomic.Int64  // detector time until which this node holds its peer's lease
	nextReq    atomic.Uint64
	peerID     atomic.Uint64 // the peer's member ID, from its messages (0: not heard)
	// handoffUntil: until this detector time, writes that find this node
	// not leading wait for the primary it handed over to (0: none).
	handoffUntil atomic.Int64
	// resyncing: a snapshot is requested or being installed (snapReq !=
	// 0). The state is about to be replaced, so the replica holds no read
	// lease meanwhile (HasLeader).
	resyncing atomic.Bool
	// Guarded by Server.mu.
	fwdWait map[uint64]*proposal
	kaWait  map[uint64]chan repl.Reply
}

// syncMark is what a solo leader notes to judge whether its replica has
// caught up (see caughtUp). It belongs to one solo epoch.
type syncMark struct {
	epoch   repl.Epoch // the solo epoch it belongs to (another: start afresh)
	samples []idxAt    // the leader's applied index at recent judgements, oldest first
	acked   uint64     // the replica's newest ack in this epoch
	since   int64      // detector time since which every judgement found it caught up (0: the last did not)
}

// idxAt is an index at a detector time.
type idxAt struct {
	at  int64
	idx uint64
}

// pending is a locally committed leader batch waiting for the replica.
type pending struct {
	last    uint64
	from    int64 // the batch's first revision (rev+1 if it made none)
	rev     int64
	at      int64 // detector time of the local commit
	events  []mvccEvent
	batch   []*proposal
	results []applyResult
	jobs    []compactJob
	merged  bool // holds the merge after a split brain: every watch ends
}

func newReplState(cfg ReplConfig) *replState {
	if cfg.Lease <= 0 {
		cfg.Lease = time.Second
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 2 * cfg.Lease
	}
	r := &replState{
		cfg:      cfg,
		tr:       cfg.Transport,
		det:      newDetector(cfg.Lease),
		inbox:    make(chan *transport.Message, 4096),
		catchupc: make(chan catchupJob, 16),
		dedup:    newDedup(1 << 16),
		fwdWait:  map[uint64]*proposal{},
		kaWait:   map[uint64]chan repl.Reply{},
	}
	r.acc.init(cfg.MinProtocol)
	r.tr = r.acc.stamp(cfg.Transport)
	r.handoverc = make(chan *handover, 1)
	r.fenceReq, r.fenceRes = make(chan struct{}, 1), make(chan error, 1)
	r.started = r.det.Now()
	// A random start keeps a restarted node from reusing the IDs of its
	// previous run, whose answers may still arrive.
	r.reqSeq = rand.Uint64() >> 1
	// Request IDs must differ from every earlier run's: the primary's
	// dedup ring still holds them (it would drop this run's writes as
	// duplicates), and an entry of an earlier run met in a catch-up
	// would answer a new caller waiting on the same ID. Each run counts
	// from a random start below 2^63: two runs' ranges overlap only with
	// probability about (IDs used) / 2^63, and a run never wraps to 0
	// (0 means "no request" in an entry).
	r.nextReq.Store(rand.Uint64() >> 1)
	return r
}

// newDetector times leases with lease. After a freeze of this node long
// enough that its peer's DDS may have dropped it (half the DDS participant
// lease, leaving margin for how late the freeze is noticed), it waits out a
// participant lease plus a peer lease before it declares the peer dead, so
// that a thawed node first finds its peer again. A shorter stall, common on
// a loaded machine, only restarts the count of the peer's silence: a grace
// there turned some 1.2 s failovers into 3.2 s ones in the bench's kill
// series.
func newDetector(lease time.Duration) *repl.Detector {
	d := repl.NewDetector(lease, lease/10+10*time.Millisecond)
	d.FreezeGrace = ddsParticipantLease + lease
	d.FreezeGraceFrom = ddsParticipantLease / 2
	return d
}

// ddsParticipantLease is internal/dds's DefaultLeaseDuration, restated so
// that this package stays free of the cgo binding.
const ddsParticipantLease = 2 * time.Second

// Role is the node's replication role (RolePrimary... ; a single node
// reports RoleSolo).
func (s *Server) Role() repl.Role {
	if s.repl == nil {
		return repl.RoleSolo
	}
	return repl.Role(s.repl.role.Load())
}

// LeaderID is the member ID of the primary this node knows: itself while
// leading, its primary while it holds that primary's lease, else 0.
func (s *Server) LeaderID() uint64 {
	if s.repl == nil {
		return s.memberID
	}
	if !s.HasLeader() {
		return 0
	}
	return s.repl.leader.Load()
}

// HasLeader reports whether the node knows a valid primary: itself while
// leading, or a primary whose lease it holds.
func (s *Server) HasLeader() bool {
	if s.repl == nil {
		return true
	}
	switch s.Role() {
	case repl.RoleSolo:
		return true
	case repl.RolePrimary, repl.RoleReplica:
		if s.Role() == repl.RoleReplica && s.repl.resyncing.Load() {
			return false // replacing its state from a snapshot
		}
		return s.repl.det.Now() < s.repl.leaseUntil.Load()
	}
	return false
}

// errNoPrimary: the node knows no valid primary (etcd's "no leader").
var errNoPrimary = fmt.Errorf("no primary: %w", rpctypes.ErrNoLeader)

func (s *Server) hasLeaderLocked() bool {
	// HasLeader takes no lock; it only reads atomics.
	return s.HasLeader()
}

// loadEpochs reads the epoch history at start.
func (s *Server) loadEpochs() error {
	r := s.repl
	return s.be.View(func(tx storage.ReadTx) error {
		h, err := repl.Epochs(tx)
		if err != nil {
			return err
		}
		r.epochs = h
		last := repl.Last(h)
		r.ledLast = last.Epoch.Node == s.memberID && !last.Epoch.IsZero()
		r.maxTerm = s.term.Load()
		if last.Epoch.Term > r.maxTerm {
			r.maxTerm = last.Epoch.Term
		}
		return nil
	})
}

// sharedIdx is an index up to which both nodes' logs are known to hold the
// same entries (repl.TrimEpochs): what a replica acknowledged to this node
// as primary, or, as a replica that its leader confirmed, what it applied.
func (s *Server) sharedIdx() uint64 {
	r := s.repl
	shared := r.ackIdx
	if s.Role() == repl.RoleReplica && r.verified && s.appliedIdx > shared {
		shared = s.appliedIdx
	}
	return shared
}

// newEpoch starts and persists an epoch led by this node, from the next
// index on.
func (s *Server) newEpoch(solo bool) error { return s.newEpochAt(solo, s.appliedIdx+1) }

// newEpochAt starts an epoch whose first index is start. Going solo starts
// the epoch at the first unacknowledged entry: those entries are about to
// be acknowledged alone, so a rejoin must treat them as a solo suffix.
func (s *Server) newEpochAt(solo bool, start uint64) error {
	r := s.repl
	term := r.maxTerm + 1
	if r.peer.MaxTerm >= term {
		term = r.peer.MaxTerm + 1
	}
	rec := repl.EpochRecord{Epoch: repl.Epoch{Term: term, Node: s.memberID}, Start: start, Solo: solo}
	var epochs []repl.EpochRecord
	err := s.be.Update(func(tx storage.WriteTx) error {
		if err := repl.PutEpoch(tx, rec); err != nil {
			return err
		}
		// Every role change adds a record: keep the history bounded.
		var err error
		if epochs, err = repl.TrimEpochs(tx, append(r.epochs[:len(r.epochs):len(r.epochs)], rec), s.sharedIdx()); err != nil {
			return err
		}
		return tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(term))
	})
	if err != nil {
		return err
	}
	r.epochs = epochs
	r.maxTerm = term
	r.ledLast = true
	s.mu.Lock()
	s.term.Store(term)
	s.epoch = rec.Epoch
	s.mu.Unlock()
	return nil
}

func (s *Server) setRole(role repl.Role, why string) {
	r := s.repl
	old := repl.Role(r.role.Swap(uint32(role)))
	if old == role {
		return
	}
	s.log.Warn("role change", "from", old.String(), "to", role.String(), "why", why, "epoch", s.currentEpoch().String(), "applied-index", s.appliedIdx,
		"peer-heard-ago", r.det.HeardAgo(r.det.Now()).Round(time.Millisecond).String(), "peer-role", r.peer.Role.String())
	s.m.Role.Set(float64(role))
	if old == repl.RoleReplica {
		// Forwarded requests may or may not be applied by a later
		// primary: their callers get "request timed out", never a guess.
		// Taking over from a primary that handed over, none of them was
		// logged: this node proposes them (takeOver).
		s.mu.Lock()
		for id, p := range r.fwdWait {
			if r.adoptForwards {
				r.fwdq = append(r.fwdq, p)
			} else {
				p.done <- applyResult{err: rpctypes.ErrGRPCTimeout}
			}
			delete(r.fwdWait, id)
		}
		r.adoptForwards = false
		for id, c := range r.kaWait {
			c <- repl.Reply{ReqID: id, Err: repl.ReplyNotPrimary}
			delete(r.kaWait, id)
		}
		s.mu.Unlock()
	}
	switch role {
	case repl.RolePrimary, repl.RoleSolo:
		r.leader.Store(s.memberID)
	case repl.RoleReplica:
		r.leader.Store(r.following.Node)
	default:
		r.leader.Store(0)
	}
	if role.Leads() {
		s.m.HasLeader.Set(1)
		s.m.IsLeader.Set(1)
		s.m.LeaderChanges.Inc()
	} else {
		s.m.IsLeader.Set(0)
		if role == repl.RoleWaiting {
			s.m.HasLeader.Set(0)
		}
	}
}

func (s *Server) currentEpoch() repl.Epoch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// sendHeartbeat is called from the apply loop.
func (s *Server) sendHeartbeat() {
	r := s.repl
	now := r.det.Now()
	role := s.Role()
	var start uint64
	if role.Leads() && len(r.epochs) > 0 {
		start = repl.Last(r.epochs).Start
	}
	var sentAt, echo int64
	var echoRun uint64
	// The leader withholds its echo (the replica's read lease) while the
	// replica is not synchronous: in solo, once acks are overdue, and in a
	// synchronous epoch until the replica has acknowledged everything
	// before the epoch's start (writes acknowledged while solo).
	// A replica's echo is its primary's role lease; a waiting node grants
	// nothing (its peer may be about to follow it, or to lead).
	grant := role == repl.RoleReplica ||
		role == repl.RolePrimary && !s.ackOverdue(now) && r.ackIdx+1 >= start
	if grant {
		sentAt, echo = r.det.Outgoing(now)
		echoRun = r.det.PeerRun()
	} else {
		sentAt = now
	}
	epoch := s.currentEpoch()
	if role == repl.RoleReplica {
		epoch = r.following
	}
	var soloFrom uint64
	if role.Leads() {
		soloFrom = repl.SoloFrom(r.epochs, s.memberID)
	}
	hb := repl.Heartbeat{
		EpochStart: start, SoloFrom: soloFrom,
		Role: role, Epoch: epoch, Applied: s.appliedIdx, Commit: s.commitIdx(),
		Rev: s.store.ReadableRev(), SentAt: sentAt, Echo: echo, LedLast: r.ledLast, MaxTerm: r.maxTerm,
		CatchingUp: role == repl.RoleReplica && !r.verified, HeardAgo: r.det.Silence(now),
		Run: r.det.Run, EchoRun: echoRun,
	}
	if err := r.tr.Send(&transport.Message{Class: transport.Heartbeat, Kind: repl.KindHeartbeat, Term: hb.Epoch.Term, Index: hb.Applied, Payload: hb.Encode()}); err != nil {
		s.log.Debug("heartbeat not sent", "err", err)
	}
}
