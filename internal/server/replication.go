package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/failpoint"
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
	recv     recvState // how the transport fills inbox (inbox.go)

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

func (s *Server) commitIdx() uint64 {
	r := s.repl
	switch s.Role() {
	case repl.RolePrimary:
		return r.ackIdx
	}
	return s.appliedIdx
}

// ackOverdue reports an entry unacknowledged for AckTimeout of this node's
// own running time (a freeze of this node restarts the count).
func (s *Server) ackOverdue(now int64) bool {
	r := s.repl
	if len(r.inflight) == 0 || r.det.InFreezeGrace(now) {
		return false
	}
	since := r.inflight[0].at
	if rs := r.det.RunningSince(); rs > since {
		since = rs
	}
	return now-since > int64(r.cfg.AckTimeout)
}

// onTick runs the detector and the role rules; called from the apply loop
// every Lease/8.
func (s *Server) onTick(ctx context.Context) {
	r := s.repl
	now := r.det.Now()
	r.det.Tick(now)
	s.sendHeartbeat()
	s.replGauges(now)
	s.splitBrainTick(now)
	s.evaluate(ctx, now)
	r.leaseUntil.Store(r.det.LeaseUntil())
	if s.Role() == repl.RoleReplica {
		// Lost or unanswered: ask again, in the same series.
		switch {
		case r.catchupReq != 0 && now-r.catchupAsked > int64(r.cfg.Lease):
			s.askCatchup()
		case r.snapReq != 0 && now-r.catchupAsked > int64(snapPatience(r.cfg.Lease)):
			s.log.Warn("no snapshot chunk for a while; asking again", "waited", time.Duration(now-r.catchupAsked).Round(time.Millisecond).String())
			s.askSnapshot(r.snapMin)
		}
	}
}

// replGauges refreshes the replication metrics (apply loop, every tick).
func (s *Server) replGauges(now int64) {
	r := s.repl
	role := s.Role()
	s.m.Epoch.Set(float64(s.currentEpoch().Term))
	s.m.AppliedIndex.Set(float64(s.appliedIdx))
	s.m.CommitIndex.Set(float64(s.commitIdx()))
	alive := 0.0
	if s.peerFresh(now) {
		alive = 1
	}
	s.m.PeerAlive.Set(alive)
	lag := 0.0
	if s.peerFresh(now) {
		switch {
		case role.Leads():
			lag = float64(s.store.ReadableRev() - r.peer.Rev)
		case role == repl.RoleReplica:
			lag = float64(r.peer.Rev - s.store.ReadableRev())
		}
		if lag < 0 {
			lag = 0
		}
	}
	s.m.LagRevisions.Set(lag)
	if role == repl.RoleSolo {
		s.m.SoloSeconds.Add((r.cfg.Lease / 8).Seconds())
	}
}

// peerFresh reports whether the peer's last heartbeat is recent enough to
// act on what it says (a node thawing from a freeze holds stale news).
func (s *Server) peerFresh(now int64) bool {
	return s.repl.peerSeen && s.repl.det.PeerHeard(now)
}

// evaluate applies the role rules (docs/ARCHITECTURE.md, "Roles").
func (s *Server) evaluate(ctx context.Context, now int64) {
	r := s.repl
	// Notice a freeze of this node before judging anything: a message
	// handled right after a thaw must not find the peer "dead" or acks
	// "overdue" by the frozen time.
	r.det.Tick(now)
	fresh := s.peerFresh(now)
	switch s.Role() {
	case repl.RoleWaiting:
		if r.stuck != "" {
			return
		}
		if r.handover != nil && r.handover.sent {
			s.evaluateHandedOver(ctx, now, fresh)
			return
		}
		waited := now-r.started > 2*int64(r.cfg.Lease)
		switch {
		case fresh && r.peer.Role == repl.RoleSolo && r.ledLast && s.wroteAlone() && !s.yieldsTo(&r.peer) && r.holdOff == "":
			// Restarted after a split in which this node should win:
			// lead again, and the peer yields when it hears it. Only
			// after a real split, one in which this node acknowledged
			// writes alone: one that led a synchronous epoch and
			// crashed was replaced by its replica, whose solo writes
			// would otherwise go to conflict records after a single
			// fault if both sides then wrote (the next case follows).
			s.lead(ctx, "restarted after a split brain that this node wins")
		case fresh && r.peer.Role.Leads():
			s.follow()
		case fresh && r.peer.Role == repl.RoleReplica && r.ledLast:
			// Back before the replica promoted: lead again; it follows.
			// Only once it has heard this node lately: a replica still
			// counting the silence of this node's previous run may be
			// promoting right now (both would lead in the same term).
			// And only once it has heard this run: until then it may
			// still hold a read lease from this node's previous run,
			// which ended without expiring it.
			if s.peerHearsNow(now) && r.det.PeerKnowsRun(&r.peer) {
				s.lead(ctx, "restarted before the replica took over")
			}
		case fresh && r.peer.Role == repl.RoleWaiting:
			// Cold start of both: the one that led last leads; a fresh
			// pair is started by the bootstrap node.
			lead := r.ledLast && !r.peer.LedLast ||
				r.ledLast && r.peer.LedLast && r.cfg.Preferred ||
				!r.ledLast && !r.peer.LedLast && s.appliedIdx == 0 && r.peer.Applied == 0 && r.cfg.Bootstrap
			// A peer that does not hear this node and led last leads
			// alone by the next rule; this one then follows it.
			if lead && waited && (r.holdOff == "" || !r.peer.LedLast) {
				s.lead(ctx, "cold start of both nodes")
			}
		case !fresh && waited && r.holdOff == "" && (r.ledLast || r.cfg.Bootstrap && s.appliedIdx == 0 && len(r.epochs) == 0):
			s.lead(ctx, "peer absent; this node led last")
		}
	case repl.RoleReplica:
		if fresh && r.peer.Role.Leads() {
			r.following = r.peer.Epoch
			r.leader.Store(r.following.Node)
		}
		s.fetchIfStalled(now, fresh)
		if r.det.PeerDead(now) && r.det.PeerLeaseExpired(now) {
			if r.holdOff != "" {
				// The primary stopped hearing this node before it fell
				// silent here: it has gone solo (a one-way link failure).
				s.setRole(repl.RoleWaiting, "the primary stopped hearing this node and leads alone: waiting for it (or dyad force-primary)")
				return
			}
			// Only a synchronous replica may take over: one that was
			// catching up from a solo primary lacks acknowledged writes.
			syncHB := r.peer.Role == repl.RolePrimary && s.appliedIdx+1 >= r.peer.EpochStart
			syncEntries := !r.lastSolo && !r.lastEpoch.IsZero() && !r.lastEpoch.Less(r.peer.Epoch)
			if syncHB || syncEntries {
				s.promote(ctx)
			} else {
				s.setRole(repl.RoleWaiting, "the primary was lost while this node was still catching up; it holds writes this node never saw: waiting for it (or dyad force-primary)")
			}
		}
	case repl.RolePrimary:
		if fresh && r.peer.Role.Leads() && r.peer.Epoch.Term > s.currentEpoch().Term {
			s.countFalseFailover(now)
			s.stepDown("peer leads a newer epoch")
			return
		}
		if (r.det.PeerDead(now) || s.ackOverdue(now)) && r.det.PeerLeaseExpired(now) {
			if r.holdOff != "" {
				// The replica stopped hearing this node: it takes over
				// (a one-way link failure). Going solo too would split
				// the pair; wait for it instead. This node still led
				// last: if the replica does not take over, it leads
				// again when they meet.
				s.stepDown("the replica stopped hearing this node and takes over: waiting for it (or dyad force-primary)")
				return
			}
			s.goSolo("replica lost")
		}
	case repl.RoleSolo:
		if fresh && r.peer.Role.Leads() {
			s.splitLeaders(now)
			return
		}
		r.bothLeadSince = 0
		following := fresh && r.peer.Role == repl.RoleReplica && !r.peer.CatchingUp && r.peer.Epoch.Node == s.memberID
		if s.caughtUp(now, following) {
			if err := s.newEpoch(false); err != nil {
				s.fail(err)
				return
			}
			r.ackIdx = r.peer.Applied
			s.setRole(repl.RolePrimary, "replica caught up")
		}
	}
}

