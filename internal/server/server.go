package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/auth"
	"github.com/dyad-db/dyad/internal/lease"
	"github.com/dyad-db/dyad/internal/mvcc"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
	"github.com/dyad-db/dyad/internal/wal"
	"github.com/dyad-db/dyad/internal/watch"
)

// EtcdVersion is the etcd version dyad reports. It must be a plain release
// of at least 3.5.13 (no pre-release suffix): kube-apiserver then relies on
// progress notifications, which dyad implements with etcd's semantics.
const EtcdVersion = "3.5.17"

// Config configures one node.
type Config struct {
	Name    string
	DataDir string
	// ClientURLs are advertised in MemberList.
	ClientURLs []string
	PeerURLs   []string

	MaxRequestBytes   int
	MaxTxnOps         int
	QuotaBackendBytes int64

	AutoCompactionMode      string // "periodic" or "revision"
	AutoCompactionRetention string // duration or hours ("periodic"), revisions ("revision")

	// WatchProgressNotifyInterval is the period of progress_notify.
	WatchProgressNotifyInterval time.Duration
	// MinLeaseTTL in seconds (etcd: 2 with its default election timeout).
	MinLeaseTTL int64
	// UnsafeNoFsync disables fsync (benchmarks of upper layers only).
	UnsafeNoFsync bool
	// BackendBatchInterval and BackendBatchLimit bound how long and how
	// many writes the data file holds uncommitted (journaled already);
	// zero: storage's defaults, etcd's.
	BackendBatchInterval time.Duration
	BackendBatchLimit    int
	// JournalMaxBytes bounds the journal: past it, the loop commits the
	// data file and empties the journal inline. Zero: 64 MiB.
	JournalMaxBytes int64

	// ClusterID, when not zero, is the pair's cluster ID (derived from
	// --initial-cluster and its token); a data dir created for another
	// cluster is refused. MemberID likewise names this member.
	ClusterID uint64
	MemberID  uint64
	// Repl, when set, makes the node one of a two-zone pair.
	Repl *ReplConfig
	// Peer is the other member of a pair as configured (ID, name, peer
	// URLs); MemberList shows it until the peer announces itself.
	Peer *Member

	Logger  *slog.Logger
	Metrics *Metrics
}

// Defaults returns etcd's defaults.
func Defaults() Config {
	return Config{
		Name:                        "default",
		MaxRequestBytes:             1.5 * 1024 * 1024,
		MaxTxnOps:                   128,
		QuotaBackendBytes:           2 * 1024 * 1024 * 1024,
		AutoCompactionMode:          "periodic",
		AutoCompactionRetention:     "0",
		WatchProgressNotifyInterval: 10 * time.Minute,
		MinLeaseTTL:                 2,
	}
}

// DBPath is where a data dir keeps its data file (etcd's layout).
func DBPath(dataDir string) string { return filepath.Join(dataDir, "member", "snap", "db") }

// dyad's own keys in etcd's meta bucket (etcd ignores unknown keys).
var (
	metaClusterID = []byte("dyad_cluster_id")
	metaMemberID  = []byte("dyad_member_id")
)

// Server is one node's state machine.
type Server struct {
	cfg Config
	log *slog.Logger
	m   *Metrics
	be  *storage.Backend
	// journal makes a batch durable before the data file's commit
	// (journal.go). Used only by the apply loop, New and Close.
	journal *wal.Journal
	store   *mvcc.Store
	lessor  *lease.Lessor
	auth    *auth.Store
	hub     *watch.Hub
	leaseID *lease.IDGen

	clusterID uint64
	memberID  uint64
	// peerMembers: the peer's member record, for MemberList (own lock).
	peerMembers peerMembers
	// rtt and rttAt: the newest replication round trip (ns) and when it
	// was timed (detector clock; 0: none yet), for PairStatus.
	rtt, rttAt atomic.Int64
	term       atomic.Uint64 // current epoch term; persisted before first use

	// dbSize is the data file's size as last noted (noteSize), at most
	// noteSizeEvery of sizeClock's time before a write's quota check
	// (sizeAt) asks, and noSpace mirrors alarms[NOSPACE] (set under mu
	// with it): the quota check on every write reads both without a lock,
	// and opens a read transaction of the data file only when the noted
	// size is stale.
	dbSize  atomic.Int64
	sizeAt  atomic.Int64 // sizeClock time of the last noteSize, ns
	noSpace atomic.Bool
	// sizeClock is the monotonic origin of sizeAt (set by New).
	sizeClock time.Time

	proposals chan *proposal
	compactc  chan compactJob
	stopped   chan struct{} // closed when the applier has stopped
	readyc    chan struct{} // closed when Run has started everything

	repl *replState // nil for a single node

	// compactMu is held by the compactor while it deletes revisions, and
	// by a snapshot install, so that no compaction planned on the old data
	// file runs on the new one. Lock order: compactMu before mu.
	compactMu sync.Mutex

	// visible is closed and replaced whenever the visible revision grows
	// (linearizable reads on the primary wait on it). Guarded by mu.
	visible chan struct{}

	// mu guards the fields below.
	mu         sync.Mutex
	epoch      repl.Epoch // the epoch of the newest entry (or the one being led)
	appliedIdx uint64
	alarms     map[pb.AlarmType]bool
	fatal      error
}

