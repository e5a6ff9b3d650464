package dds

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func loopbackCfg(t testing.TB) Config {
	return Config{Domain: testDomain(t), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second}
}

// newLoopbackPair opens two participants on one loopback domain, both
// closed when the test ends (Close is idempotent, so a test may close
// one earlier).
func newLoopbackPair(t *testing.T) (pa, pb *Participant) {
	t.Helper()
	cfg := loopbackCfg(t)
	pa, err := NewParticipant(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close() })
	pb, err = NewParticipant(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pb.Close() })
	return pa, pb
}

// matcher is a reader or writer that can wait for matching peers.
type matcher interface {
	WaitMatched(ctx context.Context, n int) error
}

// waitMatched fails the test unless every endpoint matches at least one
// peer before ctx ends.
func waitMatched(t *testing.T, ctx context.Context, ends ...matcher) {
	t.Helper()
	for _, e := range ends {
		if err := e.WaitMatched(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
}

// payloadFor fills a deterministic, index-dependent payload.
func payloadFor(idx uint64, n int) []byte {
	b := make([]byte, n)
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], idx*0x9E3779B97F4A7C15+uint64(n))
	for i := range b {
		b[i] = seed[i%8] ^ byte(i/8)
	}
	return b
}

// checkNoGoroutineLeak waits briefly for the goroutine count to drop back.
func checkNoGoroutineLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var testSizes = []int{0, 1, 7, 64, 1000, 1024, 1344, 4096, 14720, 16384, 65535, 65536}

