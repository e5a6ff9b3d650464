package storage

import (
	"bytes"
	"fmt"
	"runtime"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/dyad-db/dyad/internal/failpoint"
)

// Apply runs fn against the backend's state and keeps what it wrote in
// memory, returning without any bbolt commit. What fn writes is visible at
// once to every reader (View) and to later Apply and Update callbacks, and
// becomes durable at the next commit of the layers: Commit, Update,
// Snapshot, Close, or the background committer (BatchInterval, or
// BatchLimit reached).
//
// fn writes into a layer of its own; reads inside fn see fn's own writes,
// then the active and frozen layers, then bbolt's last commit. When fn
// returns nil the layer is merged into the active one in one step under
// ovmu, so readers see the batch whole or not at all, and whatever fn
// wrote lands in one bbolt commit (the log position that a batch writes
// in meta goes to disk with its data).
//
// If fn fails, or an injected fault fires, its layer is dropped and
// nothing of it is kept. That leaves the backend exactly as it was
// before the call, every earlier batch included, so it goes on taking
// writes: fn's failure loses nothing that a caller may have been told.
//
// Apply never waits for a bbolt commit, with one exception: while a
// commit runs and the active layer already holds stallFactor ×
// BatchLimit puts and deletes, Apply first waits for that commit to end.
//
// The caller makes the batch durable by its own means before it tells
// anybody it is (the server's journal) and, after a crash, brings back
// what the data file lacks from there. Apply fails once the backend is
// broken (a commit failed).
func (b *Backend) Apply(fn func(tx WriteTx) error) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.ovmu.Lock()
	for b.broken == nil && b.frozen != nil && b.activeOps >= b.stallOps {
		// The stall. Taken before any bbolt read transaction is open:
		// the commit may need to remap the file, which waits for every
		// open read transaction.
		done := b.frozenDone
		b.ovmu.Unlock()
		b.stalls.Add(1)
		<-done
		b.ovmu.Lock()
	}
	if err := b.broken; err != nil {
		b.ovmu.Unlock()
		return err
	}
	// Holding wmu, this goroutine alone changes the active layer: it is
	// read below without ovmu and without a clone. The frozen layer
	// nobody changes.
	tx := &batchTx{b: b, own: newOverlay()}
	tx.lower[0], tx.lower[1] = b.ov, b.frozen
	b.ovmu.Unlock()

	b.swap.RLock()
	defer b.swap.RUnlock()
	defer tx.close()
	err := fn(tx)
	if err == nil {
		err = tx.err // a read fn made could not reach bbolt
	}
	if err == nil {
		if f := b.fault.Load(); f != nil {
			err = (*f)()
		}
	}
	if err != nil {
		return err // the batch's own layer is dropped with tx
	}
	if tx.ops == 0 {
		return nil
	}
	b.ovmu.Lock()
	defer b.ovmu.Unlock()
	if err := b.broken; err != nil {
		// A commit failed while fn ran: this batch would never reach
		// the file either.
		return err
	}
	if b.activeOps == 0 {
		b.activeSince = time.Now()
	}
	b.ov.merge(tx.own)
	b.shared, b.sharedOK = nil, false // readers from now on see this batch
	b.activeOps += tx.ops
	if b.activeOps >= b.opts.BatchLimit {
		select {
		case b.kick <- struct{}{}:
		default: // a kick is already waiting for the committer
		}
	}
	return nil
}

// batchTx is what Apply's callback writes to: a layer of its own, over
// the active and frozen layers as Apply found them, over a bbolt read
// transaction opened at the first read that needs it.
//
// Reading the active layer without a clone is safe because Apply holds
// wmu: no other goroutine changes that layer's contents meanwhile (a
// commit may freeze it, which moves it without changing it; a reader's
// copy-on-write Clone changes only the tree's copy-on-write context,
// which lookups and walks never read). A bbolt transaction opened late
// sees at most more of the lower layers committed, which the layers over
// it repeat.
type batchTx struct {
	b     *Backend
	own   *overlay
	lower [2]*overlay // active, frozen (nil: none)
	ops   int
	base  *bolt.Tx // nil until a read reaches bbolt
	err   error    // from opening base; fails the Apply
}

// read is the layered view fn's reads go through.
func (t *batchTx) read() (*layeredTx, error) {
	if t.base == nil && t.err == nil {
		t.base, t.err = t.b.db.Begin(false)
	}
	if t.err != nil {
		return nil, t.err
	}
	lt := &layeredTx{base: boltTx{t.base}}
	lt.push(t.own)
	lt.push(t.lower[0])
	lt.push(t.lower[1])
	return lt, nil
}

func (t *batchTx) close() {
	if t.base != nil {
		t.base.Rollback()
	}
}

func (t *batchTx) Get(bucket, key []byte) []byte {
	if v, ok := layersGet([]*overlay{t.own, t.lower[0], t.lower[1]}, bucket, key); ok {
		return v
	}
	lt, err := t.read()
	if err != nil {
		return nil
	}
	return lt.base.Get(bucket, key)
}

