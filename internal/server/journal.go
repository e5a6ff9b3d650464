package server

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/repl/replstore"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/wal"
)

// The journal on the write path.
//
// A batch (a leader's group commit, or the entries a replica follows) is
// applied into the data file without a commit (storage.Backend.Apply),
// then its entries are appended to the journal with one fdatasync: from
// that moment the batch is durable on this node, and only then is it
// reported Persisted to the core, released to a single node's callers, or
// acknowledged by a replica. A replica journals a batch that continues its
// journal (and carries no hard state or merge) before applying it, and
// applies it once its ack is sent (journalAhead, journalFollowed in
// ready.go), within the same turn of the loop. The backend commits the data file later, on
// its own (by time and count), with consistent_index in the same commit as
// the data, so the data file alone is always an etcd backend as of some
// index C, and the journal holds what came after C.
//
// Invariant: every entry up to journal.Last() is durable, in the data
// file or in the journal. Every path keeps it:
//   - a batch is journaled only when Last() is the index just before it
//     (journalBatch); otherwise the data file is committed first, which
//     covers the batch too (it is applied before it is journaled), and the
//     journal restarts after the batch's first index less one;
//   - a replica's batch journaled before it is applied (journalAhead)
//     continues the journal, so it needs no commit; the size bound, whose
//     commit must cover what the journal drops, is checked only once the
//     batch is applied (boundJournal), and nothing that commits or empties
//     the journal runs between the append and the apply;
//   - every other write (hard state, merges, truncation, snapshot
//     install, physical compaction, the log trim, bootstrap) commits the
//     data file synchronously (Backend.Update commits what Apply left
//     pending as well); when it carried entries (with a hard state, or a
//     merge), the next journaled batch finds Last() behind and restarts
//     the journal;
//   - what moves consistent_index backwards or replaces the data file
//     (truncation, snapshot install) commits and empties the journal
//     first (emptyJournal), so a restart never replays entries of a
//     history the data file left.
//
// A start replays the journal's entries above C through applyEntry, the
// code a replica applies entries with, commits, and empties the journal
// (replayJournal). The journal is touched only by the apply loop, by New
// before the loop starts and by Close after it stopped.

// defaultJournalMax bounds the journal unless Config.JournalMaxBytes
// says otherwise: past it, the loop commits the data file and empties the
// journal inline (rare: the backend commits every 100 ms or 10,000 writes
// on its own).
const defaultJournalMax = 64 << 20

// journalMax is the bound in force.
func (s *Server) journalMax() int64 {
	if s.cfg.JournalMaxBytes > 0 {
		return s.cfg.JournalMaxBytes
	}
	return defaultJournalMax
}

// JournalDir is where a data dir keeps its journal.
func JournalDir(dataDir string) string { return filepath.Join(dataDir, "member", "dyad-wal") }

// openJournal opens the data dir's journal and replays it. Called by New
// once the store, the leases and auth are loaded, before the core starts
// (the core reads the log from the data file).
func (s *Server) openJournal() error {
	j, ents, err := wal.Open(JournalDir(s.cfg.DataDir), wal.Options{NoSync: s.cfg.UnsafeNoFsync})
	if err != nil {
		return fmt.Errorf("opening the journal: %w", err)
	}
	s.journal = j
	if err := s.replayJournal(ents); err != nil {
		j.Close()
		s.journal = nil
		return err
	}
	return nil
}

