package storage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/dyad-db/dyad/internal/fsutil"
)

// Bucket names of etcd's backend schema. dyad writes the same buckets so that
// etcdutl and etcd itself can read a dyad snapshot.
var (
	BucketKey            = []byte("key")
	BucketMeta           = []byte("meta")
	BucketLease          = []byte("lease")
	BucketAlarm          = []byte("alarm")
	BucketCluster        = []byte("cluster")
	BucketMembers        = []byte("members")
	BucketMembersRemoved = []byte("members_removed")
	BucketAuth           = []byte("auth")
	BucketAuthUsers      = []byte("authUsers")
	BucketAuthRoles      = []byte("authRoles")

	// dyad's own buckets: the replication log and the epoch history
	// (internal/repl). etcd ignores buckets it does not know.
	BucketLog    = []byte("dyad_log")
	BucketEpochs = []byte("dyad_epochs")

	allBuckets = [][]byte{BucketKey, BucketMeta, BucketLease, BucketAlarm, BucketCluster,
		BucketMembers, BucketMembersRemoved, BucketAuth, BucketAuthUsers, BucketAuthRoles,
		BucketLog, BucketEpochs}
)

// Meta keys shared with etcd's schema.
var (
	MetaConsistentIndex = []byte("consistent_index")
	MetaTerm            = []byte("term")
	MetaConfState       = []byte("confState")
	MetaScheduledCompct = []byte("scheduledCompactRev")
	MetaFinishedCompact = []byte("finishedCompactRev")
)

// ErrCorrupt reports a data file whose contents fail a consistency check.
var ErrCorrupt = errors.New("storage: data file is corrupt")