func (t *batchTx) Scan(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	lt, err := t.read()
	if err != nil {
		return err
	}
	return lt.Scan(bucket, from, to, fn)
}

func (t *batchTx) ScanReverse(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	lt, err := t.read()
	if err != nil {
		return err
	}
	return lt.ScanReverse(bucket, from, to, fn)
}

// Put records the write in the batch's layer. As bbolt would, it refuses
// a bucket the data file does not have.
func (t *batchTx) Put(bucket, key, value []byte) error {
	if err := t.checkPut(bucket, key, value); err != nil {
		return err
	}
	t.own.put(bucket, key, value)
	t.ops++
	return nil
}

// putOwned is Put without copying key and value (PutOwned).
func (t *batchTx) putOwned(bucket, key, value []byte) error {
	if err := t.checkPut(bucket, key, value); err != nil {
		return err
	}
	t.own.putOwned(bucket, key, value)
	t.ops++
	return nil
}

// checkPut refuses what bbolt's Put would.
func (t *batchTx) checkPut(bucket, key, value []byte) error {
	if !t.hasBucket(bucket) {
		return fmt.Errorf("storage: no bucket %q", bucket)
	}
	if len(key) == 0 {
		return berrors.ErrKeyRequired
	}
	if len(key) > bolt.MaxKeySize {
		return berrors.ErrKeyTooLarge
	}
	if int64(len(value)) > bolt.MaxValueSize {
		return berrors.ErrValueTooLarge
	}
	return nil
}

// PutOwned is tx.Put for a key and value the caller hands over: it must
// never change or reuse them after the call. A batch of Backend.Apply
// then keeps them in its layer as they are, where Put copies them (a
// 2 KiB value was copied once more on every write); any other
// transaction copies as Put does.
func PutOwned(tx WriteTx, bucket, key, value []byte) error {
	if o, ok := tx.(interface {
		putOwned(bucket, key, value []byte) error
	}); ok {
		return o.putOwned(bucket, key, value)
	}
	return tx.Put(bucket, key, value)
}

// Delete records a tombstone in the batch's layer; a bucket the data
// file does not have has nothing to delete.
func (t *batchTx) Delete(bucket, key []byte) error {
	if !t.hasBucket(bucket) {
		return nil
	}
	t.own.del(bucket, key)
	t.ops++
	return nil
}

// hasBucket reports whether the data file has bucket: every bucket of
// the schema does (openBolt creates them), anything else is looked up.
func (t *batchTx) hasBucket(bucket []byte) bool {
	for _, name := range allBuckets {
		if bytes.Equal(name, bucket) {
			return true
		}
	}
	lt, err := t.read()
	return err == nil && lt.base.tx.Bucket(bucket) != nil
}

// committer commits the active layer once it is BatchInterval old or
// Apply reports it reached BatchLimit. Its owner is the Backend: Close
// stops it and waits for it. It never takes wmu, so Apply runs on while
// it commits.
func (b *Backend) committer() {
	defer close(b.done)
	var tick <-chan time.Time
	if b.opts.BatchInterval > 0 {
		t := time.NewTicker(b.opts.BatchInterval / 2)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-b.stop:
			return
		case <-tick:
		case <-b.kick:
		}
		b.cmu.Lock()
		b.ovmu.Lock()
		due := b.activeOps >= b.opts.BatchLimit ||
			(b.activeOps > 0 && b.opts.BatchInterval > 0 && time.Since(b.activeSince) >= b.opts.BatchInterval)
		b.ovmu.Unlock()
		if due {
			_ = b.commitLayersLocked() // a failure breaks the backend: the next write reports it
		}
		b.cmu.Unlock()
	}
}

// Commit makes everything applied before the call durable in bbolt; it
// does nothing when nothing is in memory. A commit already running is
// waited for, then what came after it is committed.
func (b *Backend) Commit() error {
	b.cmu.Lock()
	defer b.cmu.Unlock()
	return b.commitLayersLocked()
}

// commitLayersLocked freezes the active layer, writes it to bbolt in a
// transaction of its own and commits it, then drops it. Only the freeze
// and the drop take ovmu (each O(1)): Apply and readers go on meanwhile.
// The caller holds cmu, so no other frozen layer exists.
//
// A failed commit breaks the backend and keeps the frozen layer, so that
// readers go on seeing everything applied.
func (b *Backend) commitLayersLocked() error {
	b.ovmu.Lock()
	if err := b.broken; err != nil {
		b.ovmu.Unlock()
		return err
	}
	if b.activeOps == 0 {
		b.ovmu.Unlock()
		return nil
	}
	f, done := b.ov, make(chan struct{})
	b.frozen, b.frozenDone = f, done
	b.ov, b.activeOps = newOverlay(), 0
	b.shared, b.sharedOK = nil, false
	b.beginWriteLocked() // in the freeze's step: see View
	b.ovmu.Unlock()

	err := b.writeLayer(f)

	b.ovmu.Lock()
	if err != nil {
		b.broken = fmt.Errorf("storage: a pending batch was lost: %w", err)
	} else {
		b.frozen = nil // only now: see View
	}
	b.endWriteLocked()
	b.frozenDone = nil
	close(done)
	b.ovmu.Unlock()
	return err
}

