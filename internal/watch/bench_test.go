package watch

import (
	"context"
	"fmt"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/mvcc"
)

// logSource is a Source for benchmarks: revision r's single event is
// log[r-1], so History costs what it returns, not the whole log.
type logSource struct {
	mu  sync.Mutex
	log []mvccpb.Event
}

func (l *logSource) History(from, to int64, limit int) ([]mvccpb.Event, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	to = min(to, int64(len(l.log)))
	if limit > 0 {
		to = min(to, from+int64(limit)-1)
	}
	if from > to {
		return nil, max(to, from-1), nil
	}
	return append([]mvccpb.Event(nil), l.log[from-1:to]...), to, nil
}

func (l *logSource) Range([]byte, []byte, mvcc.RangeOptions) (mvcc.RangeResult, int64, error) {
	return mvcc.RangeResult{}, 0, nil
}

func (l *logSource) Revs() (int64, int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := int64(len(l.log))
	return n, n, 0
}

func (l *logSource) append(ev mvccpb.Event) {
	l.mu.Lock()
	l.log = append(l.log, ev)
	l.mu.Unlock()
}

// BenchmarkPutWith1000Watchers is the writer's side of the scale bench's
// watched phase: 1,000 prefix watchers, ten on each of 100 namespaces,
// spread over 16 streams with a consumer each; each op is one put in the
// next namespace handed to Notify, so it reaches ten watchers. ns/op is what
// the writer pays per revision. The stream buffers are large enough that
// no watcher falls behind (one that did would cost the writer nothing, and
// the figure would flatter the hub); "unsyncs" counts those that did.
func BenchmarkPutWith1000Watchers(b *testing.B) {
	const (
		watchers   = 1000
		namespaces = 100
		streams    = 16
	)
	src := &logSource{}
	h := NewHub(src, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.Run(ctx) })
	ss := make([]*Stream, streams)
	for i := range ss {
		// A namespace's ten watchers sit on at most four streams, three
		// of them on one: each op queues at most three responses per
		// stream.
		s := h.NewStream(min(3*b.N, 1<<20))
		ss[i] = s
		wg.Go(func() {
			for {
				select {
				case <-s.Responses():
				case <-ctx.Done():
					return
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	prefix := func(ns int) string { return fmt.Sprintf("/registry/pods/ns-%03d/", ns) }
	for i := range watchers {
		p := prefix(i % namespaces)
		end := []byte(p)
		end[len(end)-1]++
		if _, err := ss[i%streams].Watch(&pb.WatchCreateRequest{Key: []byte(p), RangeEnd: end}); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([][]byte, namespaces)
	for i := range keys {
		keys[i] = []byte(prefix(i) + "pod-0")
	}
	val := make([]byte, 2048)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		rev := int64(i + 1)
		ev := mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: keys[i%namespaces], Value: val, CreateRevision: 1, ModRevision: rev, Version: rev}}
		src.append(ev)
		h.Notify(rev, []mvccpb.Event{ev})
	}
	b.StopTimer()
	h.mu.Lock()
	b.ReportMetric(float64(h.unsyncs), "unsyncs")
	h.mu.Unlock()
}
