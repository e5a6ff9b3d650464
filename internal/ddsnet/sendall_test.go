package ddsnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// TestSendAllEveryClassInOrder sends interleaved messages of every class
// in SendAll calls, with and without dds.Config.WriteBatch: each is taken,
// and every one arrives intact, each class in its order.
func TestSendAllEveryClassInOrder(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("WriteBatch=%v", batch), func(t *testing.T) {
			cfg := dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second, WriteBatch: batch}
			got := make(chan *transport.Message, 100000)
			a, _ := startPair(t, Config{DDS: cfg, Cluster: 7, Node: 1}, Config{DDS: cfg, Cluster: 7, Node: 2}, discard, handTo(got))
			payload := func(c transport.Class, i int) []byte { return bytes.Repeat([]byte{byte(c), byte(i)}, 50+i%300) }
			const perClass, burst = 400, 64
			var ms []*transport.Message
			for i := range perClass {
				for c := transport.Class(0); c < transport.NumClasses; c++ {
					if c == transport.Heartbeat {
						continue // BEST_EFFORT, KEEP_LAST 1: only the newest counts
					}
					ms = append(ms, &transport.Message{Class: c, Kind: 1, Index: uint64(i), Payload: payload(c, i)})
				}
			}
			for len(ms) > 0 {
				k := min(burst, len(ms))
				n, err := a.SendAll(ms[:k])
				if err != nil || n != k {
					t.Fatalf("SendAll took %d of %d: %v", n, k, err)
				}
				ms = ms[k:]
			}
			next := map[transport.Class]uint64{}
			for range perClass * (int(transport.NumClasses) - 1) {
				m := recv(t, got)
				if m.Index != next[m.Class] || !bytes.Equal(m.Payload, payload(m.Class, int(m.Index))) {
					t.Fatalf("class %s: got #%d (%d bytes), want #%d and its payload", m.Class, m.Index, len(m.Payload), next[m.Class])
				}
				next[m.Class]++
			}
		})
	}
}

// TestSendAllBacklogWhenBatching fills a batching writer to its
// high-water mark with SendAll while the peer's consumer takes nothing:
// SendAll never waits, takes messages until the queue behind the writer
// is full and then refuses, and once the consumer takes again every
// message taken arrives, in order (the flusher queues the backlog and
// flushes it as the peer acknowledges).
func TestSendAllBacklogWhenBatching(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 100000)}
	g.refuseLog.Store(true)
	cfg := Config{
		DDS: dds.Config{Domain: 1 + uint32(os.Getpid()%90), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second,
			WhcHigh: 64 << 10, WriteBatch: true},
		Backlog:          256 << 10,
		ReaderMaxSamples: 8,
		Batch:            4,
	}
	a, b := batchPair(t, cfg, g)
	type result struct {
		sent int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		sent := 0
		for sent < 1000 {
			var ms []*transport.Message
			for i := sent; i < sent+16; i++ {
				p := make([]byte, 8<<10)
				p[0] = byte(i)
				ms = append(ms, &transport.Message{Class: transport.Log, Index: uint64(i), Payload: p})
			}
			n, err := a.SendAll(ms)
			sent += n
			if err != nil {
				done <- result{sent, err}
				return
			}
		}
		done <- result{sent, nil}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("SendAll blocked at the writer's high-water mark (stats %+v)", a.Stats())
	}
	if !errors.Is(r.err, transport.ErrTimeout) {
		t.Fatalf("after %d messages of 8 KiB against a 64 KiB high-water mark: %v, want a refusal (ErrTimeout)", r.sent, r.err)
	}
	if st := a.Stats(); st.SendBlocked == 0 {
		t.Errorf("stats %+v: want messages queued behind the writer", st)
	}
	g.refuseLog.Store(false)
	drainInOrder(t, b, g, r.sent)
}
