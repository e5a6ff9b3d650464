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
	"github.com/dyad-db/dyad/internal/repl/replstore"
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
		first, last, err := replstore.Bounds(tx)
		if err != nil {
			return err
		}
		var prev repl.Entry
		havePrev := false
		if c.From > 1 && c.From-1 <= last {
			if prev, havePrev, err = replstore.Get(tx, c.From-1); err != nil {
				return err
			}
		}
		switch m.Flags = repl.CatchupVerdict(c, first, last, prev.Epoch, havePrev); m.Flags {
		case repl.FlagDiverged:
			h, err := replstore.Epochs(tx)
			m.Payload = repl.EncodeEpochs(h)
			return err
		case repl.FlagLogGone:
			return nil
		}
		es, err := replstore.Read(tx, c.From, chunk)
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

// snapPatience is how long a replica waits for the next chunk of the
// snapshot it asked for before it asks again. Building a snapshot takes
// time in proportion to the data, not to the lease: asking again every
// lease made the leader build one snapshot after another.
func snapPatience(lease time.Duration) time.Duration { return max(20*lease, 10*time.Second) }

// dropIncoming abandons the snapshot being received, if any.
func (s *Server) dropIncoming() {
	r := s.repl
	if r.snap != nil {
		r.snap.f.Close()
		os.Remove(r.snap.f.Name())
		r.snap = nil
	}
}

// errStaleSnapshot: a snapshot older than the replica's floor (snapMin).
var errStaleSnapshot = errors.New("the snapshot is older than this node's state")

// onSnapChunk writes one chunk of the snapshot this replica asked for
// (the core accepted it: it answers the outstanding request, in order);
// the last one installs it, and the core hears the outcome.
func (s *Server) onSnapChunk(c repl.SnapshotChunk) {
	r := s.repl
	if c.First {
		s.dropIncoming()
		f, err := os.CreateTemp(filepath.Dir(s.be.Path()), "resync-in-*")
		if err != nil {
			s.log.Error("cannot receive snapshot", "err", err)
			return
		}
		r.snap = &incomingSnap{id: c.ID, f: f}
	}
	sn := r.snap
	if sn == nil || sn.id != c.ID {
		return // its start could not be written: the core asks again
	}
	if _, err := sn.f.Write(c.Data); err != nil {
		s.fail(err)
		return
	}
	sn.off += uint64(len(c.Data))
	if !c.Last {
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
	err := s.installSnapshot(path, c.Floor)
	if errors.Is(err, errStaleSnapshot) {
		// Nothing was replaced. Start over from the log.
		s.log.Warn("ignoring a snapshot older than this node's state", "err", err)
		r.node.Installed(repl.RestartState{}, repl.ErrStaleSnapshot)
		return
	}
	if err != nil {
		s.fail(fmt.Errorf("installing the leader's snapshot: %w", err))
		return
	}
	st, err := s.restartState()
	if err != nil {
		s.fail(err)
		return
	}
	// Entries up to a commit index this node knew are the leader's too.
	r.commitKept = min(r.commitKept, st.Applied)
	r.node.Installed(st, nil)
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
	// The journal is emptied before the data file is replaced, so that a
	// restart never replays this node's old entries over the leader's
	// file.
	if err := s.emptyJournal(); err != nil {
		return err
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
	var epochs []repl.EpochRecord
	if err := s.be.View(func(tx storage.ReadTx) (err error) {
		epochs, err = replstore.Epochs(tx)
		return err
	}); err != nil {
		return err
	}
	r.conflictSet = "" // merged: the diverged history is gone, its records stay
	s.dropUnshown(0)   // the snapshot's state replaces them, shown below
	s.mu.Lock()
	s.appliedIdx = applied
	s.epoch = repl.Last(epochs).Epoch
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
				n, err = replstore.Trim(tx, s.repl.cfg.Retention, time.Now().UnixNano(), 10000)
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
	// The solo epoch starts after the last entry: one only journaled
	// would be left inside it.
	if err := settleJournal(dataDir); err != nil {
		return repl.EpochRecord{}, err
	}
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
		h, err := replstore.Epochs(tx)
		if err != nil {
			return err
		}
		term := storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaTerm))
		// Above the newest term it followed too: an older solo epoch
		// would not count as having led last (repl.HardState.Followed).
		term = max(term, repl.Last(h).Epoch.Term, replstore.Followed(tx))
		applied := storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaConsistentIndex))
		rec = repl.EpochRecord{Epoch: repl.Epoch{Term: term + 1, Node: member}, Start: applied + 1, Solo: true}
		if err := replstore.PutEpoch(tx, rec); err != nil {
			return err
		}
		return tx.Put(storage.BucketMeta, storage.MetaTerm, storage.PutUint64(term+1))
	})
	return rec, err
}
