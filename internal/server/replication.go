package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
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

	// build is the range of protocol versions this node's build speaks
	// (zero: this build's). Only tests set it (export_test.go), to stand
	// a node in for an older build.
	build repl.ProtocolRange
}

// replState is the driver's half of replication: the protocol core
// (node, which decides everything) and what carries out its decisions.
// Fields are owned by the apply loop unless noted.
type replState struct {
	cfg   ReplConfig
	tr    transport.Transport
	clock monoClock
	// node is the protocol core (internal/repl): roles, epochs, leases,
	// catch-up, split brain, hand-over. Only the apply loop touches it.
	node *repl.Node
	run  uint64 // this run's identity

	// inbox carries received messages to the apply loop; catchupc carries
	// catch-up requests to the catch-up server.
	inbox    chan *transport.Message
	catchupc chan catchupJob
	recv     recvState // how the transport fills inbox (inbox.go)
	// wait is the transport the apply loop waits in (loopwait.go), or
	// nil. Set at construction; any goroutine may Wake it.
	wait transport.Waiter

	inflight []*pending
	fwdq     []*proposal // forwarded writes (and merges) waiting for the next batch
	dedup    *dedup
	// fromCatchup: the entries of the next Ready came in a catch-up answer.
	fromCatchup bool
	// unshown: entries applied here as the replica that the commit index
	// does not cover yet (unshown.go).
	unshown []unshown
	// commitKept is the commit index of the last Ready handled: the lower
	// bound of the commit index written with each batch, in the data
	// file's transaction and in the journal's record (restartState reads
	// it back as repl.RestartState.Commit). Apply loop only.
	commitKept uint64
	// flushing is the last index of the leader's own batch whose
	// transaction is open (leadBatch): its entries went to the replica
	// before their flush, and persistReady must not write them again.
	// Zero outside that window.
	flushing uint64
	// journaled: a replica's entries that are durable in the journal and
	// reported Persisted but not applied yet (journalFollowed); handleReady
	// applies them once their ack is sent, before it returns. Nil outside
	// that window.
	journaled []repl.Entry
	// out is the turn's outbox: the core's messages queued by sendCore
	// and not yet sent (flushSends). Only the apply loop touches it; it
	// is empty whenever the loop blocks.
	out []*transport.Message

	// snap is the snapshot being received (nil: none); conflictSet the
	// conflict record of the split brain this node lost and has not yet
	// merged.
	snap        *incomingSnap
	conflictSet string

	// handover is the MoveLeader caller waiting for the hand-over under
	// way from this node (nil: none, or one after a storage failure).
	handover  *handover
	handoverc chan *handover

	// The fence command runs in fencer, off the apply loop: fenceReq
	// starts it, fenceRes brings its result back (both hold one).
	fenceReq chan struct{}
	fenceRes chan error

	// Shared with request goroutines (atomics), published from the core's
	// Status after every Ready (publish).
	role       atomic.Uint32 // repl.Role
	stuckWhy   atomic.Pointer[string]
	leader     atomic.Uint64 // member ID of the primary this node knows (0: none)
	leaseUntil atomic.Int64  // clock time until which this node holds its peer's lease
	nextReq    atomic.Uint64
	peerID     atomic.Uint64 // the peer's member ID, configured or from its heartbeats (0: not heard)
	// proto is what the core speaks with the peer (never nil; accept.go).
	proto atomic.Pointer[repl.ProtocolStatus]
	// handoffUntil: until this clock time, writes that find this node
	// not leading wait for the primary it handed over to (0: none).
	handoffUntil atomic.Int64
	// resyncing: a snapshot is requested or being installed. The state is
	// about to be replaced, so the replica holds no read lease meanwhile
	// (HasLeader).
	resyncing atomic.Bool
	// reads: linearizable reads on their way to the core (reads.go).
	reads readQueue
	// Guarded by Server.mu.
	fwdWait map[uint64]*proposal
	kaWait  map[uint64]chan repl.Reply
}

// pending is a locally committed leader batch waiting for the commit
// index to reach it.
type pending struct {
	last    uint64
	from    int64 // the batch's first revision (rev+1 if it made none)
	rev     int64
	at      int64 // clock time of the local commit
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
		clock:    newMonoClock(),
		run:      newRun(),
		inbox:    make(chan *transport.Message, 4096),
		catchupc: make(chan catchupJob, 16),
		dedup:    newDedup(1 << 16),
		reads:    newReadQueue(),
		fwdWait:  map[uint64]*proposal{},
		kaWait:   map[uint64]chan repl.Reply{},
	}
	own := repl.OwnProtocols(cfg.build, cfg.MinProtocol)
	r.proto.Store(&repl.ProtocolStatus{Own: own, Send: own.Min, Heartbeat: own.Min})
	r.tr = r.stamp(cfg.Transport)
	r.wait = r.waiter()
	r.handoverc = make(chan *handover, 1)
	r.fenceReq, r.fenceRes = make(chan struct{}, 1), make(chan error, 1)
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

