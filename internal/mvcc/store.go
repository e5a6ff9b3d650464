package mvcc

import (
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/storage"
)

var (
	// ErrCompacted: the revision asked for has been compacted away.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev: the revision asked for has not happened yet.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
)

// LeaseTracker learns which keys are attached to which lease. The lessor
// implements it; the store calls it from the writer goroutine only.
type LeaseTracker interface {
	Attach(lease int64, key []byte)
	Detach(lease int64, key []byte)
}

// Store is the multi-version key space.
type Store struct {
	be     *storage.Backend
	leases LeaseTracker

	// mu guards every field below it.
	mu          sync.RWMutex
	idx         *index
	currentRev  int64 // last revision applied (writer's view)
	readableRev int64 // last revision durable on disk (readers' view); <= currentRev
	compactRev  int64 // last compaction revision; reads below it fail
	// scheduledCompact is a compaction whose physical part is not done yet.
	scheduledCompact int64
}

// Open rebuilds the index from the backend. leases may be nil.
func Open(be *storage.Backend, leases LeaseTracker) (*Store, error) {
	// An empty store is at revision 1, so the first change is revision 2,
	// as in etcd.
	s := &Store{be: be, leases: leases, idx: newIndex(), currentRev: 1}
	err := be.View(func(tx storage.ReadTx) error {
		if v := tx.Get(storage.BucketMeta, storage.MetaFinishedCompact); v != nil {
			r, _, err := ParseRevBytes(v)
			if err != nil {
				return err
			}
			s.compactRev = r.Main
		}
		if v := tx.Get(storage.BucketMeta, storage.MetaScheduledCompct); v != nil {
			r, _, err := ParseRevBytes(v)
			if err != nil {
				return err
			}
			if r.Main > s.compactRev {
				s.scheduledCompact = r.Main
			}
		}
		return tx.Scan(storage.BucketKey, nil, nil, func(k, v []byte) (bool, error) {
			rev, tomb, err := ParseRevBytes(k)
			if err != nil {
				return false, fmt.Errorf("%w: %v", storage.ErrCorrupt, err)
			}
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return false, fmt.Errorf("%w: revision %d: %v", storage.ErrCorrupt, rev.Main, err)
			}
			ki := s.idx.getOrCreate(kv.Key)
			ki.lease = kv.Lease // a tombstone's value has no lease
			if tomb {
				if !ki.gens[len(ki.gens)-1].empty() {
					ki.tombstone(rev)
				}
			} else {
				// A compacted history may start in the middle of a life:
				// the first revision seen carries its real create
				// revision and version.
				g := &ki.gens[len(ki.gens)-1]
				if g.empty() {
					g.created = Revision{Main: kv.CreateRevision}
					g.ver = kv.Version - 1
					g.revs = append(g.revs, rev)
					g.ver++
				} else {
					ki.put(rev)
				}
			}
			if rev.Main > s.currentRev {
				s.currentRev = rev.Main
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	if s.compactRev > s.currentRev {
		// Everything up to the compaction point was deleted; revisions
		// never run backwards.
		s.currentRev = s.compactRev
	}
	s.readableRev = s.currentRev
	if s.scheduledCompact > 0 {
		at := s.scheduledCompact
		keep := s.idx.compact(at)
		if err := s.physicalCompact(at, keep); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// AttachLeases reports every live key's lease to t (after a restart).
func (s *Store) AttachLeases(t LeaseTracker) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.idx.tree.Ascend(func(ki *keyIndex) bool {
		if ki.lease != 0 && !ki.gens[len(ki.gens)-1].empty() {
			t.Attach(ki.lease, ki.key)
		}
		return true
	})
}

// Revs returns the readable, current and compacted revisions.
func (s *Store) Revs() (readable, current, compacted int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.readableRev, s.currentRev, s.compactRev
}

// ReadableRev is the newest revision readers may see.
func (s *Store) ReadableRev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.readableRev
}

// MarkDurable makes every revision up to rev visible to readers. The writer
// calls it after the batch holding rev is committed.
func (s *Store) MarkDurable(rev int64) {
	s.mu.Lock()
	if rev > s.readableRev {
		s.readableRev = rev
	}
	s.mu.Unlock()
}

// RangeOptions select what Range returns.
type RangeOptions struct {
	Limit int64 // 0: no limit
	Rev   int64 // 0: newest
	Count bool  // count only
}

// RangeResult is what Range found.
type RangeResult struct {
	KVs   []mvccpb.KeyValue
	Count int // keys in range at Rev, ignoring Limit
	Rev   int // the store's revision when read
}

// Range reads [key, end) at ro.Rev as a reader, never above the durable
// mark. end == nil reads one key; end == "\x00" reads every key >= key.
func (s *Store) Range(key, end []byte, ro RangeOptions) (res RangeResult, rev int64, err error) {
	err = s.be.View(func(tx storage.ReadTx) error {
		s.mu.RLock()
		cur := s.readableRev
		res2, err := s.rangeLocked(tx, key, end, ro, cur)
		res, rev = res2, cur
		return err
	})
	return res, rev, err
}

// rangeLocked resolves the range in the index with s.mu read-locked, releases
// it, and then reads the values. It must be called with s.mu.RLock held.
func (s *Store) rangeLocked(tx storage.ReadTx, key, end []byte, ro RangeOptions, cur int64) (RangeResult, error) {
	at := ro.Rev
	if at > cur {
		s.mu.RUnlock()
		return RangeResult{Count: -1, Rev: int(cur)}, ErrFutureRev
	}
	if at <= 0 {
		at = cur
	}
	if at < s.compactRev {
		s.mu.RUnlock()
		return RangeResult{Count: -1}, ErrCompacted
	}
	total := 0
	var mods []Revision
	s.idx.ascend(key, end, func(ki *keyIndex) bool {
		if mod, _, _, ok := ki.lookup(at); ok {
			total++
			if !ro.Count && (ro.Limit <= 0 || int64(len(mods)) < ro.Limit) {
				mods = append(mods, mod)
			}
		}
		return true
	})
	s.mu.RUnlock()
	res := RangeResult{Count: total, Rev: int(cur)}
	if ro.Count || len(mods) == 0 {
		return res, nil
	}
	res.KVs = make([]mvccpb.KeyValue, len(mods))
	for i, m := range mods {
		v := tx.Get(storage.BucketKey, RevBytes(m))
		if v == nil {
			return res, fmt.Errorf("%w: revision {%d %d} in index but not on disk", storage.ErrCorrupt, m.Main, m.Sub)
		}
		if err := res.KVs[i].Unmarshal(v); err != nil {
			return res, fmt.Errorf("%w: %v", storage.ErrCorrupt, err)
		}
	}
	return res, nil
}

// Compact schedules compaction at rev: the index forgets older revisions at
// once; Physical (done by the caller through PhysicalCompact, possibly later)
// removes them from disk. Writer goroutine only; the caller persists the
// returned meta write in its batch via tx.
func (s *Store) Compact(tx storage.WriteTx, rev int64) (map[Revision]struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.compactRev {
		return nil, ErrCompacted
	}
	if rev > s.currentRev {
		return nil, ErrFutureRev
	}
	keep := s.idx.compact(rev)
	s.compactRev = rev
	if err := tx.Put(storage.BucketMeta, storage.MetaScheduledCompct, RevBytes(Revision{Main: rev})); err != nil {
		return nil, err
	}
	return keep, nil
}

// CompactRev is the last compaction revision.
func (s *Store) CompactRev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.compactRev
}

// PhysicalCompact deletes, in small batches, every revision at or below rev
// that keep does not name, then records the compaction as finished. Safe to
// run concurrently with the writer: those revisions are unreachable.
func (s *Store) PhysicalCompact(rev int64, keep map[Revision]struct{}) error {
	return s.physicalCompact(rev, keep)
}

const compactBatch = 10000

func (s *Store) physicalCompact(rev int64, keep map[Revision]struct{}) error {
	from := RevBytes(Revision{})
	end := RevBytes(Revision{Main: rev + 1})
	for {
		var doomed [][]byte
		var next []byte
		err := s.be.View(func(tx storage.ReadTx) error {
			return tx.Scan(storage.BucketKey, from, end, func(k, _ []byte) (bool, error) {
				if len(doomed) >= compactBatch {
					next = append([]byte(nil), k...)
					return false, nil
				}
				r, _, err := ParseRevBytes(k)
				if err != nil {
					return false, err
				}
				if _, ok := keep[r]; !ok {
					doomed = append(doomed, append([]byte(nil), k...))
				}
				return true, nil
			})
		})
		if err != nil {
			return err
		}
		last := next == nil
		err = s.be.Update(func(tx storage.WriteTx) error {
			for _, k := range doomed {
				if err := tx.Delete(storage.BucketKey, k); err != nil {
					return err
				}
			}
			if last {
				return tx.Put(storage.BucketMeta, storage.MetaFinishedCompact, RevBytes(Revision{Main: rev}))
			}
			return nil
		})
		if err != nil || last {
			return err
		}
		from = next
	}
}

// Event is one change with the revision it happened at.
type Event = mvccpb.Event

// History returns the events with revisions in [from, to], in order, at most
// limit revisions' worth (0: no limit; a revision is never split). It fails
// with ErrCompacted if from is below the compaction point; from equal to it
// is served, as etcd serves a watch starting at the compaction revision.
func (s *Store) History(from, to int64, limit int) ([]Event, int64, error) {
	var evs []Event
	last := int64(0)
	err := s.be.View(func(tx storage.ReadTx) error {
		s.mu.RLock()
		compacted := s.compactRev
		if to > s.readableRev {
			to = s.readableRev
		}
		s.mu.RUnlock()
		if from < compacted {
			return ErrCompacted
		}
		revs := 0
		return tx.Scan(storage.BucketKey, RevBytes(Revision{Main: from}), RevBytes(Revision{Main: to + 1}), func(k, v []byte) (bool, error) {
			r, tomb, err := ParseRevBytes(k)
			if err != nil {
				return false, err
			}
			if r.Main != last {
				if limit > 0 && revs >= limit {
					return false, nil
				}
				revs++
				last = r.Main
			}
			kv := new(mvccpb.KeyValue)
			if err := kv.Unmarshal(v); err != nil {
				return false, err
			}
			ev := Event{Type: mvccpb.PUT, Kv: kv}
			if tomb {
				ev.Type = mvccpb.DELETE
				kv.ModRevision = r.Main
			}
			evs = append(evs, ev)
			return true, nil
		})
	})
	if last == 0 {
		last = to
		if from-1 > to {
			last = from - 1
		}
	}
	return evs, last, err
}

// HashKV hashes the history in (compact, rev] the way etcd does, so equal
// hashes mean equal histories on two nodes (and match etcd's for the same
// history). rev 0 means the newest revision.
func (s *Store) HashKV(rev int64) (hash uint32, hashRev, compactRev int64, err error) {
	s.mu.RLock()
	cur := s.readableRev
	compactRev = s.compactRev
	if rev > 0 && rev > cur {
		s.mu.RUnlock()
		return 0, 0, compactRev, ErrFutureRev
	}
	if rev > 0 && rev < compactRev {
		s.mu.RUnlock()
		return 0, 0, compactRev, ErrCompacted
	}
	if rev <= 0 {
		rev = cur
	}
	var keep map[Revision]struct{}
	if compactRev > 0 {
		keep = s.idx.keep(compactRev)
	}
	s.mu.RUnlock()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(storage.BucketKey)
	upper := Revision{Main: rev + 1}
	lower := Revision{Main: compactRev + 1}
	err = s.be.View(func(tx storage.ReadTx) error {
		return tx.Scan(storage.BucketKey, nil, nil, func(k, v []byte) (bool, error) {
			r, _, err := ParseRevBytes(k)
			if err != nil {
				return false, err
			}
			if !upper.GreaterThan(r) {
				return false, nil
			}
			if lower.GreaterThan(r) && len(keep) > 0 {
				if _, ok := keep[r]; !ok {
					return true, nil
				}
			}
			h.Write(k)
			h.Write(v)
			return true, nil
		})
	})
	return h.Sum32(), rev, compactRev, err
}