// ReadTx reads one consistent view of the backend.
type ReadTx interface {
	// Get returns the value of key in bucket, or nil.
	Get(bucket, key []byte) []byte
	// Scan calls fn for keys in [from, to) in order (to == nil: to the end)
	// until fn returns false or an error.
	Scan(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error
	// ScanReverse is Scan from the end backwards.
	ScanReverse(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error
}

// WriteTx is a ReadTx that can also change the backend.
type WriteTx interface {
	ReadTx
	Put(bucket, key, value []byte) error
	Delete(bucket, key []byte) error
}

// Options tune the backend.
type Options struct {
	// NoSync disables fsync. Only for benchmarks of the layers above.
	NoSync bool
	// InitialMmapSize pre-sizes the memory map so that readers rarely block
	// on remapping as the file grows.
	InitialMmapSize int
	// OnCommit, when set, observes each commit's duration (metrics).
	OnCommit func(time.Duration)
	// BatchInterval is how long what Apply wrote may stay out of bbolt
	// before the background committer commits it (etcd's
	// --backend-batch-interval). 0 means 100 ms; negative turns the timer
	// off (Commit, Update, Close and BatchLimit still commit).
	BatchInterval time.Duration
	// BatchLimit starts a background commit once Apply has brought this
	// many puts and deletes into the active layer (etcd's
	// --backend-batch-limit). 0 means 10,000. While a commit runs, the
	// active layer may grow to 4× this (stallFactor) before Apply waits
	// for that commit.
	BatchLimit int
}

// Defaults of the background commit, etcd's own.
const (
	DefaultBatchInterval = 100 * time.Millisecond
	DefaultBatchLimit    = 10000
)

// stallFactor bounds the memory that Apply may fill while bbolt commits:
// once the active layer holds stallFactor × BatchLimit puts and deletes
// and a commit is running, the next Apply waits for that commit to end
// (the commit after it takes the whole active layer). Without a bound a
// disk slower than the write rate would grow the layer without end.
const stallFactor = 4

// Backend is the durable store. Safe for concurrent use.
//
// What Apply wrote lives in memory until a background commit moves it
// into bbolt, in layers that readers lay over bbolt's last commit:
//
//	active: what Apply merged since the last freeze; only Apply (under
//	        wmu) changes it, whole batches at a time, under ovmu.
//	frozen: the active layer as it was when a commit took it (at most
//	        one); nobody changes it; it is being written to bbolt, and is
//	        dropped once bbolt's commit holding it returned.
//
// Lock order: wmu, then cmu, then swap, then ovmu, then bbolt's own locks.
// Apply takes wmu (and ovmu briefly), never cmu: a commit in progress
// holds cmu while it writes and fsyncs bbolt, so Apply never waits for
// it (except past the stallFactor bound).
type Backend struct {
	path     string
	opts     Options
	stallOps int // stallFactor × BatchLimit, capped

	// wmu serialises the writers of the layers: Apply, and Update,
	// Defrag, Replace and Close, which need them empty and kept so. Its
	// holder is the only goroutine that changes the active layer's
	// contents, so it may read that layer without ovmu.
	wmu sync.Mutex

	// cmu serialises bbolt's write transactions: a commit of the frozen
	// layer (the background committer, Commit, and the commit that
	// Update, Snapshot, Defrag, Replace and Close make first), Update's
	// own transaction, and the file swaps. It is held across the whole
	// freeze, write, fsync and drop, so there is at most one frozen
	// layer, and a commit asked for while one runs waits for it and then
	// commits what came after.
	cmu sync.Mutex

	// swap guards db. Transactions hold it for reading; Defrag and
	// Replace hold it for writing while they replace the file.
	swap sync.RWMutex
	db   *bolt.DB

	// ovmu guards the layers and the fields after it. Readers take it
	// only to open their bbolt read transaction, clone the active layer
	// and take the frozen one, in one step (see View for why all three).
	ovmu   sync.Mutex
	ov     *overlay // active; never nil
	frozen *overlay // nil: no commit is writing one
	// shared is a clone of ov that readers share (nil when ov is empty),
	// valid while sharedOK: every change of ov (a merge, a freeze) clears
	// sharedOK, and the next View clones again. Nobody writes to a clone,
	// so readers may walk it at once; changes to ov copy the nodes it
	// shares with the clone (copy-on-write).
	shared   *overlay
	sharedOK bool
	// gen is the bbolt read transaction that Views share (nil: none
	// open; the next View outside a write opens one). It was opened
	// after the last bbolt commit, and is superseded (taken out of gen,
	// and rolled back once its last reader leaves) before the next
	// bbolt write transaction begins. See readGen.
	gen *readGen
	// writing is set from just before a bbolt write transaction begins
	// (a commit of the frozen layer, Update's own) until it ended: while
	// it is set, Views open a read transaction of their own instead of
	// sharing one, because a shared one kept open by nobody's reader
	// could stall the commit's remap of a growing file for good.
	writing bool
	// frozenDone is closed when the frozen layer's commit ended, in
	// success or failure (Apply's stall waits on it).
	frozenDone chan struct{}
	// activeOps counts the puts and deletes merged into ov since it was
	// last frozen; activeSince is when the first of them was.
	activeOps   int
	activeSince time.Time
	// broken is set when a commit of the layers failed: every later
	// write fails with it, because what a caller was told is durable
	// here only through its own log (the server's journal) and the data
	// file does not have it. Readers keep seeing the layers.
	broken error

	fault      atomic.Pointer[func() error] // see InjectFault
	commitHook atomic.Pointer[func()]       // tests: runs inside each commit of a frozen layer, before bbolt's commit
	stalls     atomic.Int64                 // how often Apply waited past the stallFactor bound

	kick chan struct{} // capacity 1: Apply reached BatchLimit, the committer should commit
	stop chan struct{} // closed by Close: the committer returns
	done chan struct{} // closed when the committer has returned
}

// InjectFault is for tests: while f returns an error, every Apply fails
// with it after its callback and keeps nothing of it, and every commit
// (Update's, and of what Apply wrote) fails with it just before bbolt's
// commit and writes nothing, as on a full disk. A failed commit of what
// Apply wrote breaks the backend. A nil f removes the fault.
func (b *Backend) InjectFault(f func() error) {
	if f == nil {
		b.fault.Store(nil)
		return
	}
	b.fault.Store(&f)
}

// Open opens or creates the data file at path and makes sure every bucket of
// the schema exists.
//
// A new data file is made durable by name before Open returns (its
// directories and its entry fsynced): bbolt fsyncs the file's contents on
// every commit but never its directory, so without this a power loss
// could take the whole file, with every write acknowledged in it.
func Open(path string, opts Options) (*Backend, error) {
	if err := fsutil.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	st, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	if statErr == nil && st.Size() > 0 {
		if err := Verify(path); err != nil {
			return nil, err
		}
	}
	db, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	if err := fsutil.CreateDurably(path, created); err != nil {
		db.Close()
		return nil, err
	}
	if opts.BatchInterval == 0 {
		opts.BatchInterval = DefaultBatchInterval
	}
	if opts.BatchLimit <= 0 {
		opts.BatchLimit = DefaultBatchLimit
	}
	b := &Backend{path: path, opts: opts, db: db, ov: newOverlay(), stallOps: math.MaxInt,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if opts.BatchLimit <= math.MaxInt/stallFactor {
		b.stallOps = stallFactor * opts.BatchLimit
	}
	if err := b.Update(func(tx WriteTx) error {
		return nil
	}); err != nil {
		db.Close()
		return nil, err
	}
	go b.committer()
	return b, nil
}

// Verify reads every page reachable in an existing data file (every
// bucket, every key and value) before it is opened for writing, and
// reports a page that is not what its parent says it is (bbolt checks each
// page's id and type as it reads it) as ErrCorrupt naming the file.
//
// Why at every open: a power loss cannot corrupt a bbolt file whose
// commits were fsynced (a commit writes new pages, fsyncs, then flips one
// checksummed meta page; a torn meta page makes bbolt use the other one,
// which still describes intact pages). What does corrupt it is a disk or
// file system that loses or tears synced writes. bbolt's own open walks
// the same pages (it rebuilds the free list, which dyad does not sync) in
// a goroutine that panics on a bad page, killing the process with a stack
// trace; this walk runs first, here, turning that into a refusal to start
// with a clear error. The cost is a second walk of the file at start.
//
// What it cannot see: a value whose bytes changed inside a structurally
// sound page. bbolt keeps no checksums of its data pages.
func Verify(path string) (err error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		var pe *fs.PathError
		if errors.Is(err, bolt.ErrTimeout) || errors.As(err, &pe) {
			return fmt.Errorf("open %s: %w", path, err)
		}
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	defer db.Close()
	// A page id past the end of the file points outside the memory map:
	// make that fault a panic of this goroutine, recovered below.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, r)
		}
	}()
	return db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walkBucket(b) })
	})
}