// New opens (or creates) the data dir and rebuilds the node's state.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = cfg.Name + ".dyad"
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		m:         cfg.Metrics,
		lessor:    lease.New(cfg.MinLeaseTTL, nil),
		auth:      auth.New(),
		proposals: make(chan *proposal, 4096),
		compactc:  make(chan compactJob, 16),
		stopped:   make(chan struct{}),
		readyc:    make(chan struct{}),
		alarms:    map[pb.AlarmType]bool{},
		visible:   make(chan struct{}),
		sizeClock: time.Now(),
	}
	if cfg.Repl != nil {
		s.repl = newReplState(*cfg.Repl)
		s.repl.tr = newMeteredTransport(s.repl.tr, s.m, &s.repl.peerID, s.onPeerMember)
	}
	be, err := storage.Open(DBPath(cfg.DataDir), storage.Options{
		NoSync:        cfg.UnsafeNoFsync,
		BatchInterval: cfg.BackendBatchInterval,
		BatchLimit:    cfg.BackendBatchLimit,
		// The journal's fdatasync is FsyncDuration (journalBatch).
		OnCommit: func(d time.Duration) { s.m.CommitDuration.Observe(d.Seconds()) },
	})
	if err != nil {
		return nil, err
	}
	s.be = be
	if err := s.bootstrap(); err != nil {
		be.Close()
		return nil, err
	}
	store, err := mvcc.Open(be, s.lessor)
	if err != nil {
		be.Close()
		return nil, err
	}
	s.store = store
	if err := be.View(s.lessor.Load); err != nil {
		be.Close()
		return nil, err
	}
	if err := be.View(s.auth.Load); err != nil {
		be.Close()
		return nil, err
	}
	store.AttachLeases(s.lessor)
	// Entries journaled after the data file's last commit, through the
	// replica's apply path, before the core reads the log.
	if err := s.openJournal(); err != nil {
		be.Close()
		return nil, err
	}
	s.leaseID = lease.NewIDGen(s.memberID, time.Now())
	s.hub = watch.NewHub(store, watch.Options{ProgressInterval: cfg.WatchProgressNotifyInterval, OnUnsync: s.m.WatchUnsynced.Inc})
	s.m.QuotaBytes.Set(float64(cfg.QuotaBackendBytes))
	if s.repl != nil {
		if err := s.startCore(); err != nil {
			s.journal.Close()
			be.Close()
			return nil, err
		}
		s.m.HasLeader.Set(0)
		s.m.IsLeader.Set(0)
	} else {
		s.m.HasLeader.Set(1)
		s.m.IsLeader.Set(1)
	}
	s.refreshGauges()
	rev, _, compacted := store.Revs()
	s.log.Info("store opened", "data-dir", cfg.DataDir, "revision", rev, "compact-revision", compacted,
		"applied-index", s.appliedIdx, "term", s.term.Load(), "leases", s.lessor.Count(),
		"cluster-id", fmt.Sprintf("%x", s.clusterID), "member-id", fmt.Sprintf("%x", s.memberID))
	return s, nil
}

