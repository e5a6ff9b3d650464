package watch

import (
	"fmt"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/mvcc"
	"github.com/dyad-db/dyad/internal/storage"
)

// storeWorld writes through a real mvcc.Store the way the server's applier
// does: commit, MarkDurable, Notify. all keeps every change (with PrevKv)
// as the reference.
type storeWorld struct {
	t   *testing.T
	be  *storage.Backend
	s   *mvcc.Store
	hub *Hub
	all []mvccpb.Event
}

func newStoreWorld(t *testing.T) *storeWorld {
	t.Helper()
	be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	s, err := mvcc.Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	sw := &storeWorld{t: t, be: be, s: s}
	sw.hub = NewHub(s, fastOpts)
	return sw
}

func (sw *storeWorld) txn(fn func(w *mvcc.WriteTxn) error) {
	sw.t.Helper()
	var w *mvcc.WriteTxn
	err := sw.be.Update(func(tx storage.WriteTx) error {
		w = sw.s.Write(tx)
		return fn(w)
	})
	if err != nil {
		sw.t.Fatal(err)
	}
	sw.s.MarkDurable(w.Rev())
	sw.all = append(sw.all, w.Changes()...)
	sw.hub.Notify(w.Rev(), w.Changes())
}

func (sw *storeWorld) put(kvs ...string) {
	sw.txn(func(w *mvcc.WriteTxn) error {
		for i := 0; i < len(kvs); i += 2 {
			if _, err := w.Put([]byte(kvs[i]), []byte(kvs[i+1]), 0); err != nil {
				return err
			}
		}
		return nil
	})
}

func (sw *storeWorld) del(key, end string) {
	sw.txn(func(w *mvcc.WriteTxn) error {
		var e []byte
		if end != "" {
			e = []byte(end)
		}
		_, err := w.DeleteRange([]byte(key), e)
		return err
	})
}

// TestStoreHistoryReplay checks replay from a past revision of a real
// store, PrevKv filled from the store, the live hand-over afterwards, and
// the compaction cancel.
func TestStoreHistoryReplay(t *testing.T) {
	sw := newStoreWorld(t)
	// A fresh store is at revision 1; the first write makes revision 2,
	// as in etcd.
	sw.put("/a/1", "v1")               // 2
	sw.put("/a/2", "v1", "/b/1", "v1") // 3
	sw.put("/a/1", "v2")               // 4
	sw.del("/a/2", "")                 // 5
	sw.put("/a/2", "v2", "/a/3", "v1") // 6
	sw.del("/a/", "/a0")               // 7: deletes /a/1 /a/2 /a/3
	sw.put("/a/1", "v3")               // 8
	sw.put("/b/1", "v2", "/a/1", "v4") // 9
	if _, cur, _ := sw.s.Revs(); cur != 9 {
		t.Fatalf("current revision %d", cur)
	}

	w := &world{t: t, hub: sw.hub} // runs the hub; expected() reads w.all
	w.run()
	st := sw.hub.NewStream(64)
	c := collect(t, st)
	reqs := []*pb.WatchCreateRequest{
		{Key: []byte("/a/"), RangeEnd: []byte("/a0"), StartRevision: 3, PrevKv: true},
		{Key: []byte("/a/"), RangeEnd: []byte("/a0"), StartRevision: 4},
		{Key: []byte("/a/1"), StartRevision: 2, PrevKv: true},
		{Key: []byte("/"), RangeEnd: []byte{0}, StartRevision: 6, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}, PrevKv: true},
		{Key: []byte("/b/"), RangeEnd: []byte("/b0")},
	}
	ids := make([]int64, len(reqs))
	for i, r := range reqs {
		id, err := st.Watch(r)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	sw.put("/a/3", "v2", "/b/2", "v1") // 10
	sw.del("/a/1", "")                 // 11

	w.all = sw.all
	for i, r := range reqs {
		want := w.expected(r, 9)
		rs := c.waitFor(t, fmt.Sprint("watch ", i), func(rs []*pb.WatchResponse) bool {
			n := 0
			for _, x := range rs {
				if x.WatchId == ids[i] {
					n += len(x.Events)
				}
			}
			return n >= len(want)
		})
		sameEvents(t, fmt.Sprint("watch ", i), eventsOf(t, rs, ids[i]), want)
	}

	// Compact at 5; watches from below it are canceled with the
	// compaction revision.
	err := sw.be.Update(func(tx storage.WriteTx) error {
		_, err := sw.s.Compact(tx, 5)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Watch(&pb.WatchCreateRequest{Key: []byte("/a/"), RangeEnd: []byte("/a0"), StartRevision: 4})
	if err != nil {
		t.Fatal(err)
	}
	rs := c.waitFor(t, "compaction cancel", func(rs []*pb.WatchResponse) bool {
		for _, r := range rs {
			if r.WatchId == id && r.CompactRevision == 5 && r.Canceled {
				return true
			}
		}
		return false
	})
	if evs := eventsOf(t, rs, id); len(evs) != 0 {
		t.Fatalf("events before the compaction cancel: %s", evStr(evs))
	}
	// From just after the compaction point: replayed.
	id, err = st.Watch(&pb.WatchCreateRequest{Key: []byte("/a/"), RangeEnd: []byte("/a0"), StartRevision: 6, PrevKv: true})
	if err != nil {
		t.Fatal(err)
	}
	want := w.expected(&pb.WatchCreateRequest{Key: []byte("/a/"), RangeEnd: []byte("/a0"), StartRevision: 6, PrevKv: true}, 11)
	rs = c.waitFor(t, "replay after compaction", func(rs []*pb.WatchResponse) bool {
		n := 0
		for _, x := range rs {
			if x.WatchId == id {
				n += len(x.Events)
			}
		}
		return n >= len(want)
	})
	sameEvents(t, "after compaction", eventsOf(t, rs, id), want)
}
