package dds

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"slices"
	"sync"
	"time"
	"unsafe"
)

// EnvelopeVersion is the wire version this package writes when
// Header.Version is zero. Readers deliver whatever version arrives; the
// owner (internal/repl) decides what it accepts.
const EnvelopeVersion = 1

// Header is the fixed part of the dyad::Envelope sample. internal/dds gives
// no meaning to any field except Version's default.
type Header struct {
	Version uint16
	Kind    uint16
	Flags   uint32
	Cluster uint64
	Node    uint64
	Term    uint64
	Index   uint64
}

// Writer publishes Envelopes on one topic. Write is safe for concurrent use
// (Cyclone serialises writers internally); Close must not race with Write.
type Writer struct {
	p      *Participant
	handle C.dds_entity_t

	mu     sync.RWMutex // write-held by Close; read-held by Write so Close waits for in-flight writes
	closed bool
}

// NewWriter creates a writer on topic with qos.
func (p *Participant) NewWriter(topic string, qos QoS) (*Writer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	t, err := p.topic(topic, nil)
	if err != nil {
		return nil, err
	}
	q := qos.c()
	defer C.dds_delete_qos(q)
	h := C.dds_create_writer(p.handle, t, q, nil)
	if h < 0 {
		return nil, ddsErr("dds_create_writer", h)
	}
	w := &Writer{p: p, handle: h}
	p.writers[w] = struct{}{}
	return w, nil
}

// Write publishes one sample whose payload is payload (not retained after
// Write returns: dds_write serialises synchronously). It blocks at most the
// writer's MaxBlockingTime when the history is at the high-water mark and
// then returns an error for which errors.Is(err, ErrTimeout) holds; the
// sample was not sent. One cgo call per Write. In a participant with
// Config.WriteBatch, Write also sends what Queue batched before it, in
// the same call: a Write is always on the wire when it returns.
func (w *Writer) Write(h *Header, payload []byte) error {
	return w.write(h, payload, nil, w.p.cfg.WriteBatch)
}

// Queue is Write without the send, in a participant with
// Config.WriteBatch: the sample is serialised into the writer's history
// and batched with the samples queued after it into as few datagrams as
// Cyclone's MaxMessageSize allows, which go out on the next Flush or
// Write, or as soon as a datagram is full (or the writer reaches its
// high-water mark). A caller that queues must Flush when it has nothing
// more to write at once: otherwise the samples reach the peer only
// through the reliable protocol's repair (a heartbeat announces them, the
// peer asks), a heartbeat interval or more later. Without WriteBatch,
// Queue is Write. One cgo call.
func (w *Writer) Queue(h *Header, payload []byte) error {
	return w.write(h, payload, nil, false)
}

// Flush sends what Queue batched on this writer (dds_write_flush); with
// nothing batched it sends nothing. One cgo call.
func (w *Writer) Flush() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	C.dds_write_flush(w.handle)
	return nil
}

// WriteStamp is what WriteStamped measured of one write. Instrumentation
// (dyad perf): it tells the binding's part of a write from Cyclone's and,
// within Cyclone's, time on the CPU from time off it.
type WriteStamp struct {
	// Call is the cgo call seen from Go: from just before it to just
	// after it returned (entry, the C-side stamps and dds_write).
	Call time.Duration
	// Write is dds_write's wall time, stamped in C on the calling
	// thread; the getrusage and CPU-clock reads of the stamping lie
	// inside it (StampCost), the wall clock's own reads outside.
	Write time.Duration
	// CPU is the calling thread's CPU time inside dds_write: Cyclone's
	// serialisation and send and the kernel's work in the thread's
	// syscalls (over a veth pair, the delivery into the peer's socket).
	// Write - CPU is time the thread was off the CPU.
	CPU time.Duration
	// Voluntary and Involuntary count the thread's context switches
	// inside dds_write: it blocked (a lock, a full socket) or was
	// preempted.
	Voluntary, Involuntary int64
}