// bootstrap reads or creates the node's identity, alarms and log position,
// and persists a new term for this run before anything is acknowledged.
func (s *Server) bootstrap() error {
	return s.be.Update(func(tx storage.WriteTx) error {
		s.clusterID = storage.Uint64(tx.Get(storage.BucketMeta, metaClusterID))
		s.memberID = storage.Uint64(tx.Get(storage.BucketMeta, metaMemberID))
		if c := s.cfg.ClusterID; c != 0 && s.clusterID != 0 && s.clusterID != c {
			return fmt.Errorf("data dir %s belongs to cluster %x, not %x (--initial-cluster or its token differ)", s.cfg.DataDir, s.clusterID, c)
		}
		if s.clusterID == 0 && s.cfg.ClusterID != 0 {
			s.clusterID = s.cfg.ClusterID
			if err := tx.Put(storage.BucketMeta, metaClusterID, storage.PutUint64(s.clusterID)); err != nil {
				return err
			}
		}
		if s.memberID == 0 && s.cfg.MemberID != 0 {
			s.memberID = s.cfg.MemberID
			if err := tx.Put(storage.BucketMeta, metaMemberID, storage.PutUint64(s.memberID)); err != nil {
				return err
			}
		}
		if s.memberID == 0 {
			s.memberID = randomID()
			if err := tx.Put(storage.BucketMeta, metaMemberID, storage.PutUint64(s.memberID)); err != nil {
				return err
			}
		}
		if s.clusterID == 0 {
			s.clusterID = randomID()
			if err := tx.Put(storage.BucketMeta, metaClusterID, storage.PutUint64(s.clusterID)); err != nil {
				return err
			}
		}
		s.appliedIdx = storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaConsistentIndex))
		s.term.Store(storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaTerm)) + 1)
		if err := tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(s.term.Load())); err != nil {
			return err
		}
		if err := tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(s.appliedIdx)); err != nil {
			return err
		}
		// etcd 3.6 recognises a 3.5-schema file by confState + term; the
		// single voter is this member.
		cs, _ := json.Marshal(map[string]any{"voters": []uint64{s.memberID}, "auto_leave": false})
		if err := tx.Put(storage.BucketMeta, storage.MetaConfState, cs); err != nil {
			return err
		}
		return s.loadAlarms(tx)
	})
}

// loadAlarms reads the raised alarms (at start, and after installing the
// leader's snapshot).
func (s *Server) loadAlarms(tx storage.ReadTx) error {
	alarms := map[pb.AlarmType]bool{}
	err := tx.Scan(storage.BucketAlarm, nil, nil, func(k, _ []byte) (bool, error) {
		var am pb.AlarmMember
		if err := am.Unmarshal(k); err != nil {
			return false, fmt.Errorf("%w: alarm: %v", storage.ErrCorrupt, err)
		}
		alarms[am.Alarm] = true
		return true, nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.alarms = alarms
	s.noSpace.Store(alarms[pb.AlarmType_NOSPACE])
	s.mu.Unlock()
	return nil
}

// deleteAlarms removes every member's record of alarm a.
func deleteAlarms(tx storage.WriteTx, a pb.AlarmType) error {
	var keys [][]byte
	err := tx.Scan(storage.BucketAlarm, nil, nil, func(k, _ []byte) (bool, error) {
		var am pb.AlarmMember
		if err := am.Unmarshal(k); err == nil && am.Alarm == a {
			keys = append(keys, append([]byte(nil), k...))
		}
		return true, nil
	})
	for _, k := range keys {
		if err == nil {
			err = tx.Delete(storage.BucketAlarm, k)
		}
	}
	return err
}

func randomID() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err) // crypto/rand never fails on Linux
		}
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// Run starts the node's goroutines and blocks until ctx is done and every
// one of them has stopped.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	run := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
				select {
				case errc <- err:
				default:
				}
				cancel()
			}
		}()
	}
	if s.repl != nil {
		// Before the apply loop runs: a loop that waits in its transport
		// (loopwait.go) needs the transport started. Messages that arrive
		// meanwhile wait in the transport or the inbox.
		r := s.repl
		var err error
		if b := r.batcher(); b != nil {
			err = b.StartBatch(r.offer)
		} else {
			err = r.tr.Start(func(m *transport.Message) {
				m.Received = r.clock.Now()
				select {
				case r.inbox <- m:
				case <-ctx.Done():
				}
			})
		}
		if err != nil {
			close(s.stopped) // as the apply loop would have, stopping
			return err
		}
	}
	run(func(ctx context.Context) error { s.hub.Run(ctx); return nil })
	run(s.applier)
	run(s.compactor)
	run(s.leaseExpiry)
	run(s.autoCompact)
	run(s.gaugeLoop)
	if s.repl != nil {
		r := s.repl
		run(s.catchupServer)
		run(s.logTrimmer)
		run(s.announceLoop)
		if r.cfg.Fence != nil {
			run(s.fencer)
		}
	}
	close(s.readyc)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// Close releases the transport, the journal and the data file. Call after
// Run has returned. A clean stop leaves the journal empty (closeJournal).
func (s *Server) Close() error {
	if s.repl != nil {
		s.repl.tr.Close()
	}
	err := s.closeJournal()
	if cerr := s.be.Close(); err == nil {
		err = cerr
	}
	return err
}

