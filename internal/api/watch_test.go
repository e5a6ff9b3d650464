package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/dyad-db/dyad/internal/mvcc"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/watch"
)

func TestSendFragments(t *testing.T) {
	ev := func(n int) *mvccpb.Event {
		return &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: bytes.Repeat([]byte{'v'}, n), ModRevision: 5}}
	}
	evs := func(sizes ...int) []*mvccpb.Event {
		var out []*mvccpb.Event
		for _, n := range sizes {
			out = append(out, ev(n))
		}
		return out
	}
	cases := []struct {
		name   string
		events []*mvccpb.Event
		max    int
		pieces []int // events per piece
	}{
		{"small", evs(10, 10, 10), 1000, []int{3}},
		{"single big event", evs(5000), 100, []int{1}},
		{"one per piece", evs(500, 500, 500), 100, []int{1, 1, 1}},
		{"two per piece", evs(100, 100, 100, 100, 100), 300, []int{2, 2, 1}},
		{"no events", nil, 1, []int{0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wr := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 5}, WatchId: 3, Events: tc.events}
			var got []*pb.WatchResponse
			err := sendFragments(wr, tc.max, func(r *pb.WatchResponse) error { got = append(got, r); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.pieces) {
				t.Fatalf("%d pieces, want %d", len(got), len(tc.pieces))
			}
			var all []*mvccpb.Event
			for i, r := range got {
				if len(r.Events) != tc.pieces[i] {
					t.Fatalf("piece %d has %d events, want %d", i, len(r.Events), tc.pieces[i])
				}
				if r.Fragment != (i < len(got)-1) {
					t.Fatalf("piece %d: Fragment=%v", i, r.Fragment)
				}
				if r.WatchId != 3 || r.Header.Revision != 5 {
					t.Fatalf("piece %d lost fields", i)
				}
				if len(r.Events) > 1 && r.Size() >= tc.max {
					t.Fatalf("piece %d too large: %d", i, r.Size())
				}
				all = append(all, r.Events...)
			}
			if len(all) != len(tc.events) {
				t.Fatal("events lost")
			}
			for i := range all {
				if all[i] != tc.events[i] {
					t.Fatal("events reordered")
				}
			}
		})
	}
}

// node is a real store and hub written the way the server's applier does.
type node struct {
	t   *testing.T
	be  *storage.Backend
	s   *mvcc.Store
	hub *watch.Hub
}

