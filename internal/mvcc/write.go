package mvcc

import (
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/storage"
)

// WriteTxn is one etcd transaction's worth of changes: every change gets the
// same main revision (BeginRev+1) and a rising sub revision. A WriteTxn with
// no change does not consume a revision.
//
// The index is updated as changes are made, above the readable mark, so
// readers ignore them until MarkDurable. If the enclosing storage
// transaction fails to commit, the index is ahead of the disk: the owner
// must stop the process (the restart rebuilds the index from disk).
type WriteTxn struct {
	s        *Store
	tx       storage.WriteTx
	beginRev int64
	changes  []Event
}

// Write starts a write transaction inside the storage transaction tx.
// Writer goroutine only; one WriteTxn at a time.
func (s *Store) Write(tx storage.WriteTx) *WriteTxn {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return &WriteTxn{s: s, tx: tx, beginRev: s.currentRev}
}

// Rev is the revision reads inside the transaction see, and the revision
// the transaction ends at.
func (w *WriteTxn) Rev() int64 {
	if len(w.changes) > 0 {
		return w.beginRev + 1
	}
	return w.beginRev
}

// Range reads inside the transaction, seeing its own earlier changes.
func (w *WriteTxn) Range(key, end []byte, ro RangeOptions) (RangeResult, error) {
	w.s.mu.RLock()
	return w.s.rangeLocked(w.tx, key, end, ro, w.Rev())
}

// Get returns the live value of key inside the transaction, or nil.
func (w *WriteTxn) Get(key []byte) (*mvccpb.KeyValue, error) {
	kv, _, err := w.get(key)
	return kv, err
}

// get is Get for one key without Range's machinery (every Put calls it):
// one index lookup, and one read of the value if the key is live. It also
// returns the key's keyIndex (nil if the index has none), which stays in
// the index until this transaction's owner changes it: only the writer
// goroutine adds or drops keyIndexes (Put, Compact), readers never do.
func (w *WriteTxn) get(key []byte) (*mvccpb.KeyValue, *keyIndex, error) {
	w.s.mu.RLock()
	ki := w.s.idx.get(key)
	var mod Revision
	live := false
	if ki != nil {
		mod, _, _, live = ki.lookup(w.Rev())
	}
	w.s.mu.RUnlock()
	if !live {
		return nil, ki, nil
	}
	v := w.tx.Get(storage.BucketKey, RevBytes(mod))
	if v == nil {
		return nil, nil, fmt.Errorf("%w: revision {%d %d} in index but not on disk", storage.ErrCorrupt, mod.Main, mod.Sub)
	}
	kv := &mvccpb.KeyValue{}
	if err := kv.Unmarshal(v); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", storage.ErrCorrupt, err)
	}
	return kv, ki, nil
}

// Put writes key. It returns the previous value (nil if none).
func (w *WriteTxn) Put(key, value []byte, lease int64) (*mvccpb.KeyValue, error) {
	prev, ki, err := w.get(key)
	if err != nil {
		return nil, err
	}
	rev := Revision{Main: w.beginRev + 1, Sub: int64(len(w.changes))}
	kv := &mvccpb.KeyValue{
		Key:            key,
		Value:          value,
		CreateRevision: rev.Main,
		ModRevision:    rev.Main,
		Version:        1,
		Lease:          lease,
	}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
	}
	data, err := kv.Marshal()
	if err != nil {
		return nil, err
	}
	// data and the key are fresh: handed over, not copied again.
	if err := storage.PutOwned(w.tx, storage.BucketKey, RevBytes(rev), data); err != nil {
		return nil, err
	}
	w.s.mu.Lock()
	if ki == nil {
		ki = w.s.idx.create(key) // get found none, and only this writer adds keys
	}
	ki.put(rev)
	ki.lease = lease
	w.s.currentRev = rev.Main
	w.s.mu.Unlock()
	if w.s.leases != nil {
		if prev != nil && prev.Lease != 0 && prev.Lease != lease {
			w.s.leases.Detach(prev.Lease, key)
		}
		if lease != 0 {
			w.s.leases.Attach(lease, key)
		}
	}
	w.changes = append(w.changes, Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev})
	return prev, nil
}

// DeleteRange deletes every live key in [key, end) and returns what was
// deleted, in key order.
func (w *WriteTxn) DeleteRange(key, end []byte) ([]mvccpb.KeyValue, error) {
	r, err := w.Range(key, end, RangeOptions{})
	if err != nil {
		return nil, err
	}
	for i := range r.KVs {
		if err := w.delete(&r.KVs[i]); err != nil {
			return nil, err
		}
	}
	return r.KVs, nil
}

func (w *WriteTxn) delete(prev *mvccpb.KeyValue) error {
	rev := Revision{Main: w.beginRev + 1, Sub: int64(len(w.changes))}
	tomb := &mvccpb.KeyValue{Key: prev.Key}
	data, err := tomb.Marshal()
	if err != nil {
		return err
	}
	if err := w.tx.Put(storage.BucketKey, TombstoneBytes(rev), data); err != nil {
		return err
	}
	w.s.mu.Lock()
	ki := w.s.idx.get(prev.Key)
	if ki == nil {
		w.s.mu.Unlock()
		return fmt.Errorf("mvcc: deleting %q which the index does not hold", prev.Key)
	}
	ki.tombstone(rev)
	ki.lease = 0
	w.s.currentRev = rev.Main
	w.s.mu.Unlock()
	if w.s.leases != nil && prev.Lease != 0 {
		w.s.leases.Detach(prev.Lease, prev.Key)
	}
	// A deletion event carries the key and the deletion's revision, as
	// etcd's watch does.
	w.changes = append(w.changes, Event{
		Type:   mvccpb.DELETE,
		Kv:     &mvccpb.KeyValue{Key: prev.Key, ModRevision: rev.Main},
		PrevKv: prev,
	})
	return nil
}

// Changes are the events of the transaction so far, in order. PrevKv is
// filled in every event; the watch layer strips it for watchers that did not
// ask for it.
func (w *WriteTxn) Changes() []Event { return w.changes }
