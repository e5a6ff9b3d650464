package watch

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

var fastOpts = Options{SyncInterval: 2 * time.Millisecond, ProgressInterval: time.Hour}

// TestWatchSemantics creates watchers of every kind after some history,
// writes more (some revisions batched into one Notify), and checks each
// gets exactly etcd's events.
func TestWatchSemantics(t *testing.T) {
	noPut := []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
	noDel := []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}
	cases := []struct {
		name string
		req  *pb.WatchCreateRequest
	}{
		{"key/now", &pb.WatchCreateRequest{Key: []byte("a")}},
		{"key/history", &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 1}},
		{"key/prevkv/history", &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 1, PrevKv: true}},
		{"key/prevkv/now", &pb.WatchCreateRequest{Key: []byte("a"), PrevKv: true}},
		{"range", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("b"), StartRevision: 2}},
		{"prefix/prevkv", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("b"), StartRevision: 1, PrevKv: true}},
		{"fromkey", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte{0}, StartRevision: 1}},
		{"all", &pb.WatchCreateRequest{Key: []byte{}, RangeEnd: []byte{0}, StartRevision: 1}},
		{"all/now", &pb.WatchCreateRequest{RangeEnd: []byte{0}}},
		{"noput", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("z"), StartRevision: 1, Filters: noPut}},
		{"nodelete", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("z"), StartRevision: 1, Filters: noDel}},
		{"nodelete/prevkv/now", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("z"), Filters: noDel, PrevKv: true}},
		{"future", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("z"), StartRevision: 7}},
		{"current", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("z"), StartRevision: 4}},
		{"next", &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("z"), StartRevision: 5}},
		{"nothing", &pb.WatchCreateRequest{Key: []byte("q")}},
	}
	w := newWorld(t, fastOpts)
	w.run()
	w.write(put("a", "1"))
	w.write(put("b", "1"))
	w.write(put("a", "2"), put("c", "1"))
	w.write(del("a"), put("ab", "1"))

	s := w.hub.NewStream(128)
	c := collect(t, s)
	base := w.hub.Rev()
	ids := make([]int64, len(cases))
	for i, tc := range cases {
		id, err := s.Watch(tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ids[i] = id
	}
	w.write(put("a", "3"))
	w.commit([]op{put("b", "2"), put("ab", "2")}, []op{del("ab")}, []op{put("a", "4")})
	w.write(put("zz", "1"), del("a"))

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := w.expected(tc.req, base)
			c.waitFor(t, "events", func(rs []*pb.WatchResponse) bool {
				n := 0
				for _, r := range rs {
					if r.WatchId == ids[i] {
						n += len(r.Events)
					}
				}
				return n >= len(want)
			})
			rs := c.settle(t, s) // nothing more may come
			sameEvents(t, tc.name, eventsOf(t, rs, ids[i]), want)
			for _, r := range rs {
				if r.WatchId == ids[i] && r.Created && r.Header.Revision != base {
					t.Fatalf("created header revision %d, want %d", r.Header.Revision, base)
				}
			}
		})
	}
}

