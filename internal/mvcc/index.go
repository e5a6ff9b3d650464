package mvcc

import (
	"bytes"
	"unsafe"

	"github.com/google/btree"
)

// generation is one life of a key: from its creation to its deletion. The
// last revision of an ended generation is the tombstone.
type generation struct {
	ver     int64 // puts in this life so far (not reduced by compaction)
	created Revision
	revs    []Revision
}

func (g *generation) empty() bool { return len(g.revs) == 0 }

// keyIndex is every revision of one key the index still holds.
type keyIndex struct {
	key   []byte
	gens  []generation // never empty; the last one is the open life (possibly empty)
	lease int64        // lease of the newest revision (0 if none or deleted)
}

func (ki *keyIndex) put(rev Revision) {
	g := &ki.gens[len(ki.gens)-1]
	if g.empty() {
		g.created = rev
	}
	g.revs = append(g.revs, rev)
	g.ver++
}

// tombstone ends the open life at rev. The key must be alive.
func (ki *keyIndex) tombstone(rev Revision) {
	ki.put(rev)
	ki.gens = append(ki.gens, generation{})
}

// lookup finds the key's state at atRev: its last modification, creation and
// version there. ok is false if the key did not exist at atRev.
func (ki *keyIndex) lookup(atRev int64) (mod, created Revision, ver int64, ok bool) {
	for i := len(ki.gens) - 1; i >= 0; i-- {
		g := &ki.gens[i]
		if g.empty() {
			continue
		}
		if g.revs[0].Main > atRev {
			continue // born after atRev
		}
		if i < len(ki.gens)-1 && g.revs[len(g.revs)-1].Main <= atRev {
			return mod, created, 0, false // deleted at or before atRev
		}
		for j := len(g.revs) - 1; j >= 0; j-- {
			if g.revs[j].Main <= atRev {
				return g.revs[j], g.created, g.ver - int64(len(g.revs)-1-j), true
			}
		}
	}
	return mod, created, 0, false
}

// doCompact finds what compaction at atRev keeps of ki: the first
// generation whose tombstone is at or after atRev (or the open one), and in
// it the newest revision at or below atRev, which it adds to keep. ri is -1
// if that generation has no revision at or below atRev.
//
// A tombstone exactly at atRev is kept, as etcd does since 3.5.16: a watch
// from the compaction revision still sees the delete.
func (ki *keyIndex) doCompact(atRev int64, keep map[Revision]struct{}) (gi, ri int) {
	for gi < len(ki.gens)-1 {
		g := &ki.gens[gi]
		if g.revs[len(g.revs)-1].Main >= atRev {
			break
		}
		gi++
	}
	g := &ki.gens[gi]
	ri = -1
	for j := len(g.revs) - 1; j >= 0; j-- {
		if g.revs[j].Main <= atRev {
			keep[g.revs[j]] = struct{}{}
			ri = j
			break
		}
	}
	return gi, ri
}

// compact drops what no read at or after atRev can need and records in keep
// the revisions at or below atRev that must stay.
func (ki *keyIndex) compact(atRev int64, keep map[Revision]struct{}) {
	gi, ri := ki.doCompact(atRev, keep)
	if g := &ki.gens[gi]; ri > 0 {
		g.revs = append([]Revision(nil), g.revs[ri:]...)
	}
	ki.gens = ki.gens[gi:]
}

// keepOnly records, without changing anything, the revisions that HashKV
// at atRev counts below the compaction line. Unlike compact it leaves out a
// tombstone at exactly atRev, as etcd's keep does, so that hashes agree
// with etcd versions that dropped such tombstones.
func (ki *keyIndex) keepOnly(atRev int64, keep map[Revision]struct{}) {
	gi, ri := ki.doCompact(atRev, keep)
	if g := &ki.gens[gi]; ri >= 0 && ri == len(g.revs)-1 && gi != len(ki.gens)-1 {
		delete(keep, g.revs[ri])
	}
}

func (ki *keyIndex) isEmpty() bool { return len(ki.gens) == 1 && ki.gens[0].empty() }

// index maps keys to their keyIndex. Not safe for concurrent use by itself;
// Store.mu guards it.
//
// The tree orders the keys for ranges; byKey finds one key without the
// tree's walk (every Put looks its key up, and a btree lookup compares the
// key with a dozen others, each behind two pointers: about a sixteenth of a
// node's CPU under 64 writers). Invariant: both hold exactly the same
// keyIndexes, added in create and dropped in compact. byKey's keys share
// the bytes of keyIndex.key (unsafe.String), which create copies and
// nothing ever changes.
type index struct {
	tree  *btree.BTreeG[*keyIndex]
	byKey map[string]*keyIndex
}

func newIndex() *index {
	return &index{
		tree:  btree.NewG(32, func(a, b *keyIndex) bool { return bytes.Compare(a.key, b.key) < 0 }),
		byKey: make(map[string]*keyIndex),
	}
}

func (x *index) get(key []byte) *keyIndex {
	return x.byKey[string(key)] // the conversion in a map index does not allocate
}

func (x *index) getOrCreate(key []byte) *keyIndex {
	if ki := x.get(key); ki != nil {
		return ki
	}
	return x.create(key)
}

// create adds a keyIndex for key, which the index must not hold.
func (x *index) create(key []byte) *keyIndex {
	ki := &keyIndex{key: append([]byte(nil), key...), gens: []generation{{}}}
	x.tree.ReplaceOrInsert(ki)
	x.byKey[unsafe.String(unsafe.SliceData(ki.key), len(ki.key))] = ki
	return ki
}

// ascend calls fn for every keyIndex in [key, end) in key order. end == nil
// means the single key; end == "\x00" means every key from key on.
func (x *index) ascend(key, end []byte, fn func(ki *keyIndex) bool) {
	if len(end) == 0 {
		if ki := x.get(key); ki != nil {
			fn(ki)
		}
		return
	}
	all := len(end) == 1 && end[0] == 0
	x.tree.AscendGreaterOrEqual(&keyIndex{key: key}, func(ki *keyIndex) bool {
		if !all && bytes.Compare(ki.key, end) >= 0 {
			return false
		}
		return fn(ki)
	})
}

func (x *index) compact(atRev int64) map[Revision]struct{} {
	keep := make(map[Revision]struct{})
	var drop []*keyIndex
	x.tree.Ascend(func(ki *keyIndex) bool {
		ki.compact(atRev, keep)
		if ki.isEmpty() {
			drop = append(drop, ki)
		}
		return true
	})
	for _, ki := range drop {
		x.tree.Delete(ki)
		delete(x.byKey, string(ki.key))
	}
	return keep
}

func (x *index) keep(atRev int64) map[Revision]struct{} {
	keep := make(map[Revision]struct{})
	x.tree.Ascend(func(ki *keyIndex) bool {
		ki.keepOnly(atRev, keep)
		return true
	})
	return keep
}
