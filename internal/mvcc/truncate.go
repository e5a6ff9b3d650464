package mvcc

import (
	"errors"
	"fmt"

	"github.com/dyad-db/dyad/internal/storage"
)

// ErrCannotDrop: DropAbove cannot bring the store back to the revision
// asked for (nothing was changed).
var ErrCannotDrop = errors.New("mvcc: cannot drop the revisions above")

// DropAbove takes the store back to revision rev: every change of a newer
// revision is deleted from the key bucket, in one storage transaction to
// which also adds the caller's own changes, and the index forgets them. It
// is how a replica drops a log suffix that was never acknowledged, when
// that suffix only changed keys (a lease, compaction or other state it
// changed is not undone here; the caller checks).
//
// It refuses (ErrCannotDrop, nothing changed) unless the revisions up to
// rev rebuild a store whose current revision is exactly rev, not
// compacted past it, with no compaction left unfinished. Writer goroutine
// only, with the physical compaction held off.
//
// Readers are not stopped. The new index is built before the commit while
// the data is all there, and swapped in right after it, so a reader sees
// the old state or the new one; one that resolved a dropped revision in
// the old index just before the swap finds it gone from disk and gets an
// error, never a wrong value (the snapshot install has the same window).
func (s *Store) DropAbove(rev int64, also func(tx storage.WriteTx) error) error {
	fresh, err := load(s.be, s.leases, rev)
	if err != nil {
		return err
	}
	switch {
	case fresh.scheduledCompact != 0:
		return fmt.Errorf("%w %d: a compaction at %d is unfinished", ErrCannotDrop, rev, fresh.scheduledCompact)
	case fresh.currentRev != rev:
		return fmt.Errorf("%w %d: the revisions up to it end at %d", ErrCannotDrop, rev, fresh.currentRev)
	}
	err = s.be.Update(func(tx storage.WriteTx) error {
		var doomed [][]byte
		err := tx.Scan(storage.BucketKey, RevBytes(Revision{Main: rev + 1}), nil, func(k, _ []byte) (bool, error) {
			doomed = append(doomed, append([]byte(nil), k...))
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, k := range doomed {
			if err := tx.Delete(storage.BucketKey, k); err != nil {
				return err
			}
		}
		return also(tx)
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idx = fresh.idx
	s.currentRev = fresh.currentRev
	s.readableRev = fresh.readableRev
	s.compactRev = fresh.compactRev
	s.compacted = fresh.compacted
	s.scheduledCompact = 0
	n := 0
	for _, h := range s.hashes {
		if h.Rev <= rev {
			s.hashes[n] = h
			n++
		}
	}
	s.hashes = s.hashes[:n]
	return nil
}
