package watch

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/mvcc"
)

// fakeSource is an in-memory Source following mvcc.Store's contract.
type fakeSource struct {
	mu        sync.Mutex
	log       []mvccpb.Event // every event, in revision order (no PrevKv)
	readable  int64
	compacted int64
	// etcdCompaction makes History accept from == compacted, as etcd and
	// mvcc.Store do; without it the fake refuses it, which checks that the
	// hub copes with a source that does.
	etcdCompaction bool
	histories      int
}

func (f *fakeSource) History(from, to int64, limit int) ([]mvccpb.Event, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.histories++
	if to > f.readable {
		to = f.readable
	}
	if from < f.compacted || from == f.compacted && !f.etcdCompaction {
		return nil, 0, mvcc.ErrCompacted
	}
	var out []mvccpb.Event
	last, revs := int64(0), 0
	for _, ev := range f.log {
		r := ev.Kv.ModRevision
		if r < from || r > to {
			continue
		}
		if r != last {
			if limit > 0 && revs >= limit {
				break
			}
			revs++
			last = r
		}
		out = append(out, ev)
	}
	if last == 0 {
		last = max(to, from-1)
	}
	return out, last, nil
}

func (f *fakeSource) Range(key, end []byte, ro mvcc.RangeOptions) (mvcc.RangeResult, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ro.Rev < f.compacted {
		return mvcc.RangeResult{}, f.readable, mvcc.ErrCompacted
	}
	var cur *mvccpb.KeyValue
	for _, ev := range f.log {
		if ev.Kv.ModRevision > ro.Rev {
			break
		}
		if bytes.Equal(ev.Kv.Key, key) {
			if ev.Type == mvccpb.PUT {
				cur = ev.Kv
			} else {
				cur = nil
			}
		}
	}
	if cur == nil {
		return mvcc.RangeResult{}, f.readable, nil
	}
	return mvcc.RangeResult{KVs: []mvccpb.KeyValue{*cur}, Count: 1}, f.readable, nil
}

func (f *fakeSource) Revs() (int64, int64, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readable, f.readable, f.compacted
}

func (f *fakeSource) compact(rev int64) {
	f.mu.Lock()
	f.compacted = rev
	f.mu.Unlock()
}

// op is one change of a test transaction.
type op struct {
	key, val string
	del      bool
}

func put(k, v string) op { return op{key: k, val: v} }
func del(k string) op    { return op{key: k, del: true} }

// world is a single writer over a fakeSource and a hub, keeping the full
// event log (with PrevKv) as the reference.
type world struct {
	t    *testing.T
	src  *fakeSource
	hub  *Hub
	rev  int64
	live map[string]*mvccpb.KeyValue
	all  []mvccpb.Event // reference log with PrevKv
}

func newWorld(t *testing.T, opts Options) *world {
	t.Helper()
	src := &fakeSource{}
	w := &world{t: t, src: src, live: make(map[string]*mvccpb.KeyValue)}
	w.hub = NewHub(src, opts)
	return w
}

// run starts the hub's background work for the test's lifetime.
func (w *world) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.hub.Run(ctx); close(done) }()
	w.t.Cleanup(func() { cancel(); <-done })
}

// txn applies one transaction as one revision; its events are returned
// (not yet notified).
func (w *world) txn(ops ...op) []mvccpb.Event {
	w.rev++
	var evs []mvccpb.Event
	for _, o := range ops {
		prev := w.live[o.key]
		var ev mvccpb.Event
		if o.del {
			if prev == nil {
				continue
			}
			ev = mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(o.key), ModRevision: w.rev}, PrevKv: prev}
			delete(w.live, o.key)
		} else {
			kv := &mvccpb.KeyValue{Key: []byte(o.key), Value: []byte(o.val), CreateRevision: w.rev, ModRevision: w.rev, Version: 1}
			if prev != nil {
				kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
			}
			ev = mvccpb.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev}
			w.live[o.key] = kv
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		w.t.Fatalf("txn without changes")
	}
	w.all = append(w.all, evs...)
	w.src.mu.Lock()
	for _, ev := range evs {
		e := ev
		e.PrevKv = nil
		w.src.log = append(w.src.log, e)
	}
	w.src.readable = w.rev
	w.src.mu.Unlock()
	return evs
}

// commit applies transactions as one durable batch and notifies the hub.
func (w *world) commit(txns ...[]op) {
	var evs []mvccpb.Event
	for _, ops := range txns {
		evs = append(evs, w.txn(ops...)...)
	}
	w.hub.Notify(w.rev, evs)
}

// write commits one transaction.
func (w *world) write(ops ...op) { w.commit(ops) }

// expected returns what a watcher created by req at notified revision base
// must receive, with PrevKv as etcd sends it.
func (w *world) expected(req *pb.WatchCreateRequest, base int64) []mvccpb.Event {
	ww := &watcher{key: req.Key, end: req.RangeEnd, prevKV: req.PrevKv}
	if len(ww.key) == 0 {
		ww.key = []byte{0}
	}
	if len(ww.end) == 0 {
		ww.end = nil
	} else if len(ww.end) == 1 && ww.end[0] == 0 {
		ww.end = []byte{}
	}
	for _, f := range req.Filters {
		ww.noPut = ww.noPut || f == pb.WatchCreateRequest_NOPUT
		ww.noDelete = ww.noDelete || f == pb.WatchCreateRequest_NODELETE
	}
	start := req.StartRevision
	if start == 0 {
		start = base + 1
	}
	var out []mvccpb.Event
	for _, ev := range w.all {
		if ev.Kv.ModRevision < start || !ww.wants(&ev) {
			continue
		}
		if !req.PrevKv {
			ev.PrevKv = nil
		}
		out = append(out, ev)
	}
	return out
}