// fetchIfStalled asks for catch-up when this replica has stood still for a
// quarter lease while its leader reports more entries applied. A gap is
// otherwise found only when the next live entry arrives: the entries sent
// while the link was down would wait for the next write, and on an idle
// pair the leader would never count the replica as caught up.
func (s *Server) fetchIfStalled(now int64, fresh bool) {
	r := s.repl
	if !fresh || !r.peer.Role.Leads() || r.peer.Applied <= s.appliedIdx || r.catchupReq != 0 || r.snapReq != 0 {
		r.behind = 0
		return
	}
	if r.behind == 0 || r.behindAt != s.appliedIdx {
		r.behind, r.behindAt = now, s.appliedIdx
		return
	}
	if now-r.behind > int64(r.cfg.Lease/4) {
		r.behind = 0
		s.askCatchup()
	}
}

// caughtUp judges, in solo, whether the replica (following this node, per
// its newest heartbeat) has caught up, and has stayed so for a lease. At
// each judgement it is caught up when its heartbeats or acks show that it
// holds every entry this node had applied a quarter lease ago (everything,
// on an idle pair). Acks are cumulative, so a synchronous epoch can start
// while the replica is that little behind; the epoch's entries wait for it.
// A replica further behind, too slow for the load, stays outside, and the
// lease of judgements keeps out one that only looked caught up in a quiet
// moment: going synchronous with it would stall writes until its acks were
// overdue and this node went solo again, every --ack-timeout.
func (s *Server) caughtUp(now int64, following bool) bool {
	r := s.repl
	m := &r.mark
	if epoch := s.currentEpoch(); m.epoch != epoch {
		*m = syncMark{epoch: epoch}
	}
	// The target: the applied index of the newest sample at least a
	// quarter lease old (drop the older ones), or, without one, all.
	target := s.appliedIdx
	lag := now - int64(r.cfg.Lease/4)
	for len(m.samples) > 0 && m.samples[0].at <= lag {
		if len(m.samples) > 1 && m.samples[1].at <= lag {
			m.samples = m.samples[1:]
			continue
		}
		target = m.samples[0].idx
		break
	}
	m.samples = append(m.samples, idxAt{at: now, idx: s.appliedIdx})
	ok := following && max(r.peer.Applied, m.acked) >= target
	switch {
	case !ok:
		m.since = 0
	case m.since == 0:
		m.since = now
	}
	return ok && now-m.since >= int64(r.cfg.Lease)
}

// goSolo makes the synchronous primary lead alone: the entries not yet
// acknowledged by the replica start a solo epoch and are released. Only
// once the replica cannot serve reads any more (its read lease expired, or
// it said it is leaving).
func (s *Server) goSolo(why string) {
	r := s.repl
	start := s.appliedIdx + 1
	if len(r.inflight) > 0 {
		start = r.ackIdx + 1
	}
	if err := s.newEpochAt(true, start); err != nil {
		s.fail(err)
		return
	}
	s.m.SoloEntered.Inc()
	s.setRole(repl.RoleSolo, why)
	s.releaseCommitted()
}

// leave runs as the apply loop stops: a replica gives up its read lease
// (it serves no linearizable read from now on) and then tells its primary,
// which leads alone at once instead of waiting out the silence and the
// lease (about a second of stalled writes on every rolling restart).
func (s *Server) leave() {
	r := s.repl
	if r == nil || s.Role() != repl.RoleReplica {
		return
	}
	r.leaseUntil.Store(0)
	s.setRole(repl.RoleWaiting, "stopping")
	run := binary.BigEndian.AppendUint64(nil, r.det.Run)
	if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindLeaving, Term: r.following.Term, Payload: run}); err != nil {
		s.log.Debug("leaving message not sent", "err", err)
	}
}

// peerHearsNow reports whether the peer has heard this node within the
// last Lease/2, as of now: the silence its last heartbeat reported plus
// that heartbeat's age. A peer that hears this node does not declare it
// dead for at least another Lease/2.
func (s *Server) peerHearsNow(now int64) bool {
	r := s.repl
	if !s.peerFresh(now) || r.peer.HeardAgo < 0 {
		return false
	}
	return r.det.HeardAgo(now)+r.peer.HeardAgo <= r.cfg.Lease/2
}

