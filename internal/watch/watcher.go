package watch

import (
	"bytes"

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

// index finds the synced watchers whose range holds a key: single-key
// watchers by key, ranges by a scan (a handful of prefix watchers is the
// common case: kube-apiserver watches one prefix per resource).
type index struct {
	single map[string]map[*watcher]struct{}
	ranges map[*watcher]struct{}
	n      int
}

func newIndex() index {
	return index{single: make(map[string]map[*watcher]struct{}), ranges: make(map[*watcher]struct{})}
}

func (x *index) add(w *watcher) {
	x.n++
	if w.end != nil {
		x.ranges[w] = struct{}{}
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
		if _, ok := x.ranges[w]; ok {
			delete(x.ranges, w)
			x.n--
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

// each calls fn for every watcher whose range holds key.
func (x *index) each(key []byte, fn func(w *watcher)) {
	for w := range x.single[string(key)] {
		fn(w)
	}
	for w := range x.ranges {
		if w.contains(key) {
			fn(w)
		}
	}
}

func header(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }
