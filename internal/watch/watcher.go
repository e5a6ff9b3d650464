package watch

import (
	"bytes"
	"slices"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

type state int

const (
	stateCreating state = iota
	stateSynced
	stateUnsynced
	stateCompacted
	stateGone // canceled or its stream closed
)

// watcher is one watch of one stream. key, end, startRev and the options are
// fixed at creation; the rest is guarded by Hub.mu.
type watcher struct {
	s  *Stream
	id int64

	key []byte
	// end: nil watches key alone; empty (non-nil) watches every key >= key;
	// otherwise [key, end).
	end      []byte
	startRev int64

	prevKV, fragment, progressNotify bool
	noPut, noDelete                  bool

	state state
	// next is the lowest revision the watcher still accepts: for an unsynced
	// watcher the first revision it is owed, for a synced one a lower bound
	// (it matters for a future start revision).
	next int64
	// sentEvents: events were queued since the last progress tick (etcd
	// skips one periodic progress notification then).
	sentEvents bool
	// pending is deliverLocked's scratch: the indexes of the events it is
	// collecting for this watcher. Empty between calls; its capacity is
	// kept so that delivery does not allocate it for every write.
	pending []int
}

func (w *watcher) contains(key []byte) bool {
	switch {
	case w.end == nil:
		return bytes.Equal(key, w.key)
	case len(w.end) == 0:
		return bytes.Compare(key, w.key) >= 0
	default:
		return bytes.Compare(key, w.key) >= 0 && bytes.Compare(key, w.end) < 0
	}
}

// wants reports whether ev passes the watcher's range and filters.
func (w *watcher) wants(ev *mvccpb.Event) bool {
	if ev.Type == mvccpb.PUT && w.noPut || ev.Type == mvccpb.DELETE && w.noDelete {
		return false
	}
	return w.contains(ev.Kv.Key)
}

// index finds the synced watchers whose range holds a key. Single-key
// watchers are found by key. Range watchers are grouped by their exact
// range (the apiserver opens one watch per resource prefix, kubelets many
// on the same few prefixes), and the groups are kept sorted by start key
// with the greatest end of every prefix of that order beside them, so a
// lookup binary-searches the last group starting at or before the key and
// walks back only while an earlier group can still reach it: for disjoint
// ranges (prefixes of distinct resources or namespaces) that is the one
// group holding the key. The Notify of every write pays this lookup once
// per event while holding Hub.mu, on the writer's path: a scan of every
// range watcher there made a write under 1,000 watchers several times
// dearer.
//
// The sorted view is rebuilt lazily, on the first lookup after a group was
// created or emptied; moving a watcher in or out of a group that stays
// non-empty costs a map operation.
type index struct {
	single map[string]map[*watcher]struct{}
	groups map[rangeKey]*rangeGroup
	// sorted holds every group ordered by (key, end), unbounded ends
	// last; maxEnd[i] is the greatest end in sorted[:i+1]. Valid while
	// !dirty.
	sorted []*rangeGroup
	maxEnd [][]byte
	dirty  bool
	n      int
}

// rangeKey names a range: end "" is unbounded (a watched range is never
// empty, so no bounded range has an empty end).
type rangeKey struct{ key, end string }

type rangeGroup struct {
	key, end []byte // end empty: unbounded
	ws       map[*watcher]struct{}
}

// endAfter reports whether a range ending at end (empty: unbounded) still
// holds key, given that it starts at or before key.
func endAfter(end, key []byte) bool {
	return len(end) == 0 || bytes.Compare(key, end) < 0
}

// endLess orders range ends, unbounded last.
func endLess(a, b []byte) bool {
	switch {
	case len(b) == 0:
		return len(a) != 0
	case len(a) == 0:
		return false
	default:
		return bytes.Compare(a, b) < 0
	}
}

func newIndex() index {
	return index{single: make(map[string]map[*watcher]struct{}), groups: make(map[rangeKey]*rangeGroup)}
}

func (x *index) add(w *watcher) {
	x.n++
	if w.end != nil {
		k := rangeKey{string(w.key), string(w.end)}
		g := x.groups[k]
		if g == nil {
			g = &rangeGroup{key: w.key, end: w.end, ws: make(map[*watcher]struct{})}
			x.groups[k] = g
			x.dirty = true
		}
		g.ws[w] = struct{}{}
		return
	}
	set := x.single[string(w.key)]
	if set == nil {
		set = make(map[*watcher]struct{})
		x.single[string(w.key)] = set
	}
	set[w] = struct{}{}
}

func (x *index) remove(w *watcher) {
	if w.end != nil {
		k := rangeKey{string(w.key), string(w.end)}
		g := x.groups[k]
		if _, ok := g.ws[w]; ok {
			delete(g.ws, w)
			x.n--
			if len(g.ws) == 0 {
				delete(x.groups, k)
				x.dirty = true
			}
		}
		return
	}
	set := x.single[string(w.key)]
	if _, ok := set[w]; ok {
		delete(set, w)
		x.n--
		if len(set) == 0 {
			delete(x.single, string(w.key))
		}
	}
}

func (x *index) rebuild() {
	x.sorted = x.sorted[:0]
	for _, g := range x.groups {
		x.sorted = append(x.sorted, g)
	}
	slices.SortFunc(x.sorted, func(a, b *rangeGroup) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		switch {
		case endLess(a.end, b.end):
			return -1
		case endLess(b.end, a.end):
			return 1
		}
		return 0
	})
	x.maxEnd = x.maxEnd[:0]
	var m []byte
	for i, g := range x.sorted {
		if i == 0 || endLess(m, g.end) {
			m = g.end
		}
		x.maxEnd = append(x.maxEnd, m)
	}
	x.dirty = false
}

// each calls fn for every watcher whose range holds key. fn must not add
// to or remove from x.
func (x *index) each(key []byte, fn func(w *watcher)) {
	for w := range x.single[string(key)] {
		fn(w)
	}
	if len(x.groups) == 0 {
		return
	}
	if x.dirty {
		x.rebuild()
	}
	// The groups starting at or before key are sorted[:i+1]; walk back
	// while one of them may still end after key.
	i := sort.Search(len(x.sorted), func(i int) bool { return bytes.Compare(x.sorted[i].key, key) > 0 }) - 1
	for ; i >= 0 && endAfter(x.maxEnd[i], key); i-- {
		g := x.sorted[i]
		if !endAfter(g.end, key) {
			continue
		}
		for w := range g.ws {
			fn(w)
		}
	}
}

// all calls fn for every watcher in x. fn must not add to or remove from x.
func (x *index) all(fn func(w *watcher)) {
	for _, ws := range x.single {
		for w := range ws {
			fn(w)
		}
	}
	for _, g := range x.groups {
		for w := range g.ws {
			fn(w)
		}
	}
}

func header(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

// newResponse returns a response whose Header carries rev, the two in one
// allocation: the hub builds one per receiving watcher on every write. The
// header is the response's own (the transport fills the rest of it in
// place), never shared.
func newResponse(rev int64) *pb.WatchResponse {
	b := &struct {
		r pb.WatchResponse
		h pb.ResponseHeader
	}{h: pb.ResponseHeader{Revision: rev}}
	b.r.Header = &b.h
	return &b.r
}