// countFalseFailover counts a takeover by the peer while this node led
// and had not been frozen within the last lease (its freeze grace ended
// before that): the peer judged a live primary dead.
func (s *Server) countFalseFailover(now int64) {
	r := s.repl
	if !r.det.InFreezeGrace(now - int64(r.cfg.Lease)) {
		s.m.FalseFailovers.Inc()
	}
}

// wroteAlone reports whether this node acknowledged writes alone in its
// trailing run of solo epochs.
func (s *Server) wroteAlone() bool {
	from := repl.SoloFrom(s.repl.epochs, s.memberID)
	return from != 0 && s.appliedIdx >= from
}

// yieldsTo applies repl.YieldAfterSplit between this node and a leading
// peer.
func (s *Server) yieldsTo(peer *repl.Heartbeat) bool {
	from := repl.SoloFrom(s.repl.epochs, s.memberID)
	return repl.YieldAfterSplit(from != 0 && s.appliedIdx >= from, peer.WroteSolo(), s.repl.cfg.Preferred)
}

// lead makes this node the leader after a start.
func (s *Server) lead(ctx context.Context, why string) {
	if err := s.newEpoch(true); err != nil {
		s.fail(err)
		return
	}
	s.lessor.ResetDeadlines()
	s.setRole(repl.RoleSolo, why)
}

// promote makes the replica the leader after its primary's lease expired.
// With a fence command, the first call starts it (fencer) and returns; the
// apply loop goes on (heartbeats, messages) while it runs, and onFenced
// promotes if it succeeded and the reasons to promote still hold.
func (s *Server) promote(ctx context.Context) {
	r := s.repl
	if r.cfg.Fence != nil && !r.fenced {
		if !r.fencing {
			r.fencing = true
			r.fenceReq <- struct{}{} // never blocks: one fence at a time
			s.log.Warn("primary lost: running the fence command before promoting")
		}
		return
	}
	if err := s.newEpoch(true); err != nil {
		s.fail(err)
		return
	}
	// Every lease gets its full TTL from now, as etcd does on a leader
	// change; the old primary's deadlines are never used.
	s.lessor.ResetDeadlines()
	r.det.ForgetPeer()
	r.leaseUntil.Store(0)
	s.m.Failovers.Inc()
	s.setRole(repl.RoleSolo, "primary lost")
}

// onFenced takes the fence command's result in the apply loop. A success
// counts only for the promotion it was run for: the role rules are
// evaluated again now, and promote, if they still call for it, goes
// ahead without another fence.
func (s *Server) onFenced(ctx context.Context, err error) {
	r := s.repl
	r.fencing = false
	if s.Role() != repl.RoleReplica {
		return // the role changed while it ran
	}
	if err != nil {
		s.log.Error("fence command failed; not promoting", "err", err)
		s.setRole(repl.RoleWaiting, "fence failed")
		return
	}
	r.fenced = true
	s.evaluate(ctx, r.det.Now())
	r.fenced = false
}

// fenceTimeout is how long one fence run may take (ReplConfig.FenceTimeout).
func (c *ReplConfig) fenceTimeout() time.Duration {
	if c.FenceTimeout > 0 {
		return c.FenceTimeout
	}
	return 5 * c.Lease
}

// fencer runs the fence command off the apply loop, one request at a
// time, and hands each result back to it. Owned by Run.
func (s *Server) fencer(ctx context.Context) error {
	r := s.repl
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.fenceReq:
		}
		fctx, cancel := context.WithTimeout(ctx, r.cfg.fenceTimeout())
		err := r.cfg.Fence(fctx)
		cancel()
		select {
		case r.fenceRes <- err:
		case <-ctx.Done():
			return nil
		}
	}
}

// stepDown leaves leadership; queued and in-flight writes get "request
// timed out" (they may be in the log that a later primary keeps or drops).
// Their revisions stay applied here but invisible, and their events are
// dropped: if the later primary keeps them, the next batch this node makes
// visible covers them and the watch hub replays them (Hub.NotifyFrom).
func (s *Server) stepDown(why string) {
	r := s.repl
	for _, p := range r.inflight {
		for _, q := range p.batch {
			if q.done != nil {
				q.done <- applyResult{err: rpctypes.ErrGRPCTimeout}
			}
		}
	}
	r.inflight = nil
	r.fwdq = nil
	s.setRole(repl.RoleWaiting, why)
}

// follow makes this node the replica of its peer.
func (s *Server) follow() {
	r := s.repl
	r.det.ForgetPeer()
	r.leaseUntil.Store(0)
	r.verified = false
	r.mergeRev = 0
	r.following = r.peer.Epoch
	r.ledLast = false
	r.catchupReq = 0 // answers to requests made before describe an older peer
	s.setRole(repl.RoleReplica, "following "+r.peer.Epoch.String())
	s.askCatchup()
}

// askCatchup asks the leader for the entries after the applied index. It
// abandons a snapshot being requested or received. A request for the same
// position as the outstanding one continues its series.
func (s *Server) askCatchup() {
	r := s.repl
	s.endResync()
	var prev repl.Epoch
	if s.appliedIdx > 0 {
		// The epoch stored with the entry itself (the epoch history may
		// place it in a later solo epoch that adopted it).
		s.be.View(func(tx storage.ReadTx) error {
			e, ok, err := repl.Get(tx, s.appliedIdx)
			if ok && err == nil {
				prev = e.Epoch
			}
			return err
		})
	}
	req := repl.CatchupReq{From: s.appliedIdx + 1, Prev: prev}
	id := s.nextReqID()
	if r.catchupReq == 0 || r.catchupPos != req {
		r.catchupFirst = id
	}
	r.catchupReq, r.catchupPos = id, req
	r.catchupAsked = r.det.Now()
	if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindCatchupReq, Term: id, Index: req.From, Payload: req.Encode()}); err != nil {
		s.log.Warn("catch-up request not sent", "err", err)
	}
}

