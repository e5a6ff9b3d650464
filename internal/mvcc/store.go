package mvcc

import (
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"math"
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
	// compacted says a compaction was ever scheduled. etcd starts its
	// compaction point at -1, so a first compaction at revision 0 succeeds
	// (and a second is refused); compactRev stays 0 for reads and hashes.
	compacted bool
	// scheduledCompact is a compaction whose physical part is not done yet.
	scheduledCompact int64
	// hashes are the hashes computed by the last physical compactions,
	// oldest first, at most maxCompactionHashes.
	hashes []KVHash

	// rangeYield, set only by tests before any read, runs each time a
	// range releases mu between two chunks of keys (see rangeChunk).
	rangeYield func()
}

// maxCompactionHashes is how many compaction hashes are remembered (etcd's
// hashStorageMaxSize).
const maxCompactionHashes = 10

// rangeChunk is how many keys a range visits per hold of mu's read lock.
const rangeChunk = 1024

// KVHash is a HashKV result: the hash of the history in (CompactRev, Rev].
// CompactRev is -1 when the store was never compacted, as in etcd.
type KVHash struct {
	Hash       uint32
	CompactRev int64
	Rev        int64
}

// Compaction is an applied compaction whose physical part is pending.
type Compaction struct {
	Rev  int64 // the compaction revision
	prev int64 // the compaction revision before it (0 if none)
	keep map[Revision]struct{}
}