// collector reads a stream's responses on its own goroutine.
type collector struct {
	mu    sync.Mutex
	resps []*pb.WatchResponse
	pause chan struct{} // while non-nil and open, reading waits
}

func collect(t *testing.T, s *Stream) *collector {
	c := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case r := <-s.Responses():
				c.mu.Lock()
				c.resps = append(c.resps, r)
				c.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func (c *collector) snapshot() []*pb.WatchResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*pb.WatchResponse(nil), c.resps...)
}

// waitFor polls until cond holds on the responses so far.
func (c *collector) waitFor(t *testing.T, what string, cond func([]*pb.WatchResponse) bool) []*pb.WatchResponse {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs := c.snapshot()
		if cond(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; got %s", what, dump(rs))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// settle asks s for a progress response and waits for it. The hub answers
// only once every watcher of s is synced and past its start revision, with
// every event up to its notified revision already queued on s ahead of the
// answer, so when it returns nothing notified so far can still arrive.
func (c *collector) settle(t *testing.T, s *Stream) []*pb.WatchResponse {
	t.Helper()
	n := len(c.snapshot())
	s.RequestProgress()
	return c.waitFor(t, "a progress response", func(rs []*pb.WatchResponse) bool {
		for _, r := range rs[n:] {
			if r.WatchId == InvalidWatchID && !r.Created && !r.Canceled && len(r.Events) == 0 {
				return true
			}
		}
		return false
	})
}

// syncBarrier returns once Run has completed a sync round that started
// after the call: it opens, on a stream of its own, a watcher of key that
// must be caught up from history (start revision = the notified one, whose
// write must have touched key) and waits for its events. A round serves
// every unsynced watcher whose stream has room, up to MaxWatchersPerSync, so
// whatever such a watcher could be sent by Run is queued by then.
func (w *world) syncBarrier(t *testing.T, key string) {
	t.Helper()
	s := w.hub.NewStream(16)
	defer s.Close()
	id, err := s.Watch(&pb.WatchCreateRequest{Key: []byte(key), StartRevision: w.hub.Rev()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-s.Responses():
			if r.WatchId == id && (len(r.Events) > 0 || r.Canceled) {
				return
			}
		case <-deadline:
			t.Fatal("no sync round within 10s")
		}
	}
}

// drain reads everything queued on s right now without blocking.
func drain(s *Stream) []*pb.WatchResponse {
	var out []*pb.WatchResponse
	for {
		select {
		case r := <-s.Responses():
			out = append(out, r)
		default:
			return out
		}
	}
}

func dump(rs []*pb.WatchResponse) string {
	var b bytes.Buffer
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  id=%d rev=%d created=%v canceled=%v compact=%d reason=%q evs=[", r.WatchId, r.Header.GetRevision(), r.Created, r.Canceled, r.CompactRevision, r.CancelReason)
		for _, e := range r.Events {
			fmt.Fprintf(&b, " %s:%s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision)
		}
		b.WriteString(" ]")
	}
	return b.String()
}

// eventsOf returns the events sent to id, checking on the way the
// per-watcher invariants: Created first, revisions strictly increasing
// across responses (so none repeats and none is split), header revision at
// least the last event's, nothing after a cancel.
func eventsOf(t *testing.T, rs []*pb.WatchResponse, id int64) []mvccpb.Event {
	t.Helper()
	var out []mvccpb.Event
	created, ended := false, false
	lastRev := int64(0)
	for _, r := range rs {
		if r.WatchId != id {
			continue
		}
		if ended {
			t.Fatalf("watch %d: response after cancel: %s", id, dump([]*pb.WatchResponse{r}))
		}
		if r.Created {
			if created {
				t.Fatalf("watch %d: created twice", id)
			}
			created = true
			continue
		}
		if !created {
			t.Fatalf("watch %d: response before Created: %s", id, dump(rs))
		}
		if r.Canceled {
			ended = true
			continue
		}
		if len(r.Events) == 0 {
			continue // progress
		}
		first := r.Events[0].Kv.ModRevision
		if first <= lastRev {
			t.Fatalf("watch %d: revision %d after %d (duplicate, reordered or split revision): %s", id, first, lastRev, dump(rs))
		}
		for _, e := range r.Events {
			if e.Kv.ModRevision < lastRev {
				t.Fatalf("watch %d: events out of order", id)
			}
			lastRev = e.Kv.ModRevision
			out = append(out, *e)
		}
		if r.Header.Revision < lastRev {
			t.Fatalf("watch %d: header revision %d below event revision %d", id, r.Header.Revision, lastRev)
		}
	}
	return out
}

func sameEvents(t *testing.T, what string, got, want []mvccpb.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d\n got: %v\nwant: %v", what, len(got), len(want), evStr(got), evStr(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Type != w.Type || !kvEqual(g.Kv, w.Kv) || !kvEqual(g.PrevKv, w.PrevKv) {
			t.Fatalf("%s: event %d: got %v (prev %v), want %v (prev %v)", what, i, g, g.PrevKv, w, w.PrevKv)
		}
	}
}

func evStr(evs []mvccpb.Event) string {
	var b bytes.Buffer
	for _, e := range evs {
		fmt.Fprintf(&b, " %s:%s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision)
		if e.PrevKv != nil {
			fmt.Fprintf(&b, "(prev %s)", e.PrevKv.Value)
		}
	}
	return b.String()
}

func kvEqual(a, b *mvccpb.KeyValue) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) && a.CreateRevision == b.CreateRevision &&
		a.ModRevision == b.ModRevision && a.Version == b.Version && a.Lease == b.Lease
}
