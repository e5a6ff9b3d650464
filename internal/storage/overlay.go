package storage

import (
	"bytes"

	"github.com/google/btree"
)

// ovItem is one key's newest value in a layer, or its deletion (a
// tombstone, which hides the key in every layer below).
type ovItem struct {
	key, val []byte
	del      bool
}

func ovLess(a, b ovItem) bool { return bytes.Compare(a.key, b.key) < 0 }

// overlay is one layer of changes not yet in a bbolt commit, bucket by
// bucket: a batch being applied, the active layer batches are merged
// into, or the frozen layer a commit is writing to bbolt (etcd's backend
// read buffer plays this part there).
//
// A clone shares its trees copy-on-write (google/btree's lazy Clone): the
// writer goes on changing the original while readers walk their clones,
// and neither sees the other's later changes. Keys and values are copies,
// never aliases of the caller's buffers or of bbolt's pages (or buffers
// the caller handed over with PutOwned and never touches again), and an item
// once inserted is never changed in place (a newer one replaces it), so a
// tree that nobody changes any more (a frozen layer) may be read by any
// number of goroutines without a clone.
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

// putOwned is put for a key and value the caller hands over (PutOwned):
// the layer keeps them without a copy.
func (o *overlay) putOwned(bucket, key, val []byte) {
	o.tree(bucket).ReplaceOrInsert(ovItem{key: key, val: val})
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
// to overlay. The caller holds the lock that excludes the writer
// (Backend.ovmu).
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

// merge lays src over o: src's items replace o's for the same keys. src
// is consumed: a tree of a bucket o has none of is adopted whole, so src
// must not be used afterwards.
func (o *overlay) merge(src *overlay) {
	for name, st := range src.trees {
		if st.Len() == 0 {
			continue
		}
		dt := o.trees[name]
		if dt == nil || dt.Len() == 0 {
			o.trees[name] = st
			continue
		}
		st.Ascend(func(it ovItem) bool {
			dt.ReplaceOrInsert(it)
			return true
		})
	}
}

// get returns the overlay's word on key: found is false when the layer
// did not touch it.
func (o *overlay) get(bucket, key []byte) (it ovItem, found bool) {
	t := o.trees[string(bucket)]
	if t == nil {
		return ovItem{}, false
	}
	return t.Get(ovItem{key: key})
}

// maxLayers is the most overlays a read stacks over bbolt: a batch's own
// writes, the active layer and the frozen one.
const maxLayers = 3

// layeredTx reads bbolt's committed state with up to maxLayers overlays
// laid over it, the topmost first: the topmost layer that has a key
// decides it (a tombstone reads as absent), and scans merge every layer
// and bbolt in key order.
type layeredTx struct {
	base boltTx
	ovs  [maxLayers]*overlay
	n    int
}

// push adds o below the layers already there; nil or empty layers are
// left out.
func (t *layeredTx) push(o *overlay) {
	if o != nil && !o.empty() {
		t.ovs[t.n] = o
		t.n++
	}
}

func (t *layeredTx) Get(bucket, key []byte) []byte {
	if v, ok := layersGet(t.ovs[:t.n], bucket, key); ok {
		return v
	}
	return t.base.Get(bucket, key)
}

// layersGet looks key up in layers, newest first (nil layers skipped):
// the value of the first layer that touched it (nil for a delete), with
// decided true; decided false when none did and the layer below answers.
func layersGet(layers []*overlay, bucket, key []byte) (val []byte, decided bool) {
	for _, o := range layers {
		if o == nil {
			continue
		}
		if it, ok := o.get(bucket, key); ok {
			if it.del {
				return nil, true
			}
			return it.val, true
		}
	}
	return nil, false
}

func inRange(k, from, to []byte) bool {
	return (from == nil || bytes.Compare(k, from) >= 0) && (to == nil || bytes.Compare(k, to) < 0)
}

func (t *layeredTx) Scan(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	return t.scan(bucket, from, to, false, fn)
}

func (t *layeredTx) ScanReverse(bucket, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	return t.scan(bucket, from, to, true, fn)
}

// scan walks [from, to) of bucket in key order (reverse: backwards),
// merging bbolt's committed keys with every layer's: for each key the
// topmost layer that has it wins, and a tombstone hides it.
func (t *layeredTx) scan(bucket, from, to []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	var curs [maxLayers]ovCursor
	n := 0
	for _, o := range t.ovs[:t.n] {
		if ot := o.trees[string(bucket)]; ot != nil && ot.Len() > 0 {
			curs[n] = ovCursor{t: ot, from: from, to: to, reverse: reverse}
			n++
		}
	}
	if n == 0 {
		if reverse {
			return t.base.ScanReverse(bucket, from, to, fn)
		}
		return t.base.Scan(bucket, from, to, fn)
	}
	// The committed side, as a cursor positioned at its first key in
	// scan order (k is nil once it has left the range).
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
	advance := func() {
		if k, v = step(); k != nil && !inRange(k, from, to) {
			k = nil
		}
	}
	if k != nil && !inRange(k, from, to) {
		k = nil
	}
	// before reports whether a comes before b in scan order.
	before := func(a, b []byte) bool {
		c := bytes.Compare(a, b)
		return c != 0 && (c < 0) != reverse
	}
	for {
		// The layers' next key: the topmost layer holding it wins (a
		// lower one replaces the choice only with a key strictly first).
		best := -1
		var it ovItem
		for i := range curs[:n] {
			if c, ok := curs[i].peek(); ok && (best < 0 || before(c.key, it.key)) {
				best, it = i, c
			}
		}
		if best < 0 {
			break
		}
		if k != nil && before(k, it.key) {
			more, err := fn(k, v)
			if err != nil || !more {
				return err
			}
			advance()
			continue
		}
		// Every layer holding the key, and bbolt, move past it.
		for i := best; i < n; i++ {
			if c, ok := curs[i].peek(); ok && bytes.Equal(c.key, it.key) {
				curs[i].next()
			}
		}
		if k != nil && bytes.Equal(k, it.key) {
			advance()
		}
		if !it.del {
			more, err := fn(it.key, it.val)
			if err != nil || !more {
				return err
			}
		}
	}
	for k != nil {
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
		advance()
	}
	return nil
}

// ovCursor walks the items of one layer's tree inside [from, to) in scan
// order. google/btree iterates only by callback, so the cursor takes the
// items a chunk at a time and resumes after the last one it took: a seek
// per chunk, not per key.
type ovCursor struct {
	t        *btree.BTreeG[ovItem]
	from, to []byte
	reverse  bool

	buf     []ovItem
	i       int
	last    []byte // key of the last item taken; nil before the first chunk
	started bool
	end     bool // nothing is left after buf
}

// ovChunk is how many items a cursor takes at a time: small first, as
// many scans stop after a few keys, larger after.
const (
	ovFirstChunk = 8
	ovChunk      = 128
)

// peek returns the cursor's current item; ok is false at the end.
func (c *ovCursor) peek() (it ovItem, ok bool) {
	if c.i == len(c.buf) {
		if c.end {
			return ovItem{}, false
		}
		c.fill()
		if c.i == len(c.buf) {
			return ovItem{}, false
		}
	}
	return c.buf[c.i], true
}

// next moves past the current item.
func (c *ovCursor) next() { c.i++ }

func (c *ovCursor) fill() {
	limit := ovChunk
	if !c.started {
		limit = ovFirstChunk
		c.buf = make([]ovItem, 0, limit)
	}
	c.buf, c.i = c.buf[:0], 0
	full := false
	visit := func(it ovItem) bool {
		if c.started && bytes.Equal(it.key, c.last) {
			return true // where the previous chunk ended
		}
		if !inRange(it.key, c.from, c.to) {
			// Forward, the walk starts at from: out of range is past
			// to. Backwards it starts at to, which is itself excluded.
			if c.reverse && c.to != nil && bytes.Equal(it.key, c.to) {
				return true
			}
			c.end = true
			return false
		}
		c.buf = append(c.buf, it)
		if len(c.buf) == limit {
			full = true
			return false
		}
		return true
	}
	switch {
	case c.started && !c.reverse:
		c.t.AscendGreaterOrEqual(ovItem{key: c.last}, visit)
	case c.started:
		c.t.DescendLessOrEqual(ovItem{key: c.last}, visit)
	case !c.reverse && c.from == nil:
		c.t.Ascend(visit)
	case !c.reverse:
		c.t.AscendGreaterOrEqual(ovItem{key: c.from}, visit)
	case c.to == nil:
		c.t.Descend(visit)
	default:
		c.t.DescendLessOrEqual(ovItem{key: c.to}, visit)
	}
	c.started = true
	if !full {
		c.end = true
	}
	if len(c.buf) > 0 {
		c.last = c.buf[len(c.buf)-1].key
	}
}