// TestSlowConsumer drives a writer that never waits against streams whose
// buffers are tiny, first without reading at all, then reading slowly while
// writing, and checks every watcher gets every event once, in order, with
// no revision split.
func TestSlowConsumer(t *testing.T) {
	opts := fastOpts
	opts.HistoryBatch = 7
	w := newWorld(t, opts)
	w.run()
	rnd := rand.New(rand.NewSource(1))
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "x"}
	randomTxn := func() []op {
		n := 1 + rnd.Intn(3)
		seen := map[string]bool{}
		var ops []op
		for len(ops) < n {
			k := keys[rnd.Intn(len(keys))]
			if seen[k] {
				continue
			}
			seen[k] = true
			if w.live[k] != nil && rnd.Intn(4) == 0 {
				ops = append(ops, del(k))
			} else {
				ops = append(ops, put(k, fmt.Sprint(rnd.Int())))
			}
		}
		return ops
	}
	// Some history first.
	for range 20 {
		w.write(randomTxn()...)
	}
	reqs := []*pb.WatchCreateRequest{
		{Key: []byte("k"), RangeEnd: []byte("l")},
		{Key: []byte("k"), RangeEnd: []byte("l"), PrevKv: true, StartRevision: 3},
		{Key: []byte("k3")},
		{Key: []byte("k"), RangeEnd: []byte{0}, StartRevision: 1, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}},
		{Key: []byte("x"), StartRevision: 500},
	}
	type sub struct {
		s    *Stream
		req  *pb.WatchCreateRequest
		id   int64
		base int64
	}
	var subs []sub
	for _, req := range reqs {
		s := w.hub.NewStream(2)
		t.Cleanup(s.Close)
		base := w.hub.Rev()
		// The buffer holds the Created response, so Watch returns.
		id, err := s.Watch(req)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub{s, req, id, base})
	}

	// Phase 1: nobody reads. The writer must not block.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 300 {
			var evs []mvccpb.Event
			for range 1 + rnd.Intn(3) {
				evs = append(evs, w.txn(randomTxn()...)...)
			}
			w.hub.Notify(w.rev, evs)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("writer blocked on consumers that do not read")
	}

	// Phase 2: read slowly while writing more.
	got := make([][]*pb.WatchResponse, len(subs))
	stop := make(chan struct{})
	readers := make(chan struct{}, len(subs))
	for i := range subs {
		go func(i int) {
			defer func() { readers <- struct{}{} }()
			for n := 0; ; n++ {
				select {
				case r := <-subs[i].s.Responses():
					got[i] = append(got[i], r)
					if n%3 == 0 {
						time.Sleep(300 * time.Microsecond)
					}
				case <-stop:
					return
				}
			}
		}(i)
	}
	waitSynced := func() {
		deadline := time.Now().Add(20 * time.Second)
		for {
			w.hub.mu.Lock()
			n := len(w.hub.unsynced)
			w.hub.mu.Unlock()
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d watchers never caught up", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitSynced()
	w.hub.mu.Lock()
	phase1 := w.hub.unsyncs
	w.hub.mu.Unlock()
	for range 600 {
		w.commit(randomTxn())
		if rnd.Intn(4) == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitSynced() // every event is queued; the readers' leftovers are drained below
	close(stop)
	for range subs {
		<-readers
	}
	for i := range subs {
		got[i] = append(got[i], drain(subs[i].s)...)
		sameEvents(t, fmt.Sprintf("watcher %d", i), eventsOf(t, got[i], subs[i].id), w.expected(subs[i].req, subs[i].base))
	}
	w.hub.mu.Lock()
	unsyncs := w.hub.unsyncs
	w.hub.mu.Unlock()
	if phase1 == 0 || unsyncs == phase1 {
		t.Fatalf("synced->unsynced moves: %d while not reading, %d while reading slowly: catch-up not exercised", phase1, unsyncs-phase1)
	}
	t.Logf("synced->unsynced moves: %d while not reading, %d while reading slowly; history reads: %d", phase1, unsyncs-phase1, w.src.histories)
}

func TestCompaction(t *testing.T) {
	cases := []struct {
		name          string
		etcdHistory   bool // source accepts from == compaction point
		start         int64
		wantCompacted bool
	}{
		{"below", false, 2, true},
		{"below/etcd", true, 2, true},
		{"at/refusing", false, 3, true}, // a source refusing History(from == compacted)
		{"at/etcd", true, 3, false},     // etcd replays from the compaction point
		{"after", false, 4, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, fastOpts)
			w.src.etcdCompaction = tc.etcdHistory
			w.run()
			for i := range 5 {
				w.write(put(fmt.Sprint("k", i), "v"))
			}
			w.src.compact(3)
			s := w.hub.NewStream(16)
			c := collect(t, s)
			req := &pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: tc.start, WatchId: 7}
			id, err := s.Watch(req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantCompacted {
				rs := c.waitFor(t, "compacted", func(rs []*pb.WatchResponse) bool { return len(rs) >= 2 })
				r := rs[1]
				if !rs[0].Created || r.WatchId != id || !r.Canceled || r.CompactRevision != 3 || len(r.Events) != 0 || r.Header.Revision != 0 {
					t.Fatalf("want Created then compacted cancel: %s", dump(rs))
				}
				// The ID stays taken until the client cancels it.
				if _, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("a"), WatchId: id}); !errors.Is(err, ErrWatcherDuplicateID) {
					t.Fatalf("id of compacted watcher reused: %v", err)
				}
				if err := s.Cancel(id); err != nil {
					t.Fatal(err)
				}
				return
			}
			var want []mvccpb.Event
			for _, ev := range w.all {
				if ev.Kv.ModRevision >= tc.start {
					e := ev
					e.PrevKv = nil
					want = append(want, e)
				}
			}
			rs := c.settle(t, s) // all of the history, and nothing more
			sameEvents(t, tc.name, eventsOf(t, rs, id), want)
		})
	}
}