// fail stops the node after a storage failure.
func (s *Server) fail(err error) {
	s.mu.Lock()
	if s.fatal == nil {
		s.fatal = fmt.Errorf("storage commit failed: %w", err)
	}
	s.mu.Unlock()
	s.log.Error("storage failure; refusing requests", "err", err)
}

// onMessage handles one received message in the apply loop.
func (s *Server) onMessage(ctx context.Context, m *transport.Message) {
	r := s.repl
	switch m.Kind {
	case repl.KindHeartbeat:
		hb, err := repl.DecodeHeartbeat(m.Payload)
		if err != nil {
			return
		}
		now := r.det.Now()
		if r.det.Ended(hb.Run) {
			return // sent by a run of the peer that has ended
		}
		if r.peerSeen && hb.Run == r.peer.Run && hb.SentAt < r.peer.SentAt && (hb.Run != 0 || r.peer.SentAt-hb.SentAt < int64(r.cfg.Lease)) {
			// Overtaken by a newer one of the same run (heartbeats travel
			// best effort). Without runs (an older peer), a much older
			// SentAt is a restarted peer's new clock.
			return
		}
		r.peerID.Store(m.From)
		r.det.Heard(&hb, m.Received)
		r.peer, r.peerSeen = hb, true
		r.holdOff = ""
		if r.det.PeerDeaf(&hb, m.Received) {
			r.holdOff = "the peer does not hear this node"
		}
		if hb.MaxTerm > r.maxTerm {
			r.maxTerm = hb.MaxTerm
		}
		r.leaseUntil.Store(r.det.LeaseUntil())
		s.evaluate(ctx, now)
	case repl.KindAck:
		if s.Role() == repl.RoleSolo && m.Index > r.mark.acked && r.mark.epoch == s.currentEpoch() {
			r.mark.acked = m.Index // progress of a replica catching up (caughtUp)
		}
		if s.Role() == repl.RolePrimary && m.Index > r.ackIdx {
			if failpoint.Hit(failpoint.BeforeRelease) != nil {
				return // an injected error loses the ack; a later one covers it
			}
			r.ackIdx = m.Index
			s.releaseCommitted()
		}
	case repl.KindEntries, repl.KindCatchup:
		if s.Role() != repl.RoleReplica {
			return
		}
		if m.Kind == repl.KindCatchup {
			if r.catchupReq == 0 || m.Term < r.catchupFirst || m.Term > r.catchupReq {
				s.m.StaleAnswers.Inc() // not an answer to the outstanding request
				return
			}
			r.catchupReq = 0
			if m.Flags != 0 {
				s.onCatchupRefused(m)
				return
			}
		}
		es, err := repl.DecodeEntries(m.Payload)
		if err != nil {
			s.log.Error("bad entries from peer", "err", err)
			return
		}
		var later []*transport.Message
		if m.Kind == repl.KindEntries {
			// Apply every live batch already waiting in one commit, as the
			// leader does with proposals; other messages follow after.
			es, later = s.gatherEntries(es)
		}
		s.followEntries(es, m.Kind == repl.KindCatchup)
		for _, m := range later {
			s.onMessage(ctx, m)
		}
	case repl.KindForward:
		f, err := repl.DecodeForward(m.Payload)
		if err != nil {
			return
		}
		s.onForward(m.From, f)
	case repl.KindReply:
		rp, err := repl.DecodeReply(m.Payload)
		if err != nil {
			return
		}
		s.mu.Lock()
		c := r.kaWait[rp.ReqID]
		delete(r.kaWait, rp.ReqID)
		s.mu.Unlock()
		if c != nil {
			c <- rp
		}
	case repl.KindCatchupReq, repl.KindSnapReq:
		if !s.Role().Leads() {
			return
		}
		job := catchupJob{id: m.Term, snapshot: m.Kind == repl.KindSnapReq}
		if !job.snapshot {
			c, err := repl.DecodeCatchupReq(m.Payload)
			if err != nil {
				return
			}
			job.req = c
		}
		select {
		case r.catchupc <- job:
		default: // the requester asks again
		}
	case repl.KindSnapChunk:
		if s.Role() == repl.RoleReplica {
			s.onSnapChunk(m)
		}
	case repl.KindMergeReq:
		e := repl.Entry{Data: m.Payload}
		if rev, err := e.MergeRev(); err == nil {
			s.onMergeReq(rev)
		}
	case repl.KindLeaving:
		// Only from the peer's current run: a late message of an earlier
		// run must not end a later synchronous epoch (the later run may
		// hold a read lease in it). The run, not the term, names it: the
		// replica learns a new epoch's term from heartbeats, a tick after
		// the epoch starts, and a message naming the older term is as
		// good. A sender without runs names the epoch's term.
		current := len(m.Payload) == 8 && binary.BigEndian.Uint64(m.Payload) == r.det.PeerRun()
		if len(m.Payload) == 0 {
			current = m.Term == s.currentEpoch().Term
		}
		if !current {
			return
		}
		// The run's heartbeats still in flight are stale: the peer is
		// gone until a new run is heard.
		r.det.PeerLeft()
		r.peerSeen = false
		if s.Role() == repl.RolePrimary {
			s.goSolo("the replica is stopping")
		}
	case repl.KindHandover:
		s.onHandover(m)
	case repl.KindHandoverAck:
		s.onHandoverAck(m)
	}
}

// gatherEntries appends to es the live entries of the messages already
// waiting in the inbox (up to maxBatch entries), and returns the other
// messages it took, in order.
func (s *Server) gatherEntries(es []repl.Entry) ([]repl.Entry, []*transport.Message) {
	var later []*transport.Message
	for len(es) < maxBatch {
		select {
		case m := <-s.repl.inbox:
			if m.Kind != repl.KindEntries {
				later = append(later, m)
				continue
			}
			more, err := repl.DecodeEntries(m.Payload)
			if err != nil || len(more) == 0 || more[0].Index != es[len(es)-1].Index+1 {
				later = append(later, m) // not contiguous: handled on its own
				continue
			}
			es = append(es, more...)
		default:
			return es, later
		}
	}
	return es, later
}

