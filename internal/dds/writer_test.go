package dds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// WriteStamped sends exactly what Write sends and measures the write:
// dds_write's wall time within the cgo call's, and CPU time spent in it.
func TestWriteStamped(t *testing.T) {
	pa, pb := newLoopbackPair(t)
	const topic = "dyad_test_stamped"
	w, err := pa.NewWriter(topic, QoS{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := pb.NewReader(topic, ReaderOptions{Mode: ReceiveThread, Buffer: 16, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitMatched(t, ctx, w, r)
	for i, stamped := range []bool{false, true} {
		idx := uint64(i + 1)
		h := Header{Kind: 3, Flags: 5, Cluster: 42, Node: 2, Term: 9, Index: idx}
		var st WriteStamp
		if stamped {
			err = w.WriteStamped(&h, payloadFor(idx, 1024), &st)
		} else {
			err = w.Write(&h, payloadFor(idx, 1024))
		}
		if err != nil {
			t.Fatal(err)
		}
		if stamped {
			if st.Write <= 0 || st.CPU <= 0 || st.Call < st.Write {
				t.Errorf("stamp %+v: want 0 < Write <= Call and CPU > 0", st)
			}
			if st.Voluntary < 0 || st.Involuntary < 0 {
				t.Errorf("stamp %+v: negative context switches", st)
			}
		}
		select {
		case s := <-r.C():
			want := Header{Version: EnvelopeVersion, Kind: 3, Flags: 5, Cluster: 42, Node: 2, Term: 9, Index: idx}
			if s.Header != want || !bytes.Equal(s.Payload, payloadFor(idx, 1024)) {
				t.Errorf("stamped=%v: got %+v (%d bytes), want %+v and its payload", stamped, s.Header, len(s.Payload), want)
			}
			s.Release()
		case <-ctx.Done():
			t.Fatalf("stamped=%v: sample %d never arrived", stamped, idx)
		}
	}
	c := StampCost(10)
	if c.Write < 0 || c.CPU < 0 || c.Call < c.Write {
		t.Errorf("stamp cost %+v: want 0 <= Write <= Call", c)
	}
	w.Close()
	var st WriteStamp
	if err := w.WriteStamped(&Header{}, nil, &st); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteStamped after Close: %v", err)
	}
}

// TestWriteBatch checks Queue and Flush: in a batching domain the queued
// samples all arrive, in order and intact, once flushed, and a Write
// after a Queue sends both; without WriteBatch a queued sample arrives
// with no Flush at all.
func TestWriteBatch(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("WriteBatch=%v", batch), func(t *testing.T) {
			cfg := loopbackCfg(t)
			cfg.WriteBatch = batch
			pa, err := NewParticipant(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pa.Close()
			pb, err := NewParticipant(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pb.Close()
			const topic = "dyad_test_batch"
			w, err := pa.NewWriter(topic, QoS{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := pb.NewReader(topic, ReaderOptions{Mode: ReceiveThread, Buffer: 256})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			waitMatched(t, ctx, w, r)
			next := uint64(1)
			expect := func(n int) {
				t.Helper()
				for range n {
					select {
					case s := <-r.C():
						if s.Index != next || !bytes.Equal(s.Payload, payloadFor(next, 200)) {
							t.Fatalf("got sample %d (%d bytes), want %d and its payload", s.Index, len(s.Payload), next)
						}
						s.Release()
						next++
					case <-ctx.Done():
						t.Fatalf("sample %d never arrived", next)
					}
				}
			}
			queue := func(idx uint64) {
				t.Helper()
				if err := w.Queue(&Header{Index: idx}, payloadFor(idx, 200)); err != nil {
					t.Fatal(err)
				}
			}
			// A burst several datagrams long (200-byte samples, 14 KiB
			// datagrams).
			for i := range uint64(200) {
				queue(next + i)
			}
			if batch {
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			expect(200)
			// Write sends what was queued before it.
			queue(next)
			if err := w.Write(&Header{Index: next + 1}, payloadFor(next+1, 200)); err != nil {
				t.Fatal(err)
			}
			expect(2)
			w.Close()
			if err := w.Flush(); !errors.Is(err, ErrClosed) {
				t.Errorf("Flush after Close: %v", err)
			}
		})
	}
}