// signalVisible wakes the readers waiting for the visible revision.
func (s *Server) signalVisible() {
	s.mu.Lock()
	close(s.visible)
	s.visible = make(chan struct{})
	s.mu.Unlock()
}

// waitVisible waits until the visible revision reaches rev.
func (s *Server) waitVisible(ctx context.Context, rev int64) error {
	for {
		s.mu.Lock()
		c := s.visible
		s.mu.Unlock()
		if s.store.ReadableRev() >= rev {
			return nil
		}
		select {
		case <-c:
		case <-ctx.Done():
			return ctxErr(ctx)
		case <-s.stopped:
			return errStopped
		}
	}
}

// Hub is the node's watch hub.
func (s *Server) Hub() *watch.Hub { return s.hub }

// Store is the node's key space (read-only use).
func (s *Server) Store() *mvcc.Store { return s.store }

// Lessor is the node's lessor.
func (s *Server) Lessor() *lease.Lessor { return s.lessor }

// Config returns the configuration in force.
func (s *Server) Config() Config { return s.cfg }

// IDs returns the cluster and member IDs.
func (s *Server) IDs() (cluster, member uint64) { return s.clusterID, s.memberID }

// Term is the node's current epoch term.
func (s *Server) Term() uint64 { return s.term.Load() }

// FillHeader sets the identity fields of a response header.
func (s *Server) FillHeader(h *pb.ResponseHeader) {
	if h == nil {
		return
	}
	h.ClusterId = s.clusterID
	h.MemberId = s.memberID
	h.RaftTerm = s.term.Load()
}

// Header returns a filled header at rev.
func (s *Server) Header(rev int64) *pb.ResponseHeader {
	h := &pb.ResponseHeader{Revision: rev}
	s.FillHeader(h)
	return h
}

// Healthy reports nil when the node can serve: not stopped by a fatal
// storage error, and no alarm raised.
func (s *Server) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal != nil {
		return s.fatal
	}
	if !s.hasLeaderLocked() {
		return errNoPrimary
	}
	for a, on := range s.alarms {
		if on {
			return fmt.Errorf("alarm %s raised", a)
		}
	}
	return nil
}

// Alarms lists the raised alarms.
func (s *Server) Alarms() []*pb.AlarmMember {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.AlarmMember
	for a, on := range s.alarms {
		if on {
			out = append(out, &pb.AlarmMember{MemberID: s.memberID, Alarm: a})
		}
	}
	return out
}

// noSpaceOn reports whether the NOSPACE alarm is raised.
func (s *Server) noSpaceOn() bool { return s.noSpace.Load() }

// noteSize records the data file's size for the quota check.
func (s *Server) noteSize() int64 {
	n := s.be.Size()
	s.dbSize.Store(n)
	return n
}

// noteSizeEvery is how old, at most, the size a write's quota check
// reads may be. The file grows only when the backend commits, in the
// background (every 100 ms by default), so reading it for every write
// would mostly read the same size again, and cost a read transaction of
// the data file per write.
const noteSizeEvery = 10 * time.Millisecond

// dbSizeForQuota is the data file's size for a write's quota check: the
// noted one, noted again first when it is older than noteSizeEvery (by
// one of the writes that find it so). It never runs on the apply loop,
// which must not wait for the backend's locks.
func (s *Server) dbSizeForQuota() int64 {
	now := int64(time.Since(s.sizeClock))
	last := s.sizeAt.Load()
	if now-last >= int64(noteSizeEvery) && s.sizeAt.CompareAndSwap(last, now) {
		return s.noteSize()
	}
	return s.dbSize.Load()
}

// Ready is closed once Run has started every goroutine.
func (s *Server) Ready() <-chan struct{} { return s.readyc }

func (s *Server) refreshGauges() {
	s.m.DBSize.Set(float64(s.noteSize()))
	s.m.DBSizeInUse.Set(float64(s.be.SizeInUse()))
	readable, _, compacted := s.store.Revs()
	s.m.Revision.Set(float64(readable))
	s.m.CompactRevision.Set(float64(compacted))
	s.m.Leases.Set(float64(s.lessor.Count()))
}

func (s *Server) gaugeLoop(ctx context.Context) error {
	every(ctx, 5*time.Second, s.refreshGauges)
	return nil
}

// every calls fn each period until ctx is done.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// errStopped is what callers get once the node is shutting down.
var errStopped = rpctypes.ErrGRPCStopped