// onForward takes a request forwarded by the replica.
func (s *Server) onForward(from uint64, f repl.Forward) {
	r := s.repl
	switch f.Op {
	case repl.ForwardKeepAlive:
		rp := repl.Reply{ReqID: f.ReqID}
		// A primary without its role lease answers as LeaseRenew does.
		if !s.Role().Leads() || s.Role() == repl.RolePrimary && !s.HasLeader() {
			rp.Err = repl.ReplyNotPrimary
		} else if len(f.Data) == 8 {
			ttl, err := s.lessor.Renew(int64(binary.BigEndian.Uint64(f.Data)))
			rp.TTL = ttl
			if err != nil {
				rp.Err = repl.ReplyLeaseNotFound
			}
		}
		r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindReply, Payload: rp.Encode()})
	case repl.ForwardWrite:
		if !s.Role().Leads() || !r.dedup.add(from, f.ReqID) {
			return // the replica's caller times out; a duplicate is dropped
		}
		req := &pb.InternalRaftRequest{}
		if err := req.Unmarshal(f.Data); err != nil {
			return
		}
		r.fwdq = append(r.fwdq, &proposal{req: req, origin: from, reqID: f.ReqID})
	}
}

// followEntries applies entries received from the primary, in order.
func (s *Server) followEntries(es []repl.Entry, fromCatchup bool) {
	r := s.repl
	if fromCatchup {
		// The leader checked the epoch of our entry before the first one
		// asked for. Only an answer to the outstanding request gets here:
		// an older one may have checked a log this node no longer has.
		r.verified = true
	}
	i := 0
	for i < len(es) && es[i].Index <= s.appliedIdx {
		i++ // already applied (catch-up overlapping the live stream)
	}
	es = es[i:]
	if len(es) == 0 {
		if fromCatchup {
			return // caught up
		}
		return
	}
	if !r.verified || es[0].Index != s.appliedIdx+1 {
		// Not yet known to be a prefix of the leader's log, or a gap:
		// the live stream ran ahead of us. Fetch from the log.
		if r.catchupReq == 0 && r.snapReq == 0 {
			s.askCatchup()
		}
		return
	}
	if es[0].Epoch.Term < s.currentEpoch().Term {
		return // an old epoch's samples
	}
	if fromCatchup {
		if err := failpoint.Hit(failpoint.CatchupApply); err != nil {
			s.fail(err)
			return
		}
	}
	if err := s.applyFollowed(es); err != nil {
		s.fail(err)
		return
	}
	// An injected error before the ack drops it, as a lost message would.
	if failpoint.Hit(failpoint.BeforeAck) == nil {
		r.tr.Send(&transport.Message{Class: transport.Ack, Kind: repl.KindAck, Index: s.appliedIdx})
		_ = failpoint.Hit(failpoint.AfterAck) // an error here has nothing left to undo
	}
	if fromCatchup {
		s.askCatchup() // the next chunk, or an empty answer when caught up
	}
}

// applyFollowed applies and persists entries as the replica.
func (s *Server) applyFollowed(es []repl.Entry) error {
	r := s.repl
	results := make([]applyResult, len(es))
	var events []mvccEvent
	var jobs []compactJob
	epoch := s.currentEpoch()
	merged := false
	var newEpochs []repl.EpochRecord
	_, before, _ := s.store.Revs()
	shared := s.sharedIdx() // before this batch: applied from the leader
	var trimmed []repl.EpochRecord
	err := s.be.Update(func(tx storage.WriteTx) error {
		for i := range es {
			e := &es[i]
			req := &pb.InternalRaftRequest{}
			if !e.Merge {
				if err := req.Unmarshal(e.Data); err != nil {
					return fmt.Errorf("entry %d: %w", e.Index, err)
				}
			}
			if e.Epoch != epoch {
				rec := repl.EpochRecord{Epoch: e.Epoch, Start: e.Index}
				if err := repl.PutEpoch(tx, rec); err != nil {
					return err
				}
				newEpochs = append(newEpochs, rec)
				epoch = e.Epoch
			}
			var res applyResult
			var evs []mvccEvent
			var job *compactJob
			var err error
			if e.Merge {
				var rev int64
				if rev, err = e.MergeRev(); err == nil {
					job, err = s.applyMerge(tx, rev)
				}
				merged = true
			} else {
				res, evs, job, err = s.apply(tx, req)
			}
			if err != nil {
				return err
			}
			if _, rev, _ := s.store.Revs(); e.Rev != 0 && rev != e.Rev {
				return fmt.Errorf("entry %d: revision %d here, %d on the leader: the histories differ", e.Index, rev, e.Rev)
			}
			if job != nil {
				jobs = append(jobs, *job)
				res.physical = job.done
			}
			results[i] = res
			events = append(events, evs...)
			if err := repl.Append(tx, e); err != nil {
				return err
			}
		}
		if len(newEpochs) > 0 {
			var err error
			if trimmed, err = repl.TrimEpochs(tx, append(r.epochs[:len(r.epochs):len(r.epochs)], newEpochs...), shared); err != nil {
				return err
			}
		}
		last := es[len(es)-1].Index
		if err := tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(last)); err != nil {
			return err
		}
		return tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(epoch.Term))
	})
	if err != nil {
		return err
	}
	if len(newEpochs) > 0 {
		r.epochs = trimmed
	}
	r.lastEpoch, r.lastSolo = es[len(es)-1].Epoch, es[len(es)-1].Solo
	s.mu.Lock()
	s.appliedIdx = es[len(es)-1].Index
	s.epoch = epoch
	s.term.Store(epoch.Term)
	if epoch.Term > r.maxTerm {
		r.maxTerm = epoch.Term
	}
	s.mu.Unlock()
	_, cur, _ := s.store.Revs()
	s.store.MarkDurable(cur)
	// Revisions up to before that the hub never got (the batches a
	// step-down dropped, now confirmed by the new primary's log) are
	// visible from now on too: their watchers replay them from history.
	s.hub.NotifyFrom(before+1, cur, events)
	if merged {
		s.hub.Reset()
		s.log.Warn("merged after a split brain: every watch was cancelled as compacted", "revision", cur)
	}
	s.signalVisible()
	for _, j := range jobs {
		s.compactc <- j
	}
	s.m.ProposalsApplied.Add(float64(len(es)))
	s.mu.Lock()
	for i := range es {
		if es[i].Origin != s.memberID || es[i].ReqID == 0 {
			continue
		}
		if p := r.fwdWait[es[i].ReqID]; p != nil {
			delete(r.fwdWait, es[i].ReqID)
			p.done <- results[i]
		}
	}
	s.mu.Unlock()
	return nil
}

