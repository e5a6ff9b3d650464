package server

import (
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/failpoint"
	"github.com/dyad-db/dyad/internal/mvcc"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
	"github.com/dyad-db/dyad/internal/storage"
)

// errNotDroppable: the suffix cannot be dropped in place (nothing was
// changed); the core resyncs from a snapshot instead.
var errNotDroppable = errors.New("the suffix cannot be dropped in place")

// truncateSuffix carries out Ready.Truncate: it drops this replica's log
// after keep in place, or finds it cannot, and reports either to the core
// (Truncated), which then catches up from the leader's log or resyncs
// from a snapshot. It returns an error only when the node stops (fail).
func (s *Server) truncateSuffix(keep uint64) error {
	r := s.repl
	err := failpoint.Hit(failpoint.TruncateSuffix)
	if err != nil {
		// An injected refusal takes the snapshot path below, as a suffix
		// that cannot be undone in place does (test/robustness drives the
		// crashes inside a snapshot install through it).
		err = fmt.Errorf("%w: %w", errNotDroppable, err)
	} else {
		err = s.dropSuffix(keep)
	}
	if errors.Is(err, errNotDroppable) {
		s.log.Warn("dropping a synchronous suffix that was never acknowledged: resyncing from the leader", "applied-index", s.appliedIdx, "common-prefix", keep, "why", err)
		r.node.Truncated(repl.RestartState{}, err)
		return nil
	}
	if err != nil {
		err = fmt.Errorf("dropping a suffix that was never acknowledged: %w", err)
		s.fail(err)
		return err
	}
	st, err := s.restartState()
	if err != nil {
		s.fail(err)
		return err
	}
	r.node.Truncated(st, nil)
	return nil
}

// dropSuffix drops, in place, this replica's log suffix after keep: a
// synchronous suffix that its leader's log lacks and that was therefore
// never acknowledged (the core decided so: repl's catchupRefused). It
// returns errNotDroppable, having changed nothing, when it cannot.
//
// Why: a primary killed under write load almost always dies with a few
// entries applied and logged but not yet acknowledged by its replica.
// When it returns, those entries are the suffix. A snapshot resync of the
// whole data file costs time in proportion to the data (about 40 s for a
// 1.4 GB file on the bench machine, against about 1.5 s for a rejoin from
// the log), while the suffix is a few entries. So a suffix whose entries
// only changed keys (Put, DeleteRange, Txn) is undone here: their
// revisions are deleted from the key bucket (mvcc.Store.DropAbove), the
// entries and the epoch records after keep from the log
// (replstore.TruncateAfter), and the applied index goes back to keep, all
// in one storage transaction, so a crash leaves either the old state or
// the new. Entries that changed anything else (leases, compaction,
// alarms, auth, a merge) are not undone by deleting revisions, and keep
// the snapshot path.
//
// Runs in the apply loop while following, like installSnapshot: no write
// is in progress, and the compactor is held off.
func (s *Server) dropSuffix(keep uint64) error {
	rev, err := s.droppableSuffix(keep)
	if err != nil {
		return err
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	// The journal is emptied before the suffix goes, so that a restart
	// never replays the dropped entries over the shortened data file.
	if err := s.emptyJournal(); err != nil {
		return err
	}
	var epochs []repl.EpochRecord
	err = s.store.DropAbove(rev, func(tx storage.WriteTx) error {
		h, err := replstore.Epochs(tx)
		if err != nil {
			return err
		}
		if epochs, err = replstore.TruncateAfter(tx, h, keep); err != nil {
			return err
		}
		// The core asks for a drop only above its commit index; the bound
		// never names a dropped entry all the same.
		if c := replstore.CommitBound(tx); c > keep {
			if err := replstore.PutCommitBound(tx, keep); err != nil {
				return err
			}
		}
		return tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(keep))
	})
	if errors.Is(err, mvcc.ErrCannotDrop) {
		return fmt.Errorf("%w: %v", errNotDroppable, err)
	}
	if err != nil {
		return err
	}
	// Keys the dropped entries attached to leases are attached no more.
	if err := s.be.View(s.lessor.Load); err != nil {
		return err
	}
	s.store.AttachLeases(s.lessor)
	s.dropUnshown(keep)
	s.repl.commitKept = min(s.repl.commitKept, keep)
	dropped := s.appliedIdx - keep
	s.mu.Lock()
	s.appliedIdx = keep
	s.epoch = repl.Last(epochs).Epoch
	s.mu.Unlock()
	// Revisions this node may have shown since it restarted are gone:
	// every watch ends as compacted, as after a snapshot install.
	s.hub.Reset()
	s.signalVisible()
	s.refreshGauges()
	s.m.SuffixesDropped.Inc()
	s.log.Warn("dropped a synchronous suffix that was never acknowledged, in place; every watch was cancelled as compacted",
		"entries", dropped, "applied-index", keep, "revision", rev)
	return nil
}

// droppableSuffix returns the revision after entry keep when the entries
// after it, up to the applied index, can be dropped in place, else
// errNotDroppable (or a storage error).
func (s *Server) droppableSuffix(keep uint64) (int64, error) {
	if keep == 0 || keep >= s.appliedIdx {
		return 0, fmt.Errorf("%w: nothing shared, or nothing to drop after %d", errNotDroppable, keep)
	}
	var rev int64
	why := ""
	err := s.be.View(func(tx storage.ReadTx) error {
		last, found, err := replstore.Get(tx, keep)
		if err != nil {
			return err
		}
		if !found || last.Rev == 0 {
			why = "the last shared entry is trimmed, or was logged before entries carried revisions"
			return nil
		}
		rev = last.Rev
		for from := keep + 1; why == "" && from <= s.appliedIdx; {
			es, err := replstore.Read(tx, from, 4<<20)
			if err != nil {
				return err
			}
			if len(es) == 0 {
				why = fmt.Sprintf("the log ends before entry %d", from)
				break
			}
			for i := range es {
				if why == "" && !keysOnly(&es[i]) {
					why = fmt.Sprintf("entry %d changed more than keys", es[i].Index)
				}
			}
			from = es[len(es)-1].Index + 1
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if why != "" {
		return 0, fmt.Errorf("%w: %s", errNotDroppable, why)
	}
	return rev, nil
}

// keysOnly reports whether applying e changed nothing but keys: a Put, a
// DeleteRange or a Txn, and no other field of the request set.
func keysOnly(e *repl.Entry) bool {
	if e.Merge {
		return false
	}
	var req pb.InternalRaftRequest
	if req.Unmarshal(e.Data) != nil || req.Put == nil && req.DeleteRange == nil && req.Txn == nil {
		return false
	}
	only := pb.InternalRaftRequest{Header: req.Header, ID: req.ID, Put: req.Put, DeleteRange: req.DeleteRange, Txn: req.Txn}
	return only.Size() == req.Size()
}