// walkBucket reads every key and value of b and of its nested buckets.
func walkBucket(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				return walkBucket(nb)
			}
		}
		return nil
	})
}

func openBolt(path string, opts Options) (*bolt.DB, error) {
	mmap := opts.InitialMmapSize
	if mmap == 0 {
		mmap = 64 << 20
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         5 * time.Second,
		NoSync:          opts.NoSync,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: mmap,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Path is the data file's path.
func (b *Backend) Path() string { return b.path }

// View runs fn in a read-only transaction that sees every write made so
// far, committed or still in memory (Apply).
//
// The bbolt read transaction is taken (the shared generation, or one of
// its own while a bbolt write transaction runs), the active layer cloned
// (or the clone an earlier reader made of it, unchanged since, shared)
// and the frozen one taken in one step under ovmu. A freeze moves the
// active layer to frozen under ovmu, and a commit drops the frozen layer
// under ovmu only after bbolt's commit holding it returned. So a reader
// holds every batch in one of its layers or in its bbolt transaction: a
// batch is in the active layer until a freeze, then in the frozen one
// until after it is in every bbolt transaction opened from then on. A
// shared transaction opened before that commit is superseded at the
// freeze, before the commit begins, so no reader takes it after the drop.
// A layer over a bbolt transaction that already holds it repeats what is
// there, so it does not matter which side of a commit the transaction
// fell on. And since a batch enters the active layer whole under ovmu, a
// reader sees each batch whole or not at all.
//
// Readers outside a write share one bbolt read transaction per commit
// generation (readGen), as etcd's backend shares its read transaction:
// bbolt's Begin and Rollback serialise on its meta lock (and Rollback
// scans every open transaction), which queued hundreds of concurrent
// readers behind one another.
func (b *Backend) View(fn func(tx ReadTx) error) error {
	b.swap.RLock()
	defer b.swap.RUnlock()
	b.ovmu.Lock()
	tx, g, err := b.readTxLocked()
	var active, frozen *overlay
	if err == nil {
		if !b.sharedOK {
			b.shared, b.sharedOK = b.ov.clone(), true
		}
		active, frozen = b.shared, b.frozen
	}
	b.ovmu.Unlock()
	if err != nil {
		return err
	}
	if g != nil {
		defer g.release()
	} else {
		defer tx.Rollback()
	}
	lt := &layeredTx{base: boltTx{tx}}
	lt.push(active)
	lt.push(frozen)
	if lt.n == 0 {
		return fn(boltTx{tx})
	}
	return fn(lt)
}

// readTxLocked returns the bbolt read transaction a View starts with,
// and the generation it joined (nil: the transaction is its own, to roll
// back). The caller holds ovmu.
func (b *Backend) readTxLocked() (*bolt.Tx, *readGen, error) {
	if b.writing {
		tx, err := b.db.Begin(false)
		return tx, nil, err
	}
	if b.gen == nil {
		tx, err := b.db.Begin(false)
		if err != nil {
			return nil, nil, err
		}
		b.gen = newReadGen(tx)
	}
	b.gen.refs.Add(1)
	return b.gen.tx, b.gen, nil
}

// readGen is a bbolt read transaction shared by the Views that began
// between two bbolt commits. bbolt's read-only transactions may be read
// by many goroutines at once (a read transaction changes nothing in
// itself: no bucket or node cache, atomic statistics).
//
// refs counts its readers, plus one while it is the backend's current
// generation (Backend.gen). Readers join only the current generation,
// under ovmu, so refs never rises again once it reached 0; whoever drops
// it to 0 (the last reader, or the supersession when it has none) rolls
// the transaction back, without ovmu.
//
// What bounds it: a generation stops taking readers at the next bbolt
// commit (it is superseded before the write transaction begins), so it
// lives as long as the slowest reader that joined it before that commit,
// exactly as a transaction of that reader's own would. A long LIST pins
// the pages its transaction sees, as in etcd; readers after the next
// commit never join it, so a stream of short reads cannot keep an old
// transaction (and the pages freed since) alive. And because the
// supersession comes before the write transaction, a commit that must
// grow the memory map waits only for readers in flight, never for an
// idle shared transaction.
type readGen struct {
	tx   *bolt.Tx
	refs atomic.Int64
}

func newReadGen(tx *bolt.Tx) *readGen {
	g := &readGen{tx: tx}
	g.refs.Store(1) // the backend's reference, dropped by supersedeLocked
	return g
}

// release drops one reference; the last one rolls the transaction back.
func (g *readGen) release() {
	if g.refs.Add(-1) == 0 {
		g.tx.Rollback()
	}
}

// supersedeLocked takes the current generation out of service: no View
// joins it from now on, and it is rolled back as soon as its readers
// left (at once if it has none). The caller holds ovmu.
func (b *Backend) supersedeLocked() {
	if g := b.gen; g != nil {
		b.gen = nil
		g.release()
	}
}

// beginWriteLocked marks a bbolt write transaction as about to begin on
// the data file: the shared read transaction is superseded and Views
// open their own until endWriteLocked. The caller holds ovmu and cmu.
func (b *Backend) beginWriteLocked() {
	b.writing = true
	b.supersedeLocked()
}

// endWriteLocked ends what beginWriteLocked began, after bbolt's commit
// (or rollback) returned: the next View opens a new generation, which
// holds that commit. The caller holds ovmu and cmu.
func (b *Backend) endWriteLocked() { b.writing = false }

// Size is the size of the data file in bytes (etcd's dbSize).
func (b *Backend) Size() int64 {
	b.swap.RLock()
	defer b.swap.RUnlock()
	var n int64
	b.db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n
}

// SizeInUse is the part of the file holding live pages (etcd's dbSizeInUse).
func (b *Backend) SizeInUse() int64 {
	b.swap.RLock()
	defer b.swap.RUnlock()
	var n int64
	b.db.View(func(tx *bolt.Tx) error {
		st := b.db.Stats()
		n = tx.Size() - int64(st.FreePageN+st.PendingPageN)*int64(b.db.Info().PageSize)
		return nil
	})
	return n
}

// Snapshot writes a consistent copy of the whole data file to w, followed by
// the SHA-256 of everything written before it: etcd's snapshot format.
// onSize, if set, learns the total size before the first byte is written.
func (b *Backend) Snapshot(w io.Writer, onSize func(total int64)) (int64, error) {
	// Everything written so far, pending included, goes into the copy.
	if err := b.Commit(); err != nil {
		return 0, err
	}
	b.swap.RLock()
	defer b.swap.RUnlock()
	h := sha256.New()
	var n int64
	err := b.db.View(func(tx *bolt.Tx) error {
		if onSize != nil {
			onSize(tx.Size() + sha256.Size)
		}
		var err error
		n, err = tx.WriteTo(io.MultiWriter(w, h))
		return err
	})
	if err != nil {
		return n, err
	}
	m, err := w.Write(h.Sum(nil))
	return n + int64(m), err
}

// Defrag rewrites the data file compactly and swaps it in. Every transaction
// waits while it runs.
func (b *Backend) Defrag() error {
	unlock, err := b.holdWriters()
	if err != nil {
		return err
	}
	defer unlock()
	b.swap.Lock()
	defer b.swap.Unlock()
	tmp := b.path + ".defrag"
	os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	if err := bolt.Compact(dst, b.db, 64<<20); err != nil {
		dst.Close()
		os.Remove(tmp)
		return fmt.Errorf("defrag: %w", err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	dst.Close()
	return b.swapInLocked(tmp)
}

// swapInLocked replaces the data file with the durable file at tmp and
// reopens it. The caller holds cmu, and swap for writing.
func (b *Backend) swapInLocked(tmp string) error {
	// No View runs (swap is held for writing), so the shared read
	// transaction has no reader: it is rolled back here, before bbolt's
	// Close, which would wait for it.
	b.ovmu.Lock()
	b.supersedeLocked()
	b.ovmu.Unlock()
	if err := b.db.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, b.path); err != nil {
		return err
	}
	if err := fsutil.SyncDir(filepath.Dir(b.path)); err != nil {
		return err
	}
	db, err := openBolt(b.path, b.opts)
	if err != nil {
		return err
	}
	b.db = db
	return nil
}

// Replace installs a verified etcd-format snapshot as the data file, in
// place of the current one (a replica's resync). prepare, when not nil,
// runs in a write transaction on the restored copy, committed before the
// copy becomes the data file: what it writes is in the file from the first
// instant the file is the data file, whenever the process dies. Every
// transaction waits while the file is swapped; afterwards they see only the
// new file.
func (b *Backend) Replace(snapshot string, prepare func(tx WriteTx) error) error {
	tmp := b.path + ".incoming"
	os.Remove(tmp)
	if err := RestoreSnapshot(snapshot, tmp); err != nil {
		return err
	}
	if prepare != nil {
		db, err := openBolt(tmp, b.opts)
		if err != nil {
			return err
		}
		err = db.Update(func(tx *bolt.Tx) error { return prepare(boltTx{tx}) })
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp)
			return err
		}
	}
	unlock, err := b.holdWriters()
	if err != nil {
		return err
	}
	defer unlock()
	b.swap.Lock()
	defer b.swap.Unlock()
	return b.swapInLocked(tmp)
}

// Close closes the data file. It first commits one empty transaction, so
// that after a clean close both of bbolt's meta pages describe the final
// state: either can then be lost to a torn or rotten page without losing
// a write (after a crash only the older one is spare).
//
// The background committer is stopped, then what Apply left in memory is
// committed.
func (b *Backend) Close() error {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.cmu.Lock()
	defer b.cmu.Unlock()
	// A broken backend's file holds its last good commit: close it as
	// it is (the failure was reported to the writer that met it). A
	// backend that is not broken commits what Apply left in memory, even
	// if its caller refused that batch for a failure of its own (the
	// server's journal append): the background commit could have
	// written it already, so the caller cannot count on its absence
	// (internal/server's closeJournal).
	b.ovmu.Lock()
	wasBroken := b.broken != nil
	b.ovmu.Unlock()
	cerr := b.commitLayersLocked()
	b.swap.Lock()
	defer b.swap.Unlock()
	// No View runs now: the shared read transaction goes before bbolt's
	// last commit and Close, which would wait for it.
	b.ovmu.Lock()
	b.supersedeLocked()
	b.ovmu.Unlock()
	if cerr != nil && !wasBroken {
		b.db.Close()
		return cerr
	}
	if err := b.db.Update(func(*bolt.Tx) error { return nil }); err != nil {
		b.db.Close()
		return err
	}
	return b.db.Close()
}

// VerifySnapshot checks the SHA-256 trailer of an etcd-format snapshot file
// and returns the length of the database part.
func VerifySnapshot(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if size%512 != sha256.Size {
		// bbolt files are a whole number of pages; anything else after
		// them has to be exactly the trailer.
		return 0, fmt.Errorf("%w: snapshot %s has no SHA-256 trailer", ErrCorrupt, path)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, size-sha256.Size); err != nil {
		return 0, err
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return 0, err
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return 0, fmt.Errorf("%w: snapshot %s fails its SHA-256 check", ErrCorrupt, path)
	}
	return size - sha256.Size, nil
}

// RestoreSnapshot installs the database part of a verified etcd-format
// snapshot as the data file at dst, durably. dst must not exist.
func RestoreSnapshot(snapshot, dst string) error {
	n, err := VerifySnapshot(snapshot)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("restore: %s already exists", dst)
	}
	if err := fsutil.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	in, err := os.Open(snapshot)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".restore"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, in, n); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	// Check that it really is a bbolt file before it becomes the data file.
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(BucketKey) == nil || tx.Bucket(BucketMeta) == nil {
			return fmt.Errorf("%w: snapshot lacks etcd's key/meta buckets", ErrCorrupt)
		}
		return nil
	})
	db.Close()
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(dst))
}