// coreConfig is the core's configuration for this node. After a freeze of
// this node long enough that its peer's DDS may have dropped it (half the
// DDS participant lease, leaving margin for how late the freeze is
// noticed), it waits out a participant lease plus a peer lease before it
// declares the peer dead, so that a thawed node first finds its peer
// again. A shorter stall, common on a loaded machine, only restarts the
// count of the peer's silence: a grace there turned some 1.2 s failovers
// into 3.2 s ones in the bench's kill series.
func (r *replState) coreConfig(id uint64) repl.Config {
	return repl.Config{
		ID: id, Lease: r.cfg.Lease, AckTimeout: r.cfg.AckTimeout,
		Drift:       r.cfg.Lease/10 + 10*time.Millisecond,
		FreezeGrace: ddsParticipantLease + r.cfg.Lease, FreezeGraceFrom: ddsParticipantLease / 2,
		Bootstrap: r.cfg.Bootstrap, Preferred: r.cfg.Preferred, Fence: r.cfg.Fence != nil,
		ManualSplitBrain: r.cfg.ManualSplitBrain,
		MinProtocol:      r.cfg.MinProtocol,
		Build:            r.cfg.build,
		SnapPatience:     snapPatience(r.cfg.Lease),
		Run:              r.run,
		// A random start keeps a restarted node from reusing the request
		// IDs of its previous run, whose answers may still arrive.
		ReqSeed: rand.Uint64() >> 1,
	}
}

// newRun returns a random run identity (never 0). Two runs of one node
// share an identity with probability 2^-64 per pair.
func newRun() uint64 {
	for {
		if r := rand.Uint64(); r != 0 {
			return r
		}
	}
}

// monoClock reads the monotonic clock as ns since it was made (>= 1), the
// time base of the detector and the role rules. Readings of two processes
// (or two runs) are never compared.
type monoClock struct{ start time.Time }

func newMonoClock() monoClock { return monoClock{start: time.Now()} }

// Now is the clock's reading.
func (c monoClock) Now() int64 { return int64(time.Since(c.start)) + 1 }

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
		return s.repl.clock.Now() < s.repl.leaseUntil.Load()
	}
	return false
}

// errNoPrimary: the node knows no valid primary (etcd's "no leader").
var errNoPrimary = fmt.Errorf("no primary: %w", rpctypes.ErrNoLeader)

func (s *Server) hasLeaderLocked() bool {
	// HasLeader takes no lock; it only reads atomics.
	return s.HasLeader()
}

// restartState reads what the core restarts from: the epoch history, the
// highest term, and the position, epoch and revision of the newest entry.
func (s *Server) restartState() (repl.RestartState, error) {
	st := repl.RestartState{MaxTerm: s.term.Load(), Last: s.appliedIdx, Applied: s.appliedIdx, Now: s.repl.clock.Now()}
	_, st.Rev, _ = s.store.Revs()
	err := s.be.View(func(tx storage.ReadTx) error {
		h, err := replstore.Epochs(tx)
		if err != nil {
			return err
		}
		st.Epochs = h
		st.Followed = replstore.Followed(tx)
		st.Commit = replstore.CommitBound(tx)
		if s.appliedIdx == 0 {
			return nil
		}
		// The epoch stored with the entry itself (the history may place
		// it in a later solo epoch that adopted it).
		e, ok, err := replstore.Get(tx, s.appliedIdx)
		if ok && err == nil {
			st.LastEpoch, st.LastSolo = e.Epoch, e.Solo
		}
		return err
	})
	return st, err
}

// startCore makes the protocol core from the data file, at start and
// after a snapshot install.
func (s *Server) startCore() error {
	st, err := s.restartState()
	if err != nil {
		return err
	}
	cfg := s.repl.coreConfig(s.memberID)
	if s.cfg.Peer != nil {
		cfg.Peer = s.cfg.Peer.ID
	}
	s.repl.node = repl.NewNode(cfg, st)
	if cfg.Peer != 0 {
		s.repl.peerID.Store(cfg.Peer)
	}
	// A new core has not heard the peer: it speaks its lowest version
	// until it does.
	s.setProtocol(s.repl.node.Protocol())
	s.epoch = repl.Last(st.Epochs).Epoch
	return nil
}

func (s *Server) currentEpoch() repl.Epoch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}
