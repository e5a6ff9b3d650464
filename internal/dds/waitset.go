package dds

/*
#include "shim.h"
*/
import "C"

import (
	"sync"
	"time"
)

// MaxWaitSetReaders is the most readers one WaitSet waits on.
const MaxWaitSetReaders = C.DYAD_WS_MAX

// WaitSet lets one goroutine wait in C for samples on several
// ReceiveWaitSet readers and for Wake, and take what arrived, in one cgo
// call per wake-up (Wait): Cyclone's receive thread only signals a
// condition variable, with no call into Go and no goroutine for the Go
// scheduler to wake. The waiting goroutine's thread blocks in the kernel
// meanwhile, which costs the process one OS thread while it waits.
//
// Each reader waits through a read condition over all its samples, which
// stays triggered while the reader holds one: a Wait that took a full
// batch (ReaderOptions.Batch) leaves the rest for the next Wait, which
// returns at once. Samples never wait for an earlier Wait's consumer.
//
// Wait must not be called by two goroutines at once; Wake may be called
// from any goroutine at any time, also before or after Close.
type WaitSet struct {
	p  *Participant
	ws *C.dyad_ws

	// mu is held across Wait (the blocking C call) and by Attach, detach
	// and Close (control), which wake a running Wait with the guard first,
	// so they wait at most until it returns. A Wait does not start while
	// a control operation waits for mu (pending, under gate; cleared is
	// broadcast when it drops to 0): a consumer that calls Wait again at
	// once would otherwise take mu back before the woken control
	// operation and block in C with the guard already consumed. Lock
	// order: gate (leaf, never held with another lock); WaitSet.mu ->
	// Reader.wsMu, WaitSet.mu -> Participant.mu.
	gate    sync.Mutex
	pending int
	cleared *sync.Cond // on gate
	mu      sync.Mutex
	readers []*Reader // index = attach argument in C (dyad_ws.rx)
	closed  bool
	// freed guards ws against Wake after Close: Wake read-holds it.
	freed sync.RWMutex
	gone  bool
}

// NewWaitSet creates a waitset on p with no reader attached.
func (p *Participant) NewWaitSet() (*WaitSet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	ws := C.dyad_ws_new(p.handle)
	if ws == nil {
		return nil, &Error{Op: "dyad_ws_new", Code: 1}
	}
	w := &WaitSet{p: p, ws: ws}
	w.cleared = sync.NewCond(&w.gate)
	p.waitsets[w] = struct{}{}
	return w, nil
}

// control locks mu for Attach, detach or Close: it wakes a running Wait
// and keeps new Waits from starting until it holds mu.
func (w *WaitSet) control() {
	if w.mu.TryLock() {
		return // no Wait runs: nothing to wake
	}
	w.gate.Lock()
	w.pending++
	w.gate.Unlock()
	w.Wake()
	w.mu.Lock()
	w.gate.Lock()
	if w.pending--; w.pending == 0 {
		w.cleared.Broadcast()
	}
	w.gate.Unlock()
}

// Attach adds r (a ReceiveWaitSet reader of the same participant, attached
// to no other WaitSet) to the readers w waits on.
func (w *WaitSet) Attach(r *Reader) error {
	if r.mode != ReceiveWaitSet {
		return &Error{Op: "WaitSet.Attach (reader not in ReceiveWaitSet mode)", Code: 4}
	}
	w.control()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	r.wsMu.Lock()
	defer r.wsMu.Unlock()
	if r.wsGone {
		return ErrClosed
	}
	if r.ws != nil {
		return &Error{Op: "WaitSet.Attach (reader already attached)", Code: 4}
	}
	if rc := C.dyad_ws_attach(w.ws, r.rx); rc < 0 {
		return ddsErr("dds_waitset_attach", rc)
	}
	w.readers = append(w.readers, r)
	r.ws = w
	return nil
}

// detach removes r; Reader.Close calls it (not holding r.wsMu: the lock
// order is WaitSet.mu -> Reader.wsMu) before it deletes the reader, so that
// no loan or pointer of r's stays in C.
func (w *WaitSet) detach(r *Reader) {
	w.control()
	defer w.mu.Unlock()
	if w.closed {
		return // Close detached everything
	}
	for i, x := range w.readers {
		if x != r {
			continue
		}
		C.dyad_ws_detach(w.ws, r.rx)
		// C moved its last reader into the hole; mirror it.
		last := len(w.readers) - 1
		w.readers[i] = w.readers[last]
		w.readers = w.readers[:last]
		return
	}
}