// PutUint64 and Uint64 encode meta counters as etcd does (big endian).
func PutUint64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// Uint64 decodes a big-endian counter; nil or short input decodes as 0.
func Uint64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Get(bucket, key []byte) []byte {
	bk := t.tx.Bucket(bucket)
	if bk == nil {
		return nil
	}
	return bk.Get(key)
}

func (t boltTx) Scan(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	bk := t.tx.Bucket(bucket)
	if bk == nil {
		return nil
	}
	c := bk.Cursor()
	var k, v []byte
	if from == nil {
		k, v = c.First()
	} else {
		k, v = c.Seek(from)
	}
	for ; k != nil; k, v = c.Next() {
		if to != nil && bytes.Compare(k, to) >= 0 {
			return nil
		}
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t boltTx) ScanReverse(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	bk := t.tx.Bucket(bucket)
	if bk == nil {
		return nil
	}
	c := bk.Cursor()
	var k, v []byte
	if to == nil {
		k, v = c.Last()
	} else {
		k, v = c.Seek(to)
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
	}
	for ; k != nil; k, v = c.Prev() {
		if from != nil && bytes.Compare(k, from) < 0 {
			return nil
		}
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t boltTx) Put(bucket, key, value []byte) error {
	bk := t.tx.Bucket(bucket)
	if bk == nil {
		return fmt.Errorf("storage: no bucket %q", bucket)
	}
	return bk.Put(key, value)
}

func (t boltTx) Delete(bucket, key []byte) error {
	bk := t.tx.Bucket(bucket)
	if bk == nil {
		return nil
	}
	return bk.Delete(key)
}