// releaseCommitted answers every leader batch the commit rule allows.
func (s *Server) releaseCommitted() {
	r := s.repl
	var commit uint64
	switch s.Role() {
	case repl.RolePrimary:
		commit = r.ackIdx
	case repl.RoleSolo:
		commit = s.appliedIdx
	default:
		return // not leading: nothing of ours is acknowledged any more
	}
	n := 0
	for _, p := range r.inflight {
		if p.last > commit {
			break
		}
		if s.Role() == repl.RolePrimary {
			s.observeAckRoundTrip(time.Duration(r.det.Now() - p.at))
		}
		s.release(p)
		n++
	}
	r.inflight = r.inflight[n:]
}

// release makes a committed batch visible and answers its callers.
func (s *Server) release(p *pending) {
	s.store.MarkDurable(p.rev)
	// From the batch's first revision: batches dropped by a step-down
	// below it become visible with it (their watchers replay them).
	s.hub.NotifyFrom(p.from, p.rev, p.events)
	if p.merged {
		s.hub.Reset()
		s.log.Warn("merged after a split brain: every watch was cancelled as compacted", "revision", p.rev)
	}
	s.signalVisible()
	for _, j := range p.jobs {
		s.compactc <- j
	}
	for i, q := range p.batch {
		if q.done != nil {
			q.done <- p.results[i]
		}
	}
}

// forward sends a write to the primary and waits for the local result of
// the entry that carries it.
func (s *Server) forward(ctx context.Context, req *pb.InternalRaftRequest) (applyResult, error) {
	r := s.repl
	data, err := req.Marshal()
	if err != nil {
		return applyResult{}, err
	}
	id := r.nextReq.Add(1)
	p := &proposal{req: req, done: make(chan applyResult, 1)}
	s.mu.Lock()
	r.fwdWait[id] = p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(r.fwdWait, id)
		s.mu.Unlock()
	}()
	if s.Role() != repl.RoleReplica {
		// The role changed as this was registered. If setRole did not
		// take it (to answer or adopt it), nothing was sent: go again.
		s.mu.Lock()
		_, ours := r.fwdWait[id]
		delete(r.fwdWait, id)
		s.mu.Unlock()
		if ours {
			return applyResult{err: errRedirect}, nil
		}
	} else {
		f := repl.Forward{Op: repl.ForwardWrite, ReqID: id, Data: data}
		if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindForward, Index: id, Payload: f.Encode()}); err != nil {
			return applyResult{}, rpctypes.ErrGRPCNoLeader // not sent: no effect
		}
	}
	wait := time.NewTimer(r.cfg.AckTimeout + 5*r.cfg.Lease)
	defer wait.Stop()
	select {
	case res := <-p.done:
		return res, nil
	case <-wait.C:
		return applyResult{}, rpctypes.ErrGRPCTimeout
	case <-ctx.Done():
		return applyResult{}, rpctypes.ErrGRPCTimeout
	case <-s.stopped:
		return applyResult{}, rpctypes.ErrGRPCTimeout
	}
}

// forwardKeepAlive renews a lease through the primary.
func (s *Server) forwardKeepAlive(ctx context.Context, id int64) (int64, error) {
	r := s.repl
	reqID := r.nextReq.Add(1)
	c := make(chan repl.Reply, 1)
	s.mu.Lock()
	r.kaWait[reqID] = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(r.kaWait, reqID)
		s.mu.Unlock()
	}()
	f := repl.Forward{Op: repl.ForwardKeepAlive, ReqID: reqID, Data: binary.BigEndian.AppendUint64(nil, uint64(id))}
	if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindForward, Index: reqID, Payload: f.Encode()}); err != nil {
		return 0, rpctypes.ErrGRPCNoLeader
	}
	wait := time.NewTimer(5 * r.cfg.Lease)
	defer wait.Stop()
	select {
	case rp := <-c:
		switch rp.Err {
		case repl.ReplyOK:
			return rp.TTL, nil
		case repl.ReplyLeaseNotFound:
			return 0, rpctypes.ErrGRPCLeaseNotFound
		}
		return 0, rpctypes.ErrGRPCNoLeader
	case <-wait.C:
		return 0, rpctypes.ErrGRPCTimeout
	case <-ctx.Done():
		return 0, ctxErr(ctx)
	}
}

// catchupJob is a catch-up or snapshot request for the catch-up server.
type catchupJob struct {
	id       uint64 // the request's ID: every answer carries it (Message.Term)
	req      repl.CatchupReq
	snapshot bool
}

// catchupServer answers catch-up and snapshot requests off the apply loop.
// Owned by Run.
func (s *Server) catchupServer(ctx context.Context) error {
	r := s.repl
	for {
		var job catchupJob
		select {
		case <-ctx.Done():
			return nil
		case job = <-r.catchupc:
		}
		if job.snapshot {
			if err := s.sendSnapshot(ctx, job.id); err != nil {
				s.log.Error("snapshot for the replica failed", "err", err)
			}
			continue
		}
		m, err := s.catchupAnswer(job.id, job.req)
		if err == nil {
			err = failpoint.Hit(failpoint.CatchupServe)
		}
		if err != nil {
			s.log.Error("catch-up read failed", "err", err)
			continue
		}
		s.m.ResyncBytes.Add(float64(len(m.Payload)))
		if err := r.tr.Send(m); err != nil {
			s.log.Warn("catch-up not sent", "err", err)
		}
	}
}