func TestLoopbackRoundTrip(t *testing.T) {
	for _, mode := range []ReceiveMode{ReceiveThread, ReceiveListener} {
		t.Run(fmt.Sprintf("mode=%d", mode), func(t *testing.T) {
			before := runtime.NumGoroutine()
			cfg := loopbackCfg(t)
			pa, err := NewParticipant(cfg)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := NewParticipant(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const topic = "dyad_test"
			w, err := pa.NewWriter(topic, QoS{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := pb.NewReader(topic, ReaderOptions{Mode: mode, Buffer: 16, Batch: 8})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			waitMatched(t, ctx, w, r)
			const rounds = 20
			go func() {
				var idx uint64
				for round := 0; round < rounds; round++ {
					for _, sz := range testSizes {
						idx++
						h := Header{Kind: 3, Flags: 0xfeedbeef, Cluster: 42, Node: 2, Term: 9, Index: idx}
						if err := w.Write(&h, payloadFor(idx, sz)); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
			total := rounds * len(testSizes)
			var held []*Sample // hold a few to check they survive further receives
			for i := 1; i <= total; i++ {
				var s *Sample
				select {
				case s = <-r.C():
				case <-ctx.Done():
					t.Fatalf("timeout after %d samples", i-1)
				}
				sz := testSizes[(i-1)%len(testSizes)]
				want := Header{Version: EnvelopeVersion, Kind: 3, Flags: 0xfeedbeef, Cluster: 42, Node: 2, Term: 9, Index: uint64(i)}
				if s.Header != want {
					t.Fatalf("sample %d: header %+v, want %+v (ordering/reliability)", i, s.Header, want)
				}
				if !bytes.Equal(s.Payload, payloadFor(uint64(i), sz)) {
					t.Fatalf("sample %d: payload of %d bytes corrupted (len %d)", i, sz, len(s.Payload))
				}
				if s.SourceTime == 0 || s.Publication == 0 {
					t.Fatalf("sample %d: missing info %+v", i, s)
				}
				if i%97 == 0 {
					held = append(held, s)
				} else {
					s.Release()
				}
			}
			for _, s := range held {
				i := s.Index
				if !bytes.Equal(s.Payload, payloadFor(i, testSizes[(i-1)%uint64(len(testSizes))])) {
					t.Fatalf("held sample %d overwritten before Release", i)
				}
				s.Release()
			}
			st := r.Stats()
			if st.Samples != uint64(total) {
				t.Fatalf("stats %+v, want %d samples", st, total)
			}
			// Recycling: after warm-up, a steady stream of released 1 KiB
			// samples allocates no buffers at all. The warm-up streams one
			// free list's worth first: the list is FIFO and may still hold
			// samples with the smaller buffers of the mixed sizes above,
			// each grown once as it comes round (how many depends on the
			// order the held samples were released in).
			idx := uint64(total)
			stream := func(n int) {
				for i := 0; i < n; i++ {
					idx++
					if err := w.Write(&Header{Index: idx}, payloadFor(idx, 1024)); err != nil {
						t.Fatal(err)
					}
					select {
					case s := <-r.C():
						if s.Index != idx || !bytes.Equal(s.Payload, payloadFor(idx, 1024)) {
							t.Fatalf("steady sample %d corrupted", idx)
						}
						s.Release()
					case <-ctx.Done():
						t.Fatal("timeout in steady phase")
					}
				}
			}
			stream(freeListLen)
			st = r.Stats()
			stream(500)
			st2 := r.Stats()
			if st2.Allocs != st.Allocs {
				t.Fatalf("buffers not recycled: %+v then %+v", st, st2)
			}
			t.Logf("stats %+v then %+v", st, st2)
			if err := pb.Close(); err != nil {
				t.Fatal(err)
			}
			if _, ok := <-r.C(); ok {
				t.Fatal("channel not closed by Close")
			}
			if err := w.Write(&Header{}, nil); err != nil {
				t.Fatalf("write after peer close: %v", err)
			}
			if err := pa.Close(); err != nil {
				t.Fatal(err)
			}
			if err := w.Write(&Header{}, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("write after close: %v", err)
			}
			checkNoGoroutineLeak(t, before)
		})
	}
}

// TestBestEffortMatching: BEST_EFFORT endpoints match and deliver each
// other's samples; a RELIABLE reader never matches a BEST_EFFORT writer
// (RxO), which is why ddsnet gives both sides of a class the same QoS.
func TestBestEffortMatching(t *testing.T) {
	pa, pb := newLoopbackPair(t)
	const topic = "dyad_test_best_effort"
	w, err := pa.NewWriter(topic, QoS{BestEffort: true, HistoryDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	be, err := pb.NewReader(topic, ReaderOptions{QoS: QoS{BestEffort: true}, Mode: ReceiveThread, Buffer: 16, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := pb.NewReader(topic, ReaderOptions{Mode: ReceiveThread, Buffer: 16, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitMatched(t, ctx, be)
	// Best effort drops samples written before the match is complete on
	// the writer's side too: write until one arrives.
	got := false
	for i := uint64(1); !got; i++ {
		h := Header{Kind: 1, Cluster: 7, Node: 1, Index: i}
		if err := w.Write(&h, payloadFor(i, 32)); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-be.C():
			if !bytes.Equal(s.Payload, payloadFor(s.Index, 32)) {
				t.Fatalf("sample %d corrupted", s.Index)
			}
			s.Release()
			got = true
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no sample reached the best-effort reader")
		}
	}
	if n, err := rel.Matched(); err != nil || n != 0 {
		t.Fatalf("a RELIABLE reader matched a BEST_EFFORT writer (%d, %v)", n, err)
	}
	select {
	case s := <-rel.C():
		t.Fatalf("the RELIABLE reader received sample %d", s.Index)
	default:
	}
}

// A ReceiveNotify reader delivers nothing by itself: Notify only says that
// samples wait, at most once until the next Take, and Take shows them in
// the writer's order with intact payloads. A burst written while nobody
// takes therefore costs one notification.
func TestNotifyOncePerTake(t *testing.T) {
	pa, pb := newLoopbackPair(t)
	const topic = "dyad_test_notify"
	w, err := pa.NewWriter(topic, QoS{})
	if err != nil {
		t.Fatal(err)
	}
	notified := make(chan struct{}, 1000)
	r, err := pb.NewReader(topic, ReaderOptions{Mode: ReceiveNotify, Batch: 8, Notify: func() { notified <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitMatched(t, ctx, w, r)
	// The owner's first Take after NewReader arms the notification.
	if n, err := r.Take(func(*Header, []byte) {}); err != nil || n != 0 {
		t.Fatalf("first Take: %d samples, %v", n, err)
	}
	const total = 20
	for i := uint64(1); i <= total; i++ {
		if err := w.Write(&Header{Index: i}, payloadFor(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-notified:
	case <-ctx.Done():
		t.Fatal("no notification")
	}
	var next uint64 = 1
	for next <= total {
		n, err := r.Take(func(h *Header, p []byte) {
			if h.Index != next || !bytes.Equal(p, payloadFor(next, 100)) {
				t.Fatalf("sample %d arrived as %d (%d bytes)", next, h.Index, len(p))
			}
			next++
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			// Not all arrived yet: the next arrival notifies again.
			select {
			case <-notified:
			case <-ctx.Done():
				t.Fatalf("stalled after %d samples", next-1)
			}
		}
	}
	if extra := len(notified); extra > total/2 {
		t.Errorf("%d further notifications for %d samples: not once per take", extra, total)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Take(func(*Header, []byte) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Take after Close: %v", err)
	}
}