// TestUnsyncedFallsBehindCompaction: a watcher whose consumer stalls is
// owed history that then gets compacted; it must get the compacted cancel
// and nothing else after it.
func TestUnsyncedFallsBehindCompaction(t *testing.T) {
	w := newWorld(t, fastOpts)
	w.run()
	s := w.hub.NewStream(2)
	id, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		w.write(put(fmt.Sprint("k", i), "v"))
	}
	w.src.compact(8)
	var rs []*pb.WatchResponse
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-s.Responses():
			rs = append(rs, r)
		case <-deadline:
			t.Fatalf("no compacted response: %s", dump(rs))
		}
		if r := rs[len(rs)-1]; r.CompactRevision != 0 {
			if r.WatchId != id || !r.Canceled || r.CompactRevision != 8 {
				t.Fatalf("bad compacted response: %s", dump(rs))
			}
			break
		}
	}
	evs := eventsOf(t, rs, id)
	for i, ev := range evs {
		if ev.Kv.ModRevision != int64(i+1) {
			t.Fatalf("gap before compaction: %s", evStr(evs))
		}
	}
	w.write(put("k1", "again"))
	w.syncBarrier(t, "k1") // Notify and a sync round are past
	if more := drain(s); len(more) != 0 {
		t.Fatalf("responses after compacted cancel: %s", dump(more))
	}
	// A compacted watcher blocks progress until canceled, as in etcd.
	s.RequestProgress()
	if more := drain(s); len(more) != 0 {
		t.Fatalf("progress answered with a compacted watcher: %s", dump(more))
	}
	if err := s.Cancel(id); err != nil {
		t.Fatal(err)
	}
	rs = drain(s)
	if len(rs) != 1 || !rs[0].Canceled || rs[0].WatchId != id {
		t.Fatalf("want the cancel response only (empty stream: no progress): %s", dump(rs))
	}
}

func TestIDs(t *testing.T) {
	type step struct {
		cancel  bool
		id      int64 // requested (create) or canceled
		wantID  int64
		wantErr error
	}
	steps := []step{
		{id: 0, wantID: 0},
		{id: 2, wantID: 2},
		{id: 0, wantID: 1},
		{id: 0, wantID: 3}, // skips 2
		{id: 2, wantID: -1, wantErr: ErrWatcherDuplicateID},
		{cancel: true, id: 2},
		{id: 2, wantID: 2},
		{cancel: true, id: 9, wantErr: ErrWatcherNotExist},
		{cancel: true, id: 0},
		{id: 0, wantID: 4}, // counts on from the last pick, as etcd does
		{id: 100, wantID: 100},
	}
	w := newWorld(t, fastOpts)
	w.write(put("a", "1"))
	s := w.hub.NewStream(64)
	for i, st := range steps {
		if st.cancel {
			err := s.Cancel(st.id)
			if !errors.Is(err, st.wantErr) {
				t.Fatalf("step %d: cancel %d: err %v, want %v", i, st.id, err, st.wantErr)
			}
			rs := drain(s)
			if st.wantErr != nil && len(rs) != 0 {
				t.Fatalf("step %d: failed cancel answered: %s", i, dump(rs))
			}
			if st.wantErr == nil && (len(rs) != 1 || !rs[0].Canceled || rs[0].WatchId != st.id || rs[0].Created) {
				t.Fatalf("step %d: cancel response: %s", i, dump(rs))
			}
			continue
		}
		id, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("a"), WatchId: st.id})
		if id != st.wantID || !errors.Is(err, st.wantErr) {
			t.Fatalf("step %d: watch id %d: got (%d, %v), want (%d, %v)", i, st.id, id, err, st.wantID, st.wantErr)
		}
		rs := drain(s)
		if len(rs) != 1 || !rs[0].Created || rs[0].WatchId != st.wantID || rs[0].Header.Revision != 1 {
			t.Fatalf("step %d: created response: %s", i, dump(rs))
		}
		if st.wantErr != nil && (!rs[0].Canceled || rs[0].CancelReason != st.wantErr.Error()) {
			t.Fatalf("step %d: failure response: %s", i, dump(rs))
		}
	}
	if ErrWatcherDuplicateID.Error() != "mvcc: duplicate watch ID provided on the WatchStream" {
		t.Fatal("message differs from etcd's")
	}
}