// writeLayer writes f's puts and deletes to bbolt, bucket by bucket in key
// order, and commits them durably.
//
// It yields its P every yieldEvery puts and deletes. Handing them to
// bbolt is a burst of CPU (about half a millisecond for a layer of a
// hundred puts, and longer for bigger ones) that Go preempts only after
// 10 ms; meanwhile the apply loop's other P is often held by its wait in
// C (the DDS waitset, internal/server/loopwait.go), so a gRPC answer or a
// request read readied during the burst would wait for its end.
func (b *Backend) writeLayer(f *overlay) error {
	b.swap.RLock()
	defer b.swap.RUnlock()
	tx, err := b.db.Begin(true)
	if err != nil {
		return err
	}
	n := 0 // puts and deletes handed to bbolt so far
	names := make([]string, 0, len(f.trees))
	for name := range f.trees {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		bk := tx.Bucket([]byte(name))
		if bk != nil && appendOnly(name) {
			bk.FillPercent = appendFill
		}
		f.trees[name].Ascend(func(it ovItem) bool {
			if n++; n%yieldEvery == 0 {
				runtime.Gosched()
			}
			switch {
			case it.del && bk == nil:
			case it.del:
				err = bk.Delete(it.key)
			case bk == nil:
				err = fmt.Errorf("storage: no bucket %q", name)
			default:
				err = bk.Put(it.key, it.val)
			}
			return err == nil
		})
		if err != nil {
			tx.Rollback()
			return err
		}
	}
	if h := b.commitHook.Load(); h != nil {
		(*h)()
	}
	return b.commitTx(tx)
}

// yieldEvery is how many puts and deletes writeLayer hands bbolt between
// two yields of its P.
const yieldEvery = 32

// appendFill is the fill at which bbolt splits a page of a bucket whose
// keys only grow (appendOnly), as etcd sets for its key bucket. Such a
// bucket's pages are never written into again once a later key passed
// them, so the default split at half full would leave every page half
// empty: twice the pages per commit (each a write of its own) and twice
// the file.
const appendFill = 0.9

// appendOnly reports whether a bucket's new keys always sort after its
// old ones: the key bucket's revisions and the replication log's indexes.
func appendOnly(bucket string) bool {
	return bucket == string(BucketKey) || bucket == string(BucketLog)
}

// commitTx commits tx durably, or rolls it back on an injected fault.
func (b *Backend) commitTx(tx *bolt.Tx) error {
	if f := b.fault.Load(); f != nil {
		if err := (*f)(); err != nil {
			tx.Rollback()
			return err
		}
	}
	// Failpoints (compiled out by default): a crash or an error before the
	// commit loses the transaction, one after it keeps it; both leave the
	// caller without an acknowledgement to give.
	if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
		tx.Rollback()
		return err
	}
	start := time.Now()
	err := tx.Commit()
	if b.opts.OnCommit != nil {
		b.opts.OnCommit(time.Since(start))
	}
	if err == nil {
		err = failpoint.Hit(failpoint.AfterCommit)
	}
	return err
}

// holdWriters takes wmu and cmu and commits what Apply left in memory,
// for the callers that need bbolt alone with no layer in memory and none
// coming (Update, Defrag, Replace). On success the caller holds both until
// it calls unlock; on failure neither is held.
func (b *Backend) holdWriters() (unlock func(), err error) {
	b.wmu.Lock()
	b.cmu.Lock()
	unlock = func() {
		b.cmu.Unlock()
		b.wmu.Unlock()
	}
	if err := b.commitLayersLocked(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// Update runs fn in a read-write transaction of its own and commits it
// durably (fsync) before returning. If fn fails nothing of fn's is
// written. What Apply left in memory is committed first, in a commit of
// its own: bbolt cannot take back part of a transaction, and fn's failure
// must not take those batches with it. Holding wmu throughout, Update
// runs with no layer in memory: fn reads bbolt alone.
func (b *Backend) Update(fn func(tx WriteTx) error) error {
	unlock, err := b.holdWriters()
	if err != nil {
		return err
	}
	defer unlock()
	b.swap.RLock()
	defer b.swap.RUnlock()
	// Views from now on open a read transaction of their own, and the
	// first after the commit a new shared one, which holds fn's writes.
	b.ovmu.Lock()
	b.beginWriteLocked()
	b.ovmu.Unlock()
	defer func() {
		b.ovmu.Lock()
		b.endWriteLocked()
		b.ovmu.Unlock()
	}()
	tx, err := b.db.Begin(true)
	if err != nil {
		return err
	}
	if err := fn(boltTx{tx}); err != nil {
		tx.Rollback()
		return err
	}
	return b.commitTx(tx)
}
