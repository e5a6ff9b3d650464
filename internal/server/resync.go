package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dyad-db/dyad/internal/failpoint"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
)

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
	if r.snap == nil { // the first chunk of the answer (accept checked it)
		f, err := os.CreateTemp(filepath.Dir(s.be.Path()), "resync-in-*")
		if err != nil {
			s.log.Error("cannot receive snapshot", "err", err)
			return
		}
		r.snap = &incomingSnap{id: m.Term, f: f}
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