// catchupAnswer reads the entries a catch-up request asks for, or says
// why the log cannot serve it.
func (s *Server) catchupAnswer(id uint64, c repl.CatchupReq) (*transport.Message, error) {
	const chunk = 4 << 20
	m := &transport.Message{Class: transport.Catchup, Kind: repl.KindCatchup, Term: id, Index: c.From}
	err := s.be.View(func(tx storage.ReadTx) error {
		first, last, err := repl.Bounds(tx)
		if err != nil {
			return err
		}
		diverged := func() error {
			h, err := repl.Epochs(tx)
			m.Flags, m.Payload = repl.FlagDiverged, repl.EncodeEpochs(h)
			return err
		}
		if c.From > 1 {
			switch {
			case c.From-1 > last:
				return diverged() // the asker has entries this log lacks
			case first == 0 || c.From-1 < first:
				m.Flags = repl.FlagLogGone
				return nil
			}
			prev, ok, err := repl.Get(tx, c.From-1)
			if err != nil {
				return err
			}
			if !ok {
				m.Flags = repl.FlagLogGone
				return nil
			}
			if prev.Epoch != c.Prev {
				return diverged()
			}
		} else if first > 1 {
			m.Flags = repl.FlagLogGone
			return nil
		}
		es, err := repl.Read(tx, c.From, chunk)
		m.Payload = repl.EncodeEntries(es)
		return err
	})
	return m, err
}

// snapChunk is the size of one snapshot message.
const snapChunk = 1 << 20

// sendSnapshot streams an etcd-format snapshot of the data file to the
// replica, as the answer to its request id.
func (s *Server) sendSnapshot(ctx context.Context, id uint64) error {
	f, err := os.CreateTemp(filepath.Dir(s.be.Path()), "resync-out-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := s.be.Snapshot(f, nil); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	buf := make([]byte, snapChunk)
	var off uint64
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n, rerr := io.ReadFull(f, buf)
		m := &transport.Message{Class: transport.Catchup, Kind: repl.KindSnapChunk, Term: id, Index: off, Payload: buf[:n]}
		last := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !last {
			return rerr
		}
		if last {
			m.Flags = repl.FlagLast
		}
		if err := s.repl.tr.Send(m); err != nil {
			return err
		}
		s.m.ResyncBytes.Add(float64(n))
		off += uint64(n)
		if last {
			s.log.Info("snapshot sent to the replica", "bytes", off)
			return nil
		}
	}
}

// incomingSnap is a snapshot being received.
type incomingSnap struct {
	id  uint64
	off uint64
	f   *os.File
}

// onCatchupRefused handles a catch-up the leader cannot serve from its log
// (an answer to the outstanding request).
func (s *Server) onCatchupRefused(m *transport.Message) {
	r := s.repl
	keep := s.appliedIdx
	if m.Flags&repl.FlagDiverged != 0 {
		leader, err := repl.DecodeEpochs(m.Payload)
		if err != nil {
			return
		}
		if repl.SoloSuffix(r.epochs, leader, s.memberID, s.appliedIdx) {
			// Writes this node acknowledged alone are not in the
			// leader's history: split brain. They are never truncated
			// before they are kept as conflict records.
			s.onSplitBrain(leader)
			return
		}
		keep = repl.Divergence(r.epochs, leader, s.appliedIdx)
		s.log.Warn("dropping a synchronous suffix that was never acknowledged: resyncing from the leader", "applied-index", s.appliedIdx, "common-prefix", keep)
	} else {
		s.log.Warn("the leader's log no longer reaches this node: resyncing from a snapshot", "applied-index", s.appliedIdx)
	}
	s.askSnapshot(keep)
}

// snapPatience is how long a replica waits for the next chunk of the
// snapshot it asked for before it asks again. Building a snapshot takes
// time in proportion to the data, not to the lease: asking again every
// lease made the leader build one snapshot after another.
func snapPatience(lease time.Duration) time.Duration { return max(20*lease, 10*time.Second) }

// nextReqID returns a new catch-up or snapshot request ID.
func (s *Server) nextReqID() uint64 {
	s.repl.reqSeq++
	return s.repl.reqSeq
}

// askSnapshot asks the leader for a snapshot of its data file that holds
// at least the entries up to index floor. From now until it is installed
// (or abandoned) the replica is not verified and holds no read lease. A
// request repeated with the same floor continues the series.
func (s *Server) askSnapshot(floor uint64) {
	r := s.repl
	if r.snap != nil {
		r.snap.f.Close()
		os.Remove(r.snap.f.Name())
		r.snap = nil
	}
	id := s.nextReqID()
	if r.snapReq == 0 || r.snapMin != floor {
		r.snapFirst = id
	}
	r.snapReq, r.snapMin = id, floor
	r.catchupReq = 0
	r.verified = false
	r.resyncing.Store(true)
	r.leaseUntil.Store(0)
	r.catchupAsked = r.det.Now()
	if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindSnapReq, Term: id, Index: floor}); err != nil {
		s.log.Warn("snapshot request not sent", "err", err)
	}
}

// endResync forgets the outstanding snapshot request and any snapshot
// being received.
func (s *Server) endResync() {
	r := s.repl
	if r.snap != nil {
		r.snap.f.Close()
		os.Remove(r.snap.f.Name())
		r.snap = nil
	}
	r.snapReq = 0
	r.resyncing.Store(false)
}

// errStaleSnapshot: a snapshot older than the replica's floor (snapMin).
var errStaleSnapshot = errors.New("the snapshot is older than this node's state")

// onSnapChunk writes one chunk of the snapshot this replica asked for; the
// last one installs it. Chunks of any other stream are ignored: a
// snapshot nobody asked for may be older than what this node applied.
func (s *Server) onSnapChunk(m *transport.Message) {
	r := s.repl
	if r.snap == nil {
		if r.snapReq == 0 || m.Term < r.snapFirst || m.Term > r.snapReq || m.Index != 0 {
			s.m.StaleAnswers.Inc()
			return
		}
		f, err := os.CreateTemp(filepath.Dir(s.be.Path()), "resync-in-*")
		if err != nil {
			s.log.Error("cannot receive snapshot", "err", err)
			return
		}
		r.snap = &incomingSnap{id: m.Term, f: f}
	} else if m.Term != r.snap.id {
		s.m.StaleAnswers.Inc()
		return
	}
	r.catchupAsked = r.det.Now()
	sn := r.snap
	if m.Index != sn.off {
		s.log.Warn("snapshot chunk out of order; asking again", "want", sn.off, "got", m.Index)
		s.askSnapshot(r.snapMin)
		return
	}
	if _, err := sn.f.Write(m.Payload); err != nil {
		s.fail(err)
		return
	}
	sn.off += uint64(len(m.Payload))
	if m.Flags&repl.FlagLast == 0 {
		return
	}
	r.snap = nil
	path := sn.f.Name()
	defer os.Remove(path)
	if err := sn.f.Sync(); err != nil {
		sn.f.Close()
		s.fail(err)
		return
	}
	sn.f.Close()
	if err := failpoint.Hit(failpoint.SnapshotBeforeInstall); err != nil {
		s.fail(err)
		return
	}
	err := s.installSnapshot(path, r.snapMin)
	if errors.Is(err, errStaleSnapshot) {
		// Nothing was replaced. Start over from the log.
		s.log.Warn("ignoring a snapshot older than this node's state", "err", err)
		s.m.StaleAnswers.Inc()
		s.askCatchup()
		return
	}
	if err != nil {
		s.fail(fmt.Errorf("installing the leader's snapshot: %w", err))
		return
	}
	s.askCatchup()
}

