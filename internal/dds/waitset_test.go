package dds

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// waitSetPair is a writer per topic on pa and, on pb, a ReceiveWaitSet
// reader per topic attached to one WaitSet, all matched.
func waitSetPair(t *testing.T, topics []string, batch int) (*WaitSet, []*Writer, []*Reader) {
	t.Helper()
	pa, pb := newLoopbackPair(t)
	ws, err := pb.NewWaitSet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ws_ []*Writer
	var rs []*Reader
	for _, topic := range topics {
		w, err := pa.NewWriter(topic, QoS{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := pb.NewReader(topic, ReaderOptions{Mode: ReceiveWaitSet, Batch: batch})
		if err != nil {
			t.Fatal(err)
		}
		if err := ws.Attach(r); err != nil {
			t.Fatal(err)
		}
		waitMatched(t, ctx, w, r)
		ws_, rs = append(ws_, w), append(rs, r)
	}
	return ws, ws_, rs
}

// One WaitSet over several readers takes every sample of every reader,
// each reader's in the writer's order with intact payloads, also when a
// burst exceeds a take's batch: the rest is taken by later Waits although
// nothing new arrives (the read condition stays triggered while samples
// wait).
func TestWaitSetTakesEveryReaderInOrder(t *testing.T) {
	topics := []string{"dyad_test_ws_a", "dyad_test_ws_b", "dyad_test_ws_c"}
	const batch, total = 4, 30 // total > batch: several takes per reader
	ws, writers, readers := waitSetPair(t, topics, batch)
	idx := map[*Reader]int{}
	for i, r := range readers {
		idx[r] = i
	}
	for i := uint64(1); i <= total; i++ {
		for k, w := range writers {
			if err := w.Write(&Header{Kind: uint16(k), Index: i}, payloadFor(i+uint64(k)<<32, 100+k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	next := make([]uint64, len(readers))
	for k := range next {
		next[k] = 1
	}
	deadline := time.Now().Add(10 * time.Second)
	maxPerWait := 0
	for done := 0; done < len(readers); {
		if time.Now().After(deadline) {
			t.Fatalf("stalled: next sample per reader %v of %d", next, total)
		}
		perReader := make([]int, len(readers))
		if _, err := ws.Wait(time.Second, func(r *Reader, h *Header, p []byte) {
			k := idx[r]
			perReader[k]++
			want := next[k]
			if int(h.Kind) != k || h.Index != want || !bytes.Equal(p, payloadFor(want+uint64(k)<<32, 100+k)) {
				t.Fatalf("reader %d: sample %d arrived as kind %d index %d (%d bytes)", k, want, h.Kind, h.Index, len(p))
			}
			next[k]++
			if next[k] == total+1 {
				done++
			}
		}); err != nil {
			t.Fatal(err)
		}
		for _, n := range perReader {
			maxPerWait = max(maxPerWait, n)
		}
	}
	if maxPerWait > batch {
		t.Errorf("a Wait took %d samples of one reader, more than its batch of %d", maxPerWait, batch)
	}
	for k, r := range readers {
		if got := r.Stats().Samples; got != total {
			t.Errorf("reader %d counted %d samples, want %d", k, got, total)
		}
	}
}

// Wake ends a Wait that has no timeout, from another goroutine, and a Wake
// before a Wait makes that Wait return at once; the Wait that reports a
// wake-up resets it, so the next one waits again.
func TestWaitSetWake(t *testing.T) {
	ws, _, _ := waitSetPair(t, []string{"dyad_test_ws_wake"}, 8)
	nop := func(*Reader, *Header, []byte) {}

	type result struct {
		res WaitResult
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := ws.Wait(-1, nop)
		got <- result{res, err}
	}()
	ws.Wake() // before or during that Wait: either way it returns
	select {
	case r := <-got:
		if r.err != nil || !r.res.Woken || r.res.Samples != 0 {
			t.Fatalf("woken Wait: %+v, %v", r.res, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not end a Wait without timeout")
	}

	ws.Wake()
	ws.Wake() // coalesces with the first
	before := time.Now().UnixNano()
	if res, err := ws.Wait(-1, nop); err != nil || !res.Woken {
		t.Fatalf("Wait after Wake: %+v, %v", res, err)
	}
	if r, after := ws.Returned(), time.Now().UnixNano(); r < before || r > after {
		t.Errorf("Returned %d outside the Wait's [%d, %d]", r, before, after)
	}
	if res, err := ws.Wait(10*time.Millisecond, nop); err != nil || res.Woken || res.Samples != 0 {
		t.Fatalf("Wait after the wake-up was reported: %+v, %v (want a plain timeout)", res, err)
	}
}

// Close ends a Wait blocked without timeout; later Waits, and Attach,
// return ErrClosed, and Wake after Close is harmless. Closing an attached
// reader while its WaitSet waits detaches it; the WaitSet goes on serving
// its other readers.
func TestWaitSetClose(t *testing.T) {
	ws, writers, readers := waitSetPair(t, []string{"dyad_test_ws_close_a", "dyad_test_ws_close_b"}, 8)
	nop := func(*Reader, *Header, []byte) {}

	// A reader closed under a blocked Wait.
	errc := make(chan error, 1)
	go func() {
		for {
			res, err := ws.Wait(-1, nop)
			if err != nil || res.Samples > 0 {
				errc <- err
				return
			}
			// woken by the reader's Close: wait again
		}
	}()
	if err := readers[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := writers[1].Write(&Header{Index: 7}, []byte("still served")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Wait after a reader's Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the remaining reader's sample did not end the Wait")
	}

	// The WaitSet closed under a blocked Wait.
	go func() {
		_, err := ws.Wait(-1, nop)
		errc <- err
	}()
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		// The Wait either returned woken before Close (nil) or found
		// the set closed.
		if err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait ended by Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a Wait without timeout")
	}
	if _, err := ws.Wait(-1, nop); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := ws.Attach(readers[1]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Attach after Close: %v", err)
	}
	ws.Wake()
	if err := readers[1].Close(); err != nil {
		t.Fatalf("closing a reader of a closed WaitSet: %v", err)
	}
}

// Only ReceiveWaitSet readers attach, each to one WaitSet.
func TestWaitSetAttachRules(t *testing.T) {
	ws, _, readers := waitSetPair(t, []string{"dyad_test_ws_rules"}, 8)
	if err := ws.Attach(readers[0]); err == nil {
		t.Fatal("a reader attached twice")
	}
	p := readers[0].p
	r, err := p.NewReader("dyad_test_ws_rules_listener", ReaderOptions{Mode: ReceiveListener})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := ws.Attach(r); err == nil {
		t.Fatal("a ReceiveListener reader attached")
	}
	if _, err := PingPong(context.Background(), p, PerfOptions{Mode: ReceiveWaitSet, Inline: true}, 8, 1); err == nil {
		t.Fatal("PingPong accepted Inline with ReceiveWaitSet")
	}
}

// The perf protocol's ReceiveWaitSet ends (a responder in another process
// answering from its Wait, a pinger sending from its own) complete every
// round trip with intact payloads.
func TestCrossProcessWaitSet(t *testing.T) {
	cfg := loopbackCfg(t)
	opt := PerfOptions{Mode: ReceiveWaitSet, Verify: true}
	resp := startHelper(t, "", "respond", helperJob{Cfg: cfg, Opt: opt})
	if s := resp.line(t, 10*time.Second); s != "ready" {
		t.Fatalf("responder: %q", s)
	}
	p, err := NewParticipant(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sz := range []int{0, 64, 1024, 16384, 65536} {
		st, err := PingPong(ctx, p, opt, sz, 50)
		if err != nil {
			t.Fatalf("size %d: %v", sz, err)
		}
		if st.Count != 50 || st.P50 <= 0 {
			t.Fatalf("size %d: bad stats %+v", sz, st)
		}
	}
	st, err := Throughput(ctx, p, opt, 1024, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Count == 0 {
		t.Fatalf("no throughput: %+v", st)
	}
}

// A muted reader's samples are neither waited for nor taken; they wait in
// its history and the first Wait after unmuting takes them, in order.
func TestWaitSetMute(t *testing.T) {
	ws, writers, readers := waitSetPair(t, []string{"dyad_test_ws_mute_a", "dyad_test_ws_mute_b"}, 8)
	if err := ws.Mute(readers[0], true); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		if err := writers[0].Write(&Header{Index: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := writers[1].Write(&Header{Index: 100}, nil); err != nil {
		t.Fatal(err)
	}
	got := map[*Reader][]uint64{}
	collect := func(r *Reader, h *Header, _ []byte) { got[r] = append(got[r], h.Index) }
	deadline := time.Now().Add(10 * time.Second)
	for len(got[readers[1]]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the unmuted reader's sample never came")
		}
		if _, err := ws.Wait(time.Second, collect); err != nil {
			t.Fatal(err)
		}
	}
	// Reader 0's samples were written first; over loopback they have
	// arrived by the time reader 1's has, or soon after: a few Waits that
	// time out prove nothing of reader 0 is taken while it is muted.
	for range 3 {
		if _, err := ws.Wait(20*time.Millisecond, collect); err != nil {
			t.Fatal(err)
		}
	}
	if len(got[readers[0]]) != 0 {
		t.Fatalf("a muted reader's samples were taken: %v", got[readers[0]])
	}
	if err := ws.Mute(readers[0], false); err != nil {
		t.Fatal(err)
	}
	for len(got[readers[0]]) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after unmuting, took %v of 3", got[readers[0]])
		}
		if _, err := ws.Wait(time.Second, collect); err != nil {
			t.Fatal(err)
		}
	}
	if g := got[readers[0]]; g[0] != 1 || g[1] != 2 || g[2] != 3 {
		t.Fatalf("after unmuting: %v, want [1 2 3]", g)
	}
}