// replayJournal applies the journaled entries above the data file's
// consistent_index (s.appliedIdx), commits them with it, and empties the
// journal. A journal that starts above consistent_index+1 leaves a hole
// nothing can fill: the node refuses to start rather than guess.
func (s *Server) replayJournal(ents []repl.Entry) error {
	c := s.appliedIdx
	if len(ents) > 0 && ents[0].Index > c+1 {
		return fmt.Errorf("%w: the journal in %s starts at entry %d, but the data file holds entries only up to %d (consistent_index): entries %d to %d are lost",
			storage.ErrCorrupt, JournalDir(s.cfg.DataDir), ents[0].Index, c, c+1, ents[0].Index-1)
	}
	var tail []repl.Entry
	for i := range ents {
		if ents[i].Index > c {
			tail = ents[i:]
			break
		}
	}
	if len(tail) > 0 {
		var jobs []*compactJob
		err := s.be.Update(func(tx storage.WriteTx) error {
			for i := range tail {
				_, _, job, _, err := s.applyEntry(tx, &tail[i])
				if err != nil {
					return fmt.Errorf("replaying the journal: %w", err)
				}
				if job != nil {
					jobs = append(jobs, job)
				}
			}
			return tx.Put(storage.BucketMeta, storage.MetaConsistentIndex, storage.PutUint64(tail[len(tail)-1].Index))
		})
		if err != nil {
			return err
		}
		last := tail[len(tail)-1]
		s.appliedIdx = last.Index
		if last.Epoch != (repl.Epoch{}) {
			s.epoch = last.Epoch
		}
		_, rev, _ := s.store.Revs()
		s.store.MarkDurable(rev) // as a start shows what the data file holds
		// A compaction replayed here finishes here: the compactor does
		// not run yet.
		for _, j := range jobs {
			if err := s.store.PhysicalCompact(j.c); err != nil {
				return fmt.Errorf("replaying the journal: compacting at %d: %w", j.c.Rev, err)
			}
		}
		s.log.Info("replayed the journal", "entries", len(tail), "from", tail[0].Index, "applied-index", s.appliedIdx, "revision", rev)
	}
	// The commit bound the journal carried goes into the data file before
	// the journal is emptied (it is fresher than the file's own, which is
	// as of the file's last commit; both name entries this node holds).
	if c := s.journal.Commit(); c > 0 {
		err := s.be.Update(func(tx storage.WriteTx) error {
			if c <= replstore.CommitBound(tx) {
				return nil
			}
			return replstore.PutCommitBound(tx, min(c, s.appliedIdx))
		})
		if err != nil {
			return err
		}
	}
	// Everything journaled is in a durable commit of the data file now.
	return s.journal.Reset(s.appliedIdx)
}

// applyEntry applies one log entry in tx: the replica's path for the
// leader's entries, and a restart's for the journal's (so a leader's batch
// and a replica's replay alike). It checks the revision the entry records
// and, for an entry of a pair's log (its epoch is set; a single node's
// entries have none and are never logged), appends it to the replication
// log. It returns the result, the watch events, the physical part of a
// compaction, and the revision after the entry.
func (s *Server) applyEntry(tx storage.WriteTx, e *repl.Entry) (applyResult, []mvccEvent, *compactJob, int64, error) {
	var res applyResult
	var evs []mvccEvent
	var job *compactJob
	var err error
	if e.Merge {
		var rev int64
		if rev, err = e.MergeRev(); err == nil {
			job, err = s.applyMerge(tx, rev)
		}
	} else {
		req := &pb.InternalRaftRequest{}
		if err := req.Unmarshal(e.Data); err != nil {
			return res, nil, nil, 0, fmt.Errorf("entry %d: %w", e.Index, err)
		}
		res, evs, job, err = s.apply(tx, req)
	}
	if err != nil {
		return res, nil, nil, 0, err
	}
	_, rev, _ := s.store.Revs()
	if e.Rev != 0 && rev != e.Rev {
		return res, nil, nil, 0, fmt.Errorf("entry %d: revision %d here, %d on the leader: the histories differ", e.Index, rev, e.Rev)
	}
	if e.Epoch != (repl.Epoch{}) {
		if err := replstore.Append(tx, e); err != nil {
			return res, nil, nil, 0, err
		}
	}
	return res, evs, job, rev, nil
}

// journalBatch makes the entries of a batch already applied with
// Backend.Apply durable: one append and fdatasync of the journal. The
// caller reports the batch durable only after it returns nil; an error is
// a storage failure (the caller stops the node, as for a failed commit).
func (s *Server) journalBatch(es []repl.Entry) error {
	if len(es) == 0 {
		return nil
	}
	if err := s.appendJournal(es); err != nil {
		return err
	}
	return s.boundJournal(es[len(es)-1].Index)
}