func TestInvalidCreate(t *testing.T) {
	cases := []struct {
		name   string
		req    *pb.WatchCreateRequest
		reason string
	}{
		{"key after end", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}, "mvcc: watcher range is empty"},
		{"key equals end", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("b")}, "mvcc: watcher range is empty"},
		{"negative start", &pb.WatchCreateRequest{Key: []byte("b"), StartRevision: -1}, rpctypes.ErrCompacted.Error()},
	}
	w := newWorld(t, fastOpts)
	s := w.hub.NewStream(8)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Watch(tc.req); err == nil {
				t.Fatal("accepted")
			}
			rs := drain(s)
			if len(rs) != 1 || rs[0].WatchId != -1 || !rs[0].Created || !rs[0].Canceled || rs[0].CancelReason != tc.reason {
				t.Fatalf("response: %s", dump(rs))
			}
		})
	}
	// Nothing was registered: auto IDs still start at 0.
	if id, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("a")}); id != 0 || err != nil {
		t.Fatalf("got (%d, %v)", id, err)
	}
}

// TestRequestProgress checks etcd's rule (3.5.13): a stream-wide progress
// response only when every watcher is synced and the store has reached
// every start revision; otherwise deferred until it holds.
func TestRequestProgress(t *testing.T) {
	isProgress := func(r *pb.WatchResponse, rev int64) bool {
		return r.WatchId == -1 && len(r.Events) == 0 && !r.Created && !r.Canceled && r.Header.Revision == rev
	}
	t.Run("empty stream", func(t *testing.T) {
		w := newWorld(t, fastOpts)
		w.write(put("a", "1"))
		s := w.hub.NewStream(8)
		s.RequestProgress()
		if rs := drain(s); len(rs) != 0 {
			t.Fatalf("etcd answers nothing: %s", dump(rs))
		}
	})
	t.Run("synced past start", func(t *testing.T) {
		w := newWorld(t, fastOpts)
		w.write(put("a", "1"))
		w.write(put("a", "2"))
		s := w.hub.NewStream(8)
		s.Watch(&pb.WatchCreateRequest{Key: []byte("b"), StartRevision: 2}) // unsynced until a catch-up round
		w.hub.syncRound()
		drain(s)
		s.RequestProgress()
		rs := drain(s)
		if len(rs) != 1 || !isProgress(rs[0], 2) {
			t.Fatalf("want progress at 2: %s", dump(rs))
		}
	})
	t.Run("start zero answers at once", func(t *testing.T) {
		// etcd keeps a "from now" watcher's start revision at 0, so the
		// store is never behind it: a synced stream answers at once.
		w := newWorld(t, fastOpts)
		w.write(put("a", "1"))
		s := w.hub.NewStream(8)
		s.Watch(&pb.WatchCreateRequest{Key: []byte("a")})
		drain(s)
		s.RequestProgress()
		rs := drain(s)
		if len(rs) != 1 || !isProgress(rs[0], 1) {
			t.Fatalf("want progress at 1 at once: %s", dump(rs))
		}
	})
	t.Run("future start", func(t *testing.T) {
		w := newWorld(t, fastOpts)
		w.write(put("a", "1"))
		s := w.hub.NewStream(8)
		s.Watch(&pb.WatchCreateRequest{Key: []byte("a")})
		w.write(put("zzz", "1"))
		s.Watch(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 4})
		drain(s)
		s.RequestProgress()
		w.write(put("zzz", "2")) // 3 < 4
		if rs := drain(s); len(rs) != 0 {
			t.Fatalf("answered before the future start revision: %s", dump(rs))
		}
		w.write(put("a", "2")) // 4
		rs := drain(s)         // both watchers' events, then the progress
		if len(rs) != 3 || len(rs[0].Events) != 1 || len(rs[1].Events) != 1 || !isProgress(rs[2], 4) {
			t.Fatalf("want progress at 4 after the events: %s", dump(rs))
		}
	})
	t.Run("unsynced", func(t *testing.T) {
		w := newWorld(t, fastOpts)
		s := w.hub.NewStream(2)
		id, _ := s.Watch(&pb.WatchCreateRequest{Key: []byte("a")})
		for i := range 5 {
			w.write(put("a", fmt.Sprint(i)))
		}
		// Buffer: Created, event@1; the rest is owed.
		s.RequestProgress()
		rs := drain(s)
		for _, r := range rs {
			if r.WatchId == -1 {
				t.Fatalf("answered while unsynced: %s", dump(rs))
			}
		}
		w.hub.syncRound()
		rs = append(rs, drain(s)...)
		if n := len(eventsOf(t, rs, id)); n != 5 {
			t.Fatalf("got %d events: %s", n, dump(rs))
		}
		if !isProgress(rs[len(rs)-1], 5) {
			t.Fatalf("want progress at 5 after catching up: %s", dump(rs))
		}
	})
	t.Run("cancel of the lagging watcher", func(t *testing.T) {
		w := newWorld(t, fastOpts)
		w.write(put("a", "1"))
		s := w.hub.NewStream(8)
		s.Watch(&pb.WatchCreateRequest{Key: []byte("a")})
		lag, _ := s.Watch(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 1}) // unsynced until Run
		drain(s)
		s.RequestProgress()
		if rs := drain(s); len(rs) != 0 {
			t.Fatalf("answered: %s", dump(rs))
		}
		w.write(put("b", "1"))
		s.Cancel(lag)
		rs := drain(s)
		if len(rs) != 2 || !isProgress(rs[0], 2) || !rs[1].Canceled {
			t.Fatalf("want progress then cancel: %s", dump(rs))
		}
	})
}