// installSnapshot replaces this node's whole state with the leader's
// snapshot, unless the snapshot's applied index is below floor
// (errStaleSnapshot, nothing changed). The apply loop calls it while
// following, so no write is in progress; the compactor is held off. The
// caller holds no read lease (resyncing) until it returns.
func (s *Server) installSnapshot(path string, floor uint64) error {
	r := s.repl
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	for drained := false; !drained; {
		select {
		case <-s.compactc: // planned on the old file
		default:
			drained = true
		}
	}
	// The file is the leader's: it gets this node's identity before it
	// becomes the data file. Rewritten afterwards, a crash in between left
	// a data file naming the leader, and the restarted node took itself
	// for its peer (it then led with the snapshot's old history and the
	// real leader discarded its acknowledged writes as a split-brain loser).
	err := s.be.Replace(path, func(tx storage.WriteTx) error {
		if c := storage.Uint64(tx.Get(storage.BucketMeta, metaClusterID)); c != s.clusterID {
			return fmt.Errorf("the leader's snapshot belongs to cluster %x, not %x", c, s.clusterID)
		}
		if ci := storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaConsistentIndex)); ci < floor {
			return fmt.Errorf("%w: it holds entries up to %d, this node needs at least %d", errStaleSnapshot, ci, floor)
		}
		return tx.Put(storage.BucketMeta, metaMemberID, storage.PutUint64(s.memberID))
	})
	if err != nil {
		return err
	}
	if err := failpoint.Hit(failpoint.SnapshotAfterInstall); err != nil {
		return err
	}
	if err := s.store.Reload(); err != nil {
		return err
	}
	if err := s.be.View(s.lessor.Load); err != nil {
		return err
	}
	if err := s.be.View(s.auth.Load); err != nil {
		return err
	}
	if err := s.be.View(s.loadAlarms); err != nil {
		return err
	}
	s.store.AttachLeases(s.lessor)
	var applied uint64
	s.be.View(func(tx storage.ReadTx) error {
		applied = storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaConsistentIndex))
		return nil
	})
	if err := s.loadEpochs(); err != nil {
		return err
	}
	r.ledLast = false
	r.conflictSet = "" // merged: the diverged history is gone, its records stay
	s.mu.Lock()
	s.appliedIdx = applied
	s.epoch = repl.Last(r.epochs).Epoch
	s.mu.Unlock()
	s.hub.Reset()
	s.signalVisible()
	s.refreshGauges()
	s.m.SnapshotsInstalled.Inc()
	s.log.Warn("installed the leader's snapshot; every watch was cancelled as compacted", "applied-index", applied, "revision", s.store.ReadableRev())
	return nil
}

// logTrimmer applies the log retention. Owned by Run.
func (s *Server) logTrimmer(ctx context.Context) error {
	every(ctx, 10*time.Second, func() {
		for {
			var n int
			err := s.be.Update(func(tx storage.WriteTx) error {
				var err error
				n, err = repl.Trim(tx, s.repl.cfg.Retention, time.Now().UnixNano(), 10000)
				return err
			})
			if err != nil {
				s.log.Warn("log trim failed", "err", err)
				return
			}
			if n < 10000 {
				return
			}
		}
	})
	return nil
}

// dedup remembers the newest forwarded request IDs per origin.
type dedup struct {
	max  int
	seen map[[2]uint64]struct{}
	ring [][2]uint64
	next int
}

func newDedup(max int) *dedup { return &dedup{max: max, seen: map[[2]uint64]struct{}{}} }

// add reports false if (origin, id) was seen.
func (d *dedup) add(origin, id uint64) bool {
	k := [2]uint64{origin, id}
	if _, ok := d.seen[k]; ok {
		return false
	}
	if len(d.ring) < d.max {
		d.ring = append(d.ring, k)
	} else {
		delete(d.seen, d.ring[d.next])
		d.ring[d.next] = k
		d.next = (d.next + 1) % d.max
	}
	d.seen[k] = struct{}{}
	return true
}

// ForcePrimary marks the stopped node at dataDir as the last leader, so
// that on its next start it serves alone if its peer is absent: the
// operator's explicit decision to accept losing writes the peer may hold
// that this node never saw. It records a solo epoch led by this node.
func ForcePrimary(dataDir string) (repl.EpochRecord, error) {
	be, err := storage.Open(DBPath(dataDir), storage.Options{})
	if err != nil {
		return repl.EpochRecord{}, err
	}
	defer be.Close()
	var rec repl.EpochRecord
	err = be.Update(func(tx storage.WriteTx) error {
		member := storage.Uint64(tx.Get(storage.BucketMeta, metaMemberID))
		if member == 0 {
			return fmt.Errorf("%s holds no dyad node", dataDir)
		}
		h, err := repl.Epochs(tx)
		if err != nil {
			return err
		}
		term := storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaTerm))
		if t := repl.Last(h).Epoch.Term; t > term {
			term = t
		}
		applied := storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaConsistentIndex))
		rec = repl.EpochRecord{Epoch: repl.Epoch{Term: term + 1, Node: member}, Start: applied + 1, Solo: true}
		if err := repl.PutEpoch(tx, rec); err != nil {
			return err
		}
		return tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(term+1))
	})
	return rec, err
}