func newNode(t *testing.T) *node {
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
	n := &node{t: t, be: be, s: s}
	n.hub = watch.NewHub(s, watch.Options{SyncInterval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.hub.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

// put writes key/value pairs in one transaction and returns its revision.
func (n *node) put(kvs ...string) int64 {
	n.t.Helper()
	var w *mvcc.WriteTxn
	err := n.be.Update(func(tx storage.WriteTx) error {
		w = n.s.Write(tx)
		for i := 0; i < len(kvs); i += 2 {
			if _, err := w.Put([]byte(kvs[i]), []byte(kvs[i+1]), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
	n.s.MarkDurable(w.Rev())
	n.hub.Notify(w.Rev(), w.Changes())
	return w.Rev()
}

func (n *node) compact(rev int64) {
	n.t.Helper()
	if err := n.be.Update(func(tx storage.WriteTx) error { _, err := n.s.Compact(tx, rev); return err }); err != nil {
		n.t.Fatal(err)
	}
}

func fill(h *pb.ResponseHeader) {
	h.ClusterId, h.MemberId, h.RaftTerm = 11, 22, 33
	h.Revision = -99 // must not survive
}

// fakeStream is a Watch_WatchServer driven by the test.
type fakeStream struct {
	grpc.ServerStream
	ctx     context.Context
	reqs    chan *pb.WatchRequest // closed: the client closed its side
	sent    chan *pb.WatchResponse
	sendErr error
	inRecv  atomic.Int32
	eof     chan struct{} // if set, closed when Recv returns io.EOF
	eofOnce sync.Once
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Send(r *pb.WatchResponse) error {
	if f.sendErr != nil {
		return f.sendErr
	}
	select {
	case f.sent <- r:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// Recv counts itself in inRecv while it runs. It leaves the count before
// it closes eof: a test that waited for eof and then for Watch to return
// must find no Recv running, and Watch does not wait for its receive loop
// once the stream's context is done.
func (f *fakeStream) Recv() (*pb.WatchRequest, error) {
	f.inRecv.Add(1)
	r, err := f.recv()
	f.inRecv.Add(-1)
	if err == io.EOF && f.eof != nil {
		f.eofOnce.Do(func() { close(f.eof) })
	}
	return r, err
}

func (f *fakeStream) recv() (*pb.WatchRequest, error) {
	select {
	case r, ok := <-f.reqs:
		if !ok {
			return nil, io.EOF
		}
		return r, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

func (f *fakeStream) next(t *testing.T) *pb.WatchResponse {
	t.Helper()
	select {
	case r := <-f.sent:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no response")
		return nil
	}
}

func create(r *pb.WatchCreateRequest) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: r}}
}

func TestWatchServerStream(t *testing.T) {
	n := newNode(t)
	n.put("a", "1") // 2
	srv := NewWatchServer(n.hub, fill, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fs := &fakeStream{ctx: ctx, reqs: make(chan *pb.WatchRequest, 8), sent: make(chan *pb.WatchResponse, 64), eof: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- srv.Watch(fs) }()

	checkHeader := func(r *pb.WatchResponse, rev int64) {
		t.Helper()
		h := r.Header
		if h.ClusterId != 11 || h.MemberId != 22 || h.RaftTerm != 33 || h.Revision != rev {
			t.Fatalf("header %+v, want revision %d", h, rev)
		}
	}
	fs.reqs <- create(&pb.WatchCreateRequest{Key: []byte("a"), PrevKv: true})
	r := fs.next(t)
	if !r.Created || r.WatchId != 0 {
		t.Fatalf("created: %v", r)
	}
	checkHeader(r, 2)
	fs.reqs <- create(&pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")})
	r = fs.next(t)
	if !r.Created || !r.Canceled || r.WatchId != -1 || r.CancelReason != "mvcc: watcher range is empty" {
		t.Fatalf("invalid range: %v", r)
	}
	// A big transaction to a fragmenting watcher: split past 512 KiB.
	fs.reqs <- create(&pb.WatchCreateRequest{Key: []byte("big/"), RangeEnd: []byte("big0"), Fragment: true})
	r = fs.next(t)
	fragID := r.WatchId
	n.put("a", "2") // 3
	r = fs.next(t)
	checkHeader(r, 3)
	if r.WatchId != 0 || len(r.Events) != 1 || r.Events[0].PrevKv == nil || string(r.Events[0].PrevKv.Value) != "1" {
		t.Fatalf("event: %v", r)
	}
	val := strings.Repeat("x", 200*1024)
	n.put("big/1", val, "big/2", val, "big/3", val, "big/4", val, "big/5", val) // 4
	var pieces []*pb.WatchResponse
	for {
		r = fs.next(t)
		pieces = append(pieces, r)
		checkHeader(r, 4)
		if !r.Fragment {
			break
		}
	}
	total := 0
	for _, p := range pieces {
		if p.WatchId != fragID {
			t.Fatalf("piece for %d", p.WatchId)
		}
		total += len(p.Events)
	}
	if len(pieces) < 2 || total != 5 {
		t.Fatalf("%d pieces with %d events", len(pieces), total)
	}
	// Progress: every watcher synced and past its start.
	fs.reqs <- &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
	r = fs.next(t)
	if r.WatchId != -1 || len(r.Events) != 0 || r.Created || r.Canceled {
		t.Fatalf("progress: %v", r)
	}
	checkHeader(r, 4)
	// Cancel, then an unknown cancel (ignored).
	fs.reqs <- &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 0}}}
	fs.reqs <- &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 42}}}
	r = fs.next(t)
	if !r.Canceled || r.WatchId != 0 {
		t.Fatalf("cancel: %v", r)
	}
	// The client closes its side: events still flow, as in etcd. The
	// put follows the server's receipt of the EOF (the send loop may learn
	// of it just before or just after the event; both must deliver).
	close(fs.reqs)
	<-fs.eof
	n.put("big/1", "small") // 5
	r = fs.next(t)
	if r.WatchId != fragID || len(r.Events) != 1 || r.Fragment {
		t.Fatalf("after EOF: %v", r)
	}
	// Only the cancel ends the stream (an earlier end would have left
	// another error in errc), and once Watch has returned every Send is
	// done, so an empty fs.sent means nothing else was sent.
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, rpctypes.ErrGRPCWatchCanceled) {
			t.Fatalf("err %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return")
	}
	select {
	case r := <-fs.sent:
		t.Fatalf("unexpected %v", r)
	default:
	}
	if fs.inRecv.Load() != 0 {
		t.Fatal("receive loop still running after Watch returned")
	}
}

// blindStream's Recv ignores the handler's context, as a gRPC stream's Recv
// ignores a context an interceptor derived: it returns only when release is
// closed (gRPC ends the stream once the handler returned).
type blindStream struct {
	fakeStream
	release chan struct{}
}

func (b *blindStream) Recv() (*pb.WatchRequest, error) {
	select {
	case r := <-b.reqs:
		return r, nil
	case <-b.release:
		return nil, context.Canceled
	}
}

// TestWatchServerInterceptorCancel: when an interceptor cancels the
// handler's context (require-leader, primary lost), Watch returns although
// Recv is still blocked; otherwise the stream would hang, neither sending
// events nor ending, and its client would never re-watch.
func TestWatchServerInterceptorCancel(t *testing.T) {
	n := newNode(t)
	srv := NewWatchServer(n.hub, fill, 0)
	ctx, cancel := context.WithCancel(context.Background())
	bs := &blindStream{fakeStream: fakeStream{ctx: ctx, reqs: make(chan *pb.WatchRequest), sent: make(chan *pb.WatchResponse, 8)}, release: make(chan struct{})}
	defer close(bs.release)
	errc := make(chan error, 1)
	go func() { errc <- srv.Watch(bs) }()
	bs.reqs <- create(&pb.WatchCreateRequest{Key: []byte("a")})
	if r := bs.next(t); !r.Created {
		t.Fatalf("want created, got %v", r)
	}
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Watch returned no error for a cancelled stream")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch hung after its context was cancelled while Recv was blocked")
	}
}

// TestWatchServerRecvError: a failing Recv ends the stream with its error
// and both loops stop.
func TestWatchServerRecvError(t *testing.T) {
	n := newNode(t)
	srv := NewWatchServer(n.hub, fill, 0)
	boom := errors.New("boom")
	fs := &errStream{fakeStream: fakeStream{ctx: context.Background(), sent: make(chan *pb.WatchResponse, 8)}, err: boom}
	if err := srv.Watch(fs); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
}

type errStream struct {
	fakeStream
	err error
}

func (e *errStream) Recv() (*pb.WatchRequest, error) { return nil, e.err }

// TestClientV3 runs etcd's own client against the Watch service over gRPC.
func TestClientV3(t *testing.T) {
	n := newNode(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterWatchServer(g, NewWatchServer(n.hub, fill, 1))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.Serve(lis) }()
	defer func() { g.Stop(); wg.Wait() }()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{lis.Addr().String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	n.put("/r/a", "1")              // 2
	n.put("/r/b", "1", "/r/a", "2") // 3
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := cli.Watch(wctx, "/r/", clientv3.WithPrefix(), clientv3.WithRev(2), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	var got []string
	for len(got) < 3 {
		resp := <-wch
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			prev := ""
			if ev.PrevKv != nil {
				prev = string(ev.PrevKv.Value)
			}
			got = append(got, fmt.Sprintf("%s %s=%s@%d prev=%s", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, prev))
		}
	}
	want := []string{"PUT /r/a=1@2 prev=", "PUT /r/b=1@3 prev=", "PUT /r/a=2@3 prev=1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}

	// RequestProgress reaches the watch as a progress notification.
	if err := cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	resp := <-wch
	if !resp.IsProgressNotify() || resp.Header.Revision != 3 {
		t.Fatalf("progress: %+v", resp)
	}

	// A fragmented transaction arrives whole.
	val := strings.Repeat("x", 200*1024)
	n.put("/r/1", val, "/r/2", val, "/r/3", val, "/r/4", val) // 4
	fch := cli.Watch(ctx, "/r/", clientv3.WithPrefix(), clientv3.WithRev(4), clientv3.WithFragment())
	resp = <-fch
	if resp.Err() != nil || len(resp.Events) != 4 {
		t.Fatalf("fragmented: err %v, %d events", resp.Err(), len(resp.Events))
	}

	// Compacted start revision.
	n.put("/r/a", "3") // 5
	n.compact(4)
	cch := cli.Watch(ctx, "/r/", clientv3.WithPrefix(), clientv3.WithRev(2))
	resp = <-cch
	if !errors.Is(resp.Err(), rpctypes.ErrCompacted) || resp.CompactRevision != 4 {
		t.Fatalf("compacted: err %v, compact %d", resp.Err(), resp.CompactRevision)
	}
	// From the compaction revision itself, as etcd: its events are kept
	// (the clients that resume from a CompactRevision they were told).
	ach := cli.Watch(ctx, "/r/", clientv3.WithPrefix(), clientv3.WithRev(4))
	var at []int64
	for len(at) < 5 {
		resp = <-ach
		if resp.Err() != nil || resp.Canceled {
			t.Fatalf("watch from the compaction revision: err %v, canceled %v", resp.Err(), resp.Canceled)
		}
		for _, ev := range resp.Events {
			at = append(at, ev.Kv.ModRevision)
		}
	}
	if fmt.Sprint(at) != "[4 4 4 4 5]" {
		t.Fatalf("watch from the compaction revision got events at %v, want the txn at 4 and the put at 5", at)
	}
}