func TestPeriodicProgress(t *testing.T) {
	w := newWorld(t, fastOpts)
	w.write(put("a", "1"))
	s := w.hub.NewStream(16)
	notify, _ := s.Watch(&pb.WatchCreateRequest{Key: []byte("a"), ProgressNotify: true})
	s.Watch(&pb.WatchCreateRequest{Key: []byte("b")}) // did not ask
	future, _ := s.Watch(&pb.WatchCreateRequest{Key: []byte("c"), StartRevision: 10, ProgressNotify: true})
	lagging, _ := s.Watch(&pb.WatchCreateRequest{Key: []byte("d"), StartRevision: 1, ProgressNotify: true}) // unsynced: no Run
	drain(s)

	w.hub.progressTick() // only the "from now" watcher is synced and not ahead
	if rs := drain(s); len(rs) != 1 || rs[0].WatchId != notify || rs[0].Header.Revision != 1 {
		t.Fatalf("first tick: want progress at 1 for watcher %d only: %s", notify, dump(rs))
	}
	w.write(put("x", "1"))
	w.hub.progressTick()
	rs := drain(s)
	if len(rs) != 1 || rs[0].WatchId != notify || rs[0].Header.Revision != 2 || len(rs[0].Events) != 0 {
		t.Fatalf("want one progress for watcher %d (not %d, %d): %s", notify, future, lagging, dump(rs))
	}
	w.write(put("a", "2"))
	drain(s)
	w.hub.progressTick() // events were sent since the last tick: skipped
	if rs := drain(s); len(rs) != 0 {
		t.Fatalf("progress not elided after events: %s", dump(rs))
	}
	w.hub.progressTick()
	if rs := drain(s); len(rs) != 1 || rs[0].WatchId != notify || rs[0].Header.Revision != 3 {
		t.Fatalf("want progress at 3: %s", dump(rs))
	}

	// And Run sends them on its own.
	w2 := newWorld(t, Options{ProgressInterval: 5 * time.Millisecond})
	w2.run()
	w2.write(put("a", "1"))
	s2 := w2.hub.NewStream(16)
	c := collect(t, s2)
	id, _ := s2.Watch(&pb.WatchCreateRequest{Key: []byte("a"), ProgressNotify: true})
	w2.write(put("b", "1"))
	c.waitFor(t, "periodic progress", func(rs []*pb.WatchResponse) bool {
		for _, r := range rs {
			if r.WatchId == id && !r.Created && len(r.Events) == 0 && r.Header.Revision == 2 {
				return true
			}
		}
		return false
	})
}

