package ddsnet

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/dyad-db/dyad/internal/transport"
)

// A consumer that releases what it is done with gets later batches in the
// storage of released ones, and never in that of a message it kept: the
// kept messages' payloads stay as they arrived while dozens of later
// batches go through released buffers, and a held message stays intact
// until its own release. In race builds a batch's buffer is
// poisoned the moment its last message is released, so a released
// payload that someone still read would show poisonByte (checked here).
func TestReleasedBatchesReusedKeptOnesIntact(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waitSet bool
	}{{"notify", false}, {"waitset", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := waitSetConfig() // Batch 8
			cfg.WaitSet = tc.waitSet
			// A consumer with room for two batches: the Net takes the
			// next batches only as it releases.
			g := &gate{got: make(chan *transport.Message, 100000), room: 16}
			a, b := batchPair(t, cfg, g)
			payload := func(i int) []byte {
				return []byte(fmt.Sprintf("message %04d %s", i, bytes.Repeat([]byte{byte(i)}, 48)))
			}
			send := func(from, to int) {
				for i := from; i < to; i++ {
					if err := a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: payload(i)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			const keep, total = 20, 600
			send(0, keep)
			var kept []*transport.Message
			keptBufs := map[*rxBuf]bool{}
			for range keep {
				m := next(t, b, g)
				kept = append(kept, m)
				keptBufs[m.Recv.(*rxBuf)] = true
			}
			send(keep, total)
			seen := map[*rxBuf]bool{} // the buffers batches were taken into
			batches, poisoned := 0, 0
			// The consumer holds the newest messages, more than a batch,
			// and releases the oldest: a buffer reused before its batch's
			// last release would change a held message before its check.
			var held []*transport.Message
			release := func() {
				m := held[0]
				held = held[1:]
				if !bytes.Equal(m.Payload, payload(int(m.Index))) {
					t.Fatalf("message %d changed before its release: %q", m.Index, m.Payload)
				}
				rb := m.Recv.(*rxBuf)
				alias := m.Payload
				m.Release()
				if m.Recv != nil {
					t.Fatal("Release left Recv set")
				}
				if rb.refs.Load() != 0 {
					return
				}
				batches++ // its last message
				if poisonReleased {
					// Nothing takes into the buffer before the next
					// Resume or Wait.
					if bytes.Count(alias, []byte{poisonByte}) != len(alias) {
						t.Fatalf("message %d: a released batch's payload was not poisoned: %q", m.Index, alias)
					}
					poisoned++
				}
			}
			for i := keep; i < total; i++ {
				m := next(t, b, g)
				if m.Index != uint64(i) || !bytes.Equal(m.Payload, payload(i)) {
					t.Fatalf("message %d arrived as %d: %q", i, m.Index, m.Payload)
				}
				rb := m.Recv.(*rxBuf)
				if keptBufs[rb] {
					t.Fatalf("message %d was taken into the buffer of a kept message", i)
				}
				seen[rb] = true
				if held = append(held, m); len(held) > 12 {
					release()
				}
			}
			for len(held) > 0 {
				release()
			}
			// Dozens of batches of a steady stream: unless the buffers
			// were reused they would be as many as the batches.
			if len(seen) >= batches {
				t.Errorf("%d batches in %d buffers: none reused", batches, len(seen))
			}
			if poisonReleased && poisoned == 0 {
				t.Error("no released batch was poisoned in a race build")
			}
			for i, m := range kept {
				if m.Index != uint64(i) || !bytes.Equal(m.Payload, payload(i)) {
					t.Errorf("kept message %d changed while later batches were released: %d %q", i, m.Index, m.Payload)
				}
			}
			t.Logf("%d batches in %d buffers, %d poisoned at their last release", batches, len(seen), poisoned)
		})
	}
}

// An rxBuf goes back to its pool only at its batch's last release, and a
// release more than the batch has messages panics instead of handing the
// storage out twice.
func TestRxBufReleaseCountsMessages(t *testing.T) {
	for _, tc := range []struct {
		name     string
		msgs     int
		releases int
		panics   bool
	}{
		{"one of two", 2, 1, false},
		{"both", 2, 2, false},
		{"one too many", 2, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool sync.Pool
			rb := &rxBuf{pool: &pool, b: append(make([]byte, 0, 16), "payload"...)}
			rb.refs.Store(int32(tc.msgs))
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				for range tc.releases {
					rb.Release()
				}
				return false
			}()
			if panicked != tc.panics {
				t.Fatalf("panicked %v, want %v", panicked, tc.panics)
			}
			pooled := tc.releases >= tc.msgs
			if got := len(rb.b) == 0; got != pooled {
				t.Errorf("buffer emptied for the pool: %v, want %v", got, pooled)
			}
		})
	}
}