// StampCost is what WriteStamped's own stamping adds to each of its
// figures (the medians of n stampings around no write, on the caller's
// thread): Call, Write and CPU include it.
func StampCost(n int) WriteStamp {
	var hdr C.dyad_hdr
	var calls, walls, cpus []int64
	for range max(n, 1) {
		var ws C.dyad_wstamp
		t0 := time.Now()
		C.dyad_write_stamped(0, &hdr, nil, 0, 0, &ws)
		calls = append(calls, int64(time.Since(t0)))
		walls, cpus = append(walls, int64(ws.wall_ns)), append(cpus, int64(ws.cpu_ns))
	}
	med := func(v []int64) int64 { slices.Sort(v); return v[len(v)/2] }
	return WriteStamp{Call: time.Duration(med(calls)), Write: time.Duration(med(walls)), CPU: time.Duration(med(cpus))}
}

// WriteStamped is Write measuring the write into st (a few clock reads
// and two getrusage calls more than Write; the flush of a batching
// participant is inside the measured write).
func (w *Writer) WriteStamped(h *Header, payload []byte, st *WriteStamp) error {
	return w.write(h, payload, st, w.p.cfg.WriteBatch)
}

// write writes one sample and, with flush, sends what the writer batched.
func (w *Writer) write(h *Header, payload []byte, st *WriteStamp, flush bool) error {
	hdr := C.dyad_hdr{
		version: C.uint16_t(h.Version),
		kind:    C.uint16_t(h.Kind),
		flags:   C.uint32_t(h.Flags),
		cluster: C.uint64_t(h.Cluster),
		node:    C.uint64_t(h.Node),
		term:    C.uint64_t(h.Term),
		index:   C.uint64_t(h.Index),
	}
	if hdr.version == 0 {
		hdr.version = EnvelopeVersion
	}
	var ptr unsafe.Pointer
	if len(payload) > 0 {
		ptr = unsafe.Pointer(unsafe.SliceData(payload))
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	var fl C.int
	if flush {
		fl = 1
	}
	if st == nil {
		return ddsErr("dds_write", C.dyad_write(w.handle, &hdr, ptr, C.uint32_t(len(payload)), fl))
	}
	var ws C.dyad_wstamp
	t0 := time.Now()
	rc := C.dyad_write_stamped(w.handle, &hdr, ptr, C.uint32_t(len(payload)), fl, &ws)
	*st = WriteStamp{Call: time.Since(t0), Write: time.Duration(ws.wall_ns), CPU: time.Duration(ws.cpu_ns),
		Voluntary: int64(ws.nvcsw), Involuntary: int64(ws.nivcsw)}
	return ddsErr("dds_write", rc)
}

// WaitForAcks waits up to timeout until every reliable reader matched has
// acknowledged every sample written (dds_wait_for_acks). It returns nil
// then, an error for which errors.Is(err, ErrTimeout) holds otherwise. A
// writer at its high-water mark takes samples again once this returns nil;
// unlike a Write that times out, it logs nothing. Close waits for it.
func (w *Writer) WaitForAcks(timeout time.Duration) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	return ddsErr("dds_wait_for_acks", C.dds_wait_for_acks(w.handle, C.dds_duration_t(timeout)))
}

// Matched returns the number of remote (or local) readers currently matched.
func (w *Writer) Matched() (int, error) {
	var st C.dds_publication_matched_status_t
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return 0, ErrClosed
	}
	if rc := C.dds_get_publication_matched_status(w.handle, &st); rc < 0 {
		return 0, ddsErr("dds_get_publication_matched_status", rc)
	}
	return int(st.current_count), nil
}

// WaitMatched waits until at least n readers are matched.
func (w *Writer) WaitMatched(ctx context.Context, n int) error {
	return waitUntil(ctx, func() (bool, error) {
		m, err := w.Matched()
		return m >= n, err
	})
}

// Close deletes the writer. Unacknowledged samples are discarded by
// Cyclone (the owner's protocol, not DDS, is responsible for delivery).
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	rc := C.dds_delete(w.handle)
	w.mu.Unlock()
	w.p.mu.Lock()
	delete(w.p.writers, w)
	w.p.mu.Unlock()
	return ddsErr("dds_delete(writer)", rc)
}