// TestPrevKVStripped: events carry PrevKv from the writer; only watchers
// that asked see it, and the shared events are not modified.
func TestPrevKVStripped(t *testing.T) {
	w := newWorld(t, fastOpts)
	w.write(put("a", "1"))
	s := w.hub.NewStream(16)
	with, _ := s.Watch(&pb.WatchCreateRequest{Key: []byte("a"), PrevKv: true})
	without, _ := s.Watch(&pb.WatchCreateRequest{Key: []byte("a")})
	drain(s)
	w.write(put("a", "2"))
	rs := drain(s)
	for _, r := range rs {
		switch r.WatchId {
		case with:
			if r.Events[0].PrevKv == nil || string(r.Events[0].PrevKv.Value) != "1" {
				t.Fatalf("prev_kv watcher: %v", r.Events[0])
			}
		case without:
			if r.Events[0].PrevKv != nil {
				t.Fatalf("prev_kv not stripped: %v", r.Events[0])
			}
		}
	}
	if len(rs) != 2 {
		t.Fatalf("%s", dump(rs))
	}
}

// TestCloseReleasesWatch: a Watch blocked queueing its Created response
// returns when the stream closes, and a closed stream refuses watches.
func TestCloseReleasesWatch(t *testing.T) {
	w := newWorld(t, fastOpts)
	s := w.hub.NewStream(1)
	s.Watch(&pb.WatchCreateRequest{Key: []byte("a")}) // fills the buffer
	errc := make(chan error, 1)
	go func() {
		_, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("b")})
		errc <- err
	}()
	// Wait until the second watcher is registered (its ID taken): from
	// then on its Watch is queueing, or about to queue, its Created
	// response into the full buffer.
	for registered := false; !registered; {
		w.hub.mu.Lock()
		registered = len(s.watchers) == 2
		w.hub.mu.Unlock()
		select {
		case err := <-errc:
			t.Fatalf("Watch returned %v with the buffer full", err)
		case <-time.After(time.Millisecond):
		}
	}
	s.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrStreamClosed) {
			t.Fatalf("err %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch stayed blocked after Close")
	}
	if _, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("c")}); !errors.Is(err, ErrEmptyWatcherRange) {
		t.Fatalf("closed stream: %v", err)
	}
	s.Close()
	w.write(put("a", "1")) // no watcher left to deliver to
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if w.hub.synced.n != 0 || len(w.hub.unsynced) != 0 {
		t.Fatal("watchers left after Close")
	}
}