// Open rebuilds the index from the backend. leases may be nil.
func Open(be *storage.Backend, leases LeaseTracker) (*Store, error) {
	s, err := load(be, leases, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	if s.scheduledCompact > 0 {
		// A compaction was applied but not finished before the stop.
		c := &Compaction{Rev: s.scheduledCompact, prev: s.compactRev, keep: s.idx.compact(s.scheduledCompact)}
		s.compactRev = c.Rev
		s.scheduledCompact = 0
		if err := s.PhysicalCompact(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// load reads the store from the backend as it stood at revision maxRev:
// changes above it are left out. It writes nothing; an unfinished
// compaction is left in scheduledCompact for the caller.
func load(be *storage.Backend, leases LeaseTracker, maxRev int64) (*Store, error) {
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
			s.compacted = true
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
			if rev.Main > maxRev {
				return false, nil // keys are in revision order
			}
			kv, err := decodeIndexFields(v)
			if err != nil {
				var full mvccpb.KeyValue
				if err := full.Unmarshal(v); err != nil {
					return false, fmt.Errorf("%w: revision %d: %v", storage.ErrCorrupt, rev.Main, err)
				}
				kv = indexFields{key: full.Key, createRevision: full.CreateRevision, version: full.Version, lease: full.Lease}
			}
			ki := s.idx.getOrCreate(kv.key) // copies the key out of the record
			ki.lease = kv.lease             // a tombstone's value has no lease
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
					g.created = Revision{Main: kv.createRevision}
					g.ver = kv.version - 1
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
	if s.scheduledCompact > s.currentRev {
		// A jump (Jump, then Compact) whose compaction did not finish.
		s.currentRev = s.scheduledCompact
	}
	s.readableRev = s.currentRev
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
	// A compaction past the readable revision taken by view (possible only
	// while writes race ahead) makes a read of the newest revision look
	// compacted; such a read simply retries at the newer revision.
	for attempt := 0; ; attempt++ {
		err = s.view(func(tx storage.ReadTx, cur int64) error {
			s.mu.RLock()
			res2, err := s.rangeLocked(tx, key, end, ro, cur)
			res, rev = res2, cur
			return err
		})
		if ro.Rev > 0 || attempt >= 3 || !errors.Is(err, ErrCompacted) {
			return res, rev, err
		}
	}
}

// view runs fn in a read transaction together with the newest revision that
// transaction is guaranteed to hold. readableRev is read before the
// transaction opens: MarkDurable runs only after the batch's commit, so a
// transaction begun later sees every revision up to it. Reading it inside
// the transaction instead could name revisions committed after the
// transaction's snapshot, which the index knows but the snapshot lacks.
// Lock order: s.mu is never held while a transaction is opened.
func (s *Store) view(fn func(tx storage.ReadTx, readable int64) error) error {
	readable := s.ReadableRev()
	return s.be.View(func(tx storage.ReadTx) error { return fn(tx, readable) })
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
	// The range is visited rangeChunk keys at a time, releasing mu between
	// chunks, so that a long count (every page of a paginated LIST counts
	// the rest of its range) never holds the writer, and the readers
	// queued behind the writer, for longer than one chunk. The answer is
	// still the range at revision at: lookup(at) ignores what the writer
	// adds above at, and a compaction at or below at keeps every revision
	// lookup(at) needs. Only a compaction above at, between two chunks,
	// changes the answer: that read fails as compacted (Range retries a
	// read of the newest revision).
	total := 0
	var mods []Revision
	from := key
	for {
		visited := 0
		var next []byte
		s.idx.ascend(from, end, func(ki *keyIndex) bool {
			if visited == rangeChunk {
				next = ki.key // immutable: a keyIndex's key never changes
				return false
			}
			visited++
			if mod, _, _, ok := ki.lookup(at); ok {
				total++
				if !ro.Count && (ro.Limit <= 0 || int64(len(mods)) < ro.Limit) {
					mods = append(mods, mod)
				}
			}
			return true
		})
		if next == nil {
			break
		}
		s.mu.RUnlock()
		if s.rangeYield != nil {
			s.rangeYield()
		}
		s.mu.RLock()
		if at < s.compactRev {
			s.mu.RUnlock()
			return RangeResult{Count: -1}, ErrCompacted
		}
		from = next
	}
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
func (s *Store) Compact(tx storage.WriteTx, rev int64) (*Compaction, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev < s.compactRev || (rev == s.compactRev && (rev != 0 || s.compacted)) {
		return nil, ErrCompacted
	}
	if rev > s.currentRev {
		return nil, ErrFutureRev
	}
	c := &Compaction{Rev: rev, prev: s.compactRev, keep: s.idx.compact(rev)}
	s.compactRev = rev
	s.compacted = true
	if err := tx.Put(storage.BucketMeta, storage.MetaScheduledCompct, RevBytes(Revision{Main: rev})); err != nil {
		return nil, err
	}
	return c, nil
}

// Jump moves the current revision forward to rev, changing no key: the
// merge after a split brain, whose next revision must exceed both sides'
// maxima. The writer then compacts at rev in the same storage
// transaction; the compaction point is what a restart finds the revision
// from. Writer goroutine only.
func (s *Store) Jump(rev int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev < s.currentRev {
		return fmt.Errorf("mvcc: jump to %d below the current revision %d", rev, s.currentRev)
	}
	s.currentRev = rev
	return nil
}

// CompactRev is the last compaction revision.
func (s *Store) CompactRev() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.compactRev
}

// PhysicalCompact deletes, in small batches, every revision at or below
// c.Rev that the compaction does not keep, then records it as finished. On
// the way it hashes (previous compaction, c.Rev] as etcd does, and
// remembers that hash for HashKV at c.Rev. Safe to run concurrently with
// the writer: those revisions are unreachable. One compaction at a time.
func (s *Store) PhysicalCompact(c *Compaction) error {
	h := newKVHasher(c.prev, c.Rev, c.keep)
	from := RevBytes(Revision{})
	end := RevBytes(Revision{Main: c.Rev + 1})
	for {
		var doomed [][]byte
		var next []byte
		err := s.be.View(func(tx storage.ReadTx) error {
			return tx.Scan(storage.BucketKey, from, end, func(k, v []byte) (bool, error) {
				if len(doomed) >= compactBatch {
					next = append([]byte(nil), k...)
					return false, nil
				}
				r, tomb, err := ParseRevBytes(k)
				if err != nil {
					return false, err
				}
				if _, ok := c.keep[r]; !ok {
					doomed = append(doomed, append([]byte(nil), k...))
				}
				h.write(k, v, r, tomb)
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
				return tx.Put(storage.BucketMeta, storage.MetaFinishedCompact, RevBytes(Revision{Main: c.Rev}))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if last {
			s.mu.Lock()
			s.hashes = append(s.hashes, h.sum())
			if len(s.hashes) > maxCompactionHashes {
				s.hashes = s.hashes[len(s.hashes)-maxCompactionHashes:]
			}
			s.mu.Unlock()
			return nil
		}
		from = next
	}
}

const compactBatch = 10000

// Event is one change with the revision it happened at.
type Event = mvccpb.Event

// History returns the events with revisions in [from, to], in order, at most
// limit revisions' worth (0: no limit; a revision is never split). It fails
// with ErrCompacted if from is below the compaction point; from equal to it
// is served, as etcd serves a watch starting at the compaction revision.
func (s *Store) History(from, to int64, limit int) ([]Event, int64, error) {
	var evs []Event
	last := int64(0)
	err := s.view(func(tx storage.ReadTx, readable int64) error {
		s.mu.RLock()
		compacted := s.compactRev
		s.mu.RUnlock()
		if to > readable {
			to = readable
		}
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
// history). rev 0 means the newest revision. A revision at which a
// compaction finished answers with the hash that compaction computed, as
// etcd does (that is what etcd's corruption check compares).
func (s *Store) HashKV(rev int64) (KVHash, error) {
	s.mu.RLock()
	for _, h := range s.hashes {
		if h.Rev == rev {
			s.mu.RUnlock()
			return h, nil
		}
	}
	cur := s.readableRev
	compactRev := s.compactRev
	if rev > 0 && rev > cur {
		s.mu.RUnlock()
		return KVHash{}, ErrFutureRev
	}
	if rev > 0 && rev < compactRev {
		s.mu.RUnlock()
		return KVHash{}, ErrCompacted
	}
	// Only 0 means "the current revision": etcd hashes a negative revision
	// as it is, which covers no revision at all.
	if rev == 0 {
		rev = cur
	}
	keep := s.idx.keep(rev)
	s.mu.RUnlock()
	h := newKVHasher(compactRev, rev, keep)
	err := s.be.View(func(tx storage.ReadTx) error {
		return tx.Scan(storage.BucketKey, nil, RevBytes(Revision{Main: rev + 1}), func(k, v []byte) (bool, error) {
			r, tomb, err := ParseRevBytes(k)
			if err != nil {
				return false, err
			}
			h.write(k, v, r, tomb)
			return true, nil
		})
	})
	return h.sum(), err
}

// kvHasher is etcd's HashKV function over the key bucket in key order:
// CRC-32C of the bucket name, then of every key and value in (compact, rev],
// plus those at or below compact that keep names. A tombstone exactly at
// the compaction revision is left out, so that etcd versions that dropped
// it and those that keep it hash alike.
type kvHasher struct {
	h          hash.Hash32
	compactRev int64
	rev        int64
	keep       map[Revision]struct{}
}

func newKVHasher(compactRev, rev int64, keep map[Revision]struct{}) *kvHasher {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(storage.BucketKey)
	return &kvHasher{h: h, compactRev: compactRev, rev: rev, keep: keep}
}

func (k *kvHasher) write(key, val []byte, r Revision, tomb bool) {
	if r.Main > k.rev {
		return
	}
	if r.Main <= k.compactRev && len(k.keep) > 0 {
		if _, ok := k.keep[r]; !ok {
			return
		}
	}
	if tomb && r.Main == k.compactRev {
		return
	}
	k.h.Write(key)
	k.h.Write(val)
}

func (k *kvHasher) sum() KVHash {
	c := k.compactRev
	if c == 0 {
		c = -1 // never compacted: etcd's initial compactMainRev
	}
	return KVHash{Hash: k.h.Sum32(), CompactRev: c, Rev: k.rev}
}

// Reload rebuilds the store from the backend after the data file was
// replaced (a replica's resync from a snapshot). The writer must be idle;
// readers see the old state until the swap, then the new one.
func (s *Store) Reload() error {
	fresh, err := Open(s.be, s.leases)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idx = fresh.idx
	s.currentRev = fresh.currentRev
	s.readableRev = fresh.readableRev
	s.compactRev = fresh.compactRev
	s.scheduledCompact = 0
	s.hashes = fresh.hashes
	return nil
}