// Mute stops (mute) or resumes waiting on r, an attached reader: while
// muted, Wait neither returns for r's samples nor takes them, so they stay
// in r's history (bounded by QoS.MaxSamples, which then holds back the
// remote writer). An owner that cannot accept more of one reader's
// samples mutes it instead of making every Wait return at once.
func (w *WaitSet) Mute(r *Reader, mute bool) error {
	w.control()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	m := C.int(0)
	if mute {
		m = 1
	}
	return ddsErr("dyad_ws_mute", C.dyad_ws_mute(w.ws, r.rx, m))
}

// Wake makes the current or the next Wait return (Woken set): a guard
// condition, level-triggered, reset by the Wait that reports it. Wakes
// before that Wait coalesce into one.
func (w *WaitSet) Wake() {
	w.freed.RLock()
	defer w.freed.RUnlock()
	if !w.gone {
		C.dyad_ws_wake(w.ws)
	}
}

// WaitResult is what one Wait did.
type WaitResult struct {
	Woken   bool // Wake was called since the previous Wait
	Samples int  // valid samples passed to fn
}

// Wait blocks until an attached reader holds a sample, Wake is called, or
// timeout passes (negative: no timeout), then takes up to
// ReaderOptions.Batch samples of every reader that holds one and calls fn
// for each valid sample, reader by reader, each reader's in the writer's
// order. All of it is one cgo call; fn runs afterwards in Go on the
// caller's goroutine. payload aliases Cyclone's loan and is valid only
// until fn returns (the loans are returned by the next Wait, a detach or
// Close). fn must not call Wait, Attach or Close on w, nor Close one of
// its readers. It returns ErrClosed once w is closed.
func (w *WaitSet) Wait(timeout time.Duration, fn func(r *Reader, h *Header, payload []byte)) (WaitResult, error) {
	w.gate.Lock()
	for w.pending > 0 {
		w.cleared.Wait()
	}
	w.gate.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return WaitResult{}, ErrClosed
	}
	ns := int64(-1)
	if timeout >= 0 {
		ns = int64(timeout)
	}
	n := C.dyad_ws_wait_take(w.ws, C.int64_t(ns))
	if n < 0 {
		return WaitResult{}, ddsErr("dds_waitset_wait", C.dds_return_t(n))
	}
	res := WaitResult{Woken: w.ws.woken != 0}
	if n == 0 {
		return res, nil
	}
	for _, r := range w.readers {
		k := int(r.rx.outstanding)
		if k <= 0 {
			continue
		}
		res.Samples += r.eachTaken(k, func(h *Header, payload []byte) { fn(r, h, payload) })
	}
	return res, nil
}

// Returned is when the latest Wait's wait in C returned, before its takes
// (wall clock, ns since the Unix epoch, as time.Now().UnixNano()): with a
// stamp taken when fn runs, it splits the wake-up in C from the takes and
// the return to Go. Instrumentation (dyad perf); only the goroutine that
// calls Wait may call it, during fn or after Wait.
func (w *WaitSet) Returned() int64 {
	w.freed.RLock()
	defer w.freed.RUnlock()
	if w.gone {
		return 0
	}
	return int64(w.ws.returned_ns)
}

// Close wakes and waits out a running Wait, returns every loan, detaches
// the readers (they stay open; Close them separately) and deletes the
// waitset. Idempotent.
func (w *WaitSet) Close() error {
	w.control()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	for _, r := range w.readers {
		r.wsMu.Lock()
		r.ws = nil
		r.wsMu.Unlock()
	}
	w.readers = nil
	w.freed.Lock()
	w.gone = true
	C.dyad_ws_free(w.ws) // returns the loans, deletes the waitset and guard
	w.ws = nil
	w.freed.Unlock()
	w.p.mu.Lock()
	delete(w.p.waitsets, w)
	w.p.mu.Unlock()
	return nil
}