// After Reset, a watcher refused as compacted is told a compact revision
// that a new watcher is then accepted from: a client that resumes from it
// (etcd's documented recovery) must not be refused forever.
func TestResetCompactRevisionResumable(t *testing.T) {
	w := newWorld(t, fastOpts)
	w.run()
	for i := range 5 {
		w.write(put(fmt.Sprint("k", i), "v"))
	}
	readable, _, _ := w.src.Revs()
	w.hub.Reset()
	s := w.hub.NewStream(16)
	c := collect(t, s)
	if _, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 2, WatchId: 1}); err != nil {
		t.Fatal(err)
	}
	rs := c.waitFor(t, "compacted", func(rs []*pb.WatchResponse) bool { return len(rs) >= 2 })
	cr := rs[1].CompactRevision
	if !rs[1].Canceled || cr != readable+1 {
		t.Fatalf("want a compacted cancel naming revision %d: %s", readable+1, dump(rs))
	}
	if _, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: cr, WatchId: 2}); err != nil {
		t.Fatal(err)
	}
	w.write(put("k9", "after"))
	rs = c.waitFor(t, "the event after the reset", func(rs []*pb.WatchResponse) bool {
		for _, r := range rs {
			if r.WatchId == 2 && (len(r.Events) > 0 || r.Canceled) {
				return true
			}
		}
		return false
	})
	for _, r := range rs {
		if r.WatchId == 2 && r.Canceled {
			t.Fatalf("a watch from the compact revision it was told was refused again: %s", dump(rs))
		}
	}
}

// Revisions that become visible without their events being handed to
// the hub (a writer that made them durable in a batch it later dropped)
// still reach every watcher that wants them: NotifyFrom sends the synced
// watchers owed them to history. A watcher that only wants later
// revisions is not disturbed.
func TestNotifyFromReplaysSkippedRevisions(t *testing.T) {
	w := newWorld(t, fastOpts)
	w.run()
	w.write(put("a", "1"))
	s := w.hub.NewStream(64)
	c := collect(t, s)
	base := w.hub.Rev()
	req := &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("b"), WatchId: 1}
	if _, err := s.Watch(req); err != nil {
		t.Fatal(err)
	}
	// Two revisions are made durable but never notified...
	w.txn(put("a", "2"))
	w.txn(put("ab", "1"))
	future := &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("b"), StartRevision: w.rev + 1, WatchId: 2}
	if _, err := s.Watch(future); err != nil {
		t.Fatal(err)
	}
	// ...then the next batch is notified with its own events only.
	from := w.rev + 1
	evs := w.txn(put("a", "3"))
	w.hub.NotifyFrom(from, w.rev, evs)

	want := w.expected(req, base)
	if len(want) != 3 {
		t.Fatalf("reference has %d events, want 3", len(want))
	}
	c.waitFor(t, "every event", func(rs []*pb.WatchResponse) bool { return len(eventsOf(t, rs, 1)) >= len(want) })
	w.write(put("a", "4")) // a later ordinary Notify: the watcher is synced again
	want = w.expected(req, base)
	wantFuture := w.expected(future, base)
	// One Notify queues both watchers' responses, in no set order: wait
	// for both.
	rs := c.waitFor(t, "the next event", func(rs []*pb.WatchResponse) bool {
		return len(eventsOf(t, rs, 1)) >= len(want) && len(eventsOf(t, rs, 2)) >= len(wantFuture)
	})
	sameEvents(t, "owed watcher", eventsOf(t, rs, 1), want)
	sameEvents(t, "future watcher", eventsOf(t, rs, 2), wantFuture)
}

// TestOnUnsyncCountsEveryMove checks that Options.OnUnsync is called once
// per synced -> unsynced move, and only then: a stream whose buffer holds
// one response takes the first write and not the second.
func TestOnUnsyncCountsEveryMove(t *testing.T) {
	cases := []struct {
		name   string
		writes int
		want   int64
	}{
		{"fits the buffer", 1, 0},
		{"overflows the buffer", 3, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls int64
			opts := fastOpts
			opts.OnUnsync = func() { calls++ } // under the hub's lock
			w := newWorld(t, opts)             // Run not started: nothing catches up
			s := w.hub.NewStream(1)
			if _, err := s.Watch(&pb.WatchCreateRequest{Key: []byte("a")}); err != nil {
				t.Fatal(err)
			}
			<-s.Responses() // the created response
			for i := range tc.writes {
				w.write(put("a", fmt.Sprint(i)))
			}
			w.hub.mu.Lock()
			got, moves := calls, w.hub.unsyncs
			w.hub.mu.Unlock()
			if got != tc.want || moves != tc.want {
				t.Fatalf("OnUnsync called %d times, hub counted %d moves; want %d", got, moves, tc.want)
			}
		})
	}
}