// appendJournal appends es to the journal with one fdatasync, after
// restarting the journal if it is not contiguous with es (which commits
// the data file first: es must be applied already unless the journal is
// contiguous, see journalAhead).
func (s *Server) appendJournal(es []repl.Entry) error {
	j := s.journal
	if first := es[0].Index; j.Last() != first-1 {
		// Contiguity: something committed synchronously since the last
		// append (a hard state, a merge, a truncation, a snapshot), or
		// the journal was just emptied. The commit covers this batch
		// too (applied before it is journaled), so the journal may
		// restart from here.
		if err := s.be.Commit(); err != nil {
			return err
		}
		if err := j.Reset(first - 1); err != nil {
			return err
		}
	}
	var commit uint64
	if s.repl != nil {
		commit = s.repl.commitKept
	}
	start := time.Now()
	if err := j.AppendCommit(es, commit); err != nil {
		return fmt.Errorf("journal append: %w", err)
	}
	s.m.FsyncDuration.Observe(time.Since(start).Seconds())
	return nil
}

// boundJournal keeps the journal under its size bound: past it, it
// commits the data file and starts an empty journal after last, inline on
// the loop. Every entry up to last must be applied by then (the commit
// must cover what the journal drops).
func (s *Server) boundJournal(last uint64) error {
	j := s.journal
	if j.Size() > s.journalMax() {
		if err := s.be.Commit(); err != nil {
			return err
		}
		if err := j.Reset(last); err != nil {
			return err
		}
		s.m.JournalSwitches.Inc()
	}
	return nil
}

// journalAhead reports whether a replica may journal es before it applies
// them (follow.go, journalFollowed): only entries without a hard state or
// a merge (those commit synchronously), contiguous with the journal, whose
// append then needs no commit of the data file (a commit would not cover
// entries not yet applied). The journal's invariant holds either way:
// every entry up to its Last() is durable, in the journal.
func (s *Server) journalAhead(es []repl.Entry, hs *repl.HardState) bool {
	return len(es) > 0 && hs.IsEmpty() && !hasMerge(es) && s.journal.Last() == es[0].Index-1
}

// emptyJournal commits the data file and empties the journal. Truncation
// and snapshot install call it before they drop a suffix or replace the
// data file, so that a restart never replays entries of the history the
// data file leaves.
func (s *Server) emptyJournal() error {
	if err := s.be.Commit(); err != nil {
		return err
	}
	return s.journal.Reset(s.appliedIdx)
}

// closeJournal, at a clean stop, commits the data file and empties the
// journal, so that a cleanly stopped data dir is a complete etcd backend
// on its own. After a storage failure it only closes the journal: the
// journal keeps what it holds, and the next start replays it.
//
// After a failed journal append, the backend's Close still commits what
// Apply left in memory, the refused batch included, so that batch may be
// durable in the data file although its callers were refused
// (ErrGRPCStopped), as after a crash between a commit and the answer.
// That is kept on purpose. Not committing at Close would promise nothing:
// the background commit may have written the batch already, between its
// Apply and the append that failed. What etcd promises is the same: a
// request that ends with "server stopped" (or whose node died on a
// failed WAL write) may or may not have taken effect, and its client
// must read to find out. And nobody was told it succeeded: a single node
// may show it after its restart, and in a pair, where it exists on the
// failed primary alone, the rejoin takes it back
// (TestJournalFailedBatchIsTakenBackOnRejoin).
func (s *Server) closeJournal() error {
	if s.journal == nil {
		return nil
	}
	var err error
	if s.fatalErr() == nil {
		err = s.emptyJournal()
	}
	if cerr := s.journal.Close(); err == nil {
		err = cerr
	}
	return err
}

// settleJournal brings the journal of the stopped node at dataDir into its
// data file, as a start and a clean stop do (New replays it, Close
// commits and empties it), without serving. The offline commands that
// change a data file call it first, so that they see every write the node
// made durable: after a crash the data file alone may lack the newest
// ones (a solo epoch recorded after them would leave them inside it).
func settleJournal(dataDir string) error {
	if !wal.Exist(JournalDir(dataDir)) {
		return nil
	}
	cfg := Defaults()
	cfg.DataDir = dataDir
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg)
	if err != nil {
		return fmt.Errorf("replaying the journal of %s: %w", dataDir, err)
	}
	return s.Close()
}
