package storage

import (
	"bytes"

	"github.com/google/btree"
)

// ovItem is one key's newest value in the pending batch, or its deletion.
type ovItem struct {
	key, val []byte
	del      bool
}

func ovLess(a, b ovItem) bool { return bytes.Compare(a.key, b.key) < 0 }

// overlay holds what the pending write transaction changed, bucket by
// bucket: the part of the backend readers cannot get from a bbolt read
// transaction until the batch is committed (etcd's backend read buffer
// plays this part there).
//
// A clone shares its trees copy-on-write (google/btree's lazy Clone): the
// writer goes on changing the original while readers walk their clones,
// and neither sees the other's later changes. Keys and values are copies,
// never aliases of the caller's buffers or of bbolt's pages.
type overlay struct {
	trees map[string]*btree.BTreeG[ovItem]
}

func newOverlay() *overlay { return &overlay{trees: map[string]*btree.BTreeG[ovItem]{}} }

func (o *overlay) tree(bucket []byte) *btree.BTreeG[ovItem] {
	t := o.trees[string(bucket)]
	if t == nil {
		t = btree.NewG(32, ovLess)
		o.trees[string(bucket)] = t
	}
	return t
}

func (o *overlay) put(bucket, key, val []byte) {
	o.tree(bucket).ReplaceOrInsert(ovItem{key: bytes.Clone(key), val: bytes.Clone(val)})
}

func (o *overlay) del(bucket, key []byte) {
	o.tree(bucket).ReplaceOrInsert(ovItem{key: bytes.Clone(key), del: true})
}

// empty reports whether the overlay holds nothing.
func (o *overlay) empty() bool {
	for _, t := range o.trees {
		if t.Len() > 0 {
			return false
		}
	}
	return true
}

// clone returns a snapshot for one reader, or nil when there is nothing
// to overlay (the reader then reads bbolt alone). The caller holds the
// lock that excludes the writer (Backend.ovmu).
func (o *overlay) clone() *overlay {
	var c *overlay
	for name, t := range o.trees {
		if t.Len() == 0 {
			continue
		}
		if c == nil {
			c = newOverlay()
		}
		c.trees[name] = t.Clone()
	}
	return c
}

// get returns the overlay's word on key: found is false when the pending
// batch did not touch it.
func (o *overlay) get(bucket, key []byte) (it ovItem, found bool) {
	t := o.trees[string(bucket)]
	if t == nil {
		return ovItem{}, false
	}
	return t.Get(ovItem{key: key})
}

// ovReadTx reads bbolt's committed state with the pending batch laid over
// it: a key the batch wrote reads as written, one it deleted reads as
// absent, and scans merge the two in key order.
type ovReadTx struct {
	base boltTx
	ov   *overlay
}

func (t ovReadTx) Get(bucket, key []byte) []byte {
	if it, ok := t.ov.get(bucket, key); ok {
		if it.del {
			return nil
		}
		return it.val
	}
	return t.base.Get(bucket, key)
}

func inRange(k, from, to []byte) bool {
	return (from == nil || bytes.Compare(k, from) >= 0) && (to == nil || bytes.Compare(k, to) < 0)
}

func (t ovReadTx) Scan(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	return t.scan(bucket, from, to, false, fn)
}

func (t ovReadTx) ScanReverse(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	return t.scan(bucket, from, to, true, fn)
}

// scan walks [from, to) of bucket in key order (reverse: backwards),
// merging bbolt's committed keys with the overlay's: the overlay's
// version of a key wins, and its deletions hide the committed value.
func (t ovReadTx) scan(bucket, from, to []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	ot := t.ov.trees[string(bucket)]
	if ot == nil || ot.Len() == 0 {
		if reverse {
			return t.base.ScanReverse(bucket, from, to, fn)
		}
		return t.base.Scan(bucket, from, to, fn)
	}
	// The committed side, as a cursor positioned at its first key in
	// scan order.
	var k, v []byte
	var step func() ([]byte, []byte)
	if bk := t.base.tx.Bucket(bucket); bk != nil {
		c := bk.Cursor()
		switch {
		case !reverse:
			step = c.Next
			if from == nil {
				k, v = c.First()
			} else {
				k, v = c.Seek(from)
			}
		case to == nil:
			step = c.Prev
			k, v = c.Last()
		default:
			step = c.Prev
			if k, v = c.Seek(to); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		}
	}
	// first reports whether a comes before b in scan order.
	first := func(a, b []byte) bool {
		c := bytes.Compare(a, b)
		return c != 0 && (c < 0) != reverse
	}
	more, err := true, error(nil)
	// committed hands fn the committed keys in range, up to (not
	// including) limit when bounded.
	committed := func(limit []byte, bounded bool) {
		for more && err == nil && k != nil && inRange(k, from, to) && (!bounded || first(k, limit)) {
			more, err = fn(k, v)
			k, v = step()
		}
	}
	visit := func(it ovItem) bool {
		if !inRange(it.key, from, to) {
			// Not in the range yet: go on; past it: stop.
			if reverse {
				return to != nil && bytes.Compare(it.key, to) >= 0
			}
			return bytes.Compare(it.key, from) < 0
		}
		committed(it.key, true)
		if !more || err != nil {
			return false
		}
		if k != nil && bytes.Equal(k, it.key) {
			k, v = step() // superseded by the overlay
		}
		if !it.del {
			more, err = fn(it.key, it.val)
		}
		return more && err == nil
	}
	switch {
	case !reverse && from == nil:
		ot.Ascend(visit)
	case !reverse:
		ot.AscendGreaterOrEqual(ovItem{key: from}, visit)
	case to == nil:
		ot.Descend(visit)
	default:
		ot.DescendLessOrEqual(ovItem{key: to}, visit)
	}
	committed(nil, false)
	return err
}

// batchTx is the pending write transaction as Apply's callback sees it:
// reads see the transaction's own writes (bbolt's write transaction does
// that), and every change is also recorded in the overlay for readers.
//
// The overlay is changed under Backend.ovmu, which readers take only to
// clone it.
type batchTx struct {
	boltTx
	b *Backend
}

func (t batchTx) Put(bucket, key, value []byte) error {
	if err := t.boltTx.Put(bucket, key, value); err != nil {
		return err
	}
	t.b.ovmu.Lock()
	t.b.ov.put(bucket, key, value)
	t.b.ovmu.Unlock()
	t.b.pendingOps++
	return nil
}

func (t batchTx) Delete(bucket, key []byte) error {
	if err := t.boltTx.Delete(bucket, key); err != nil {
		return err
	}
	t.b.ovmu.Lock()
	t.b.ov.del(bucket, key)
	t.b.ovmu.Unlock()
	t.b.pendingOps++
	return nil
}
