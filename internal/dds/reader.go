package dds

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ReceiveMode selects how samples get from Cyclone to Go. See doc.go.
type ReceiveMode int

const (
	// ReceiveThread (default): one goroutine locked to its OS thread blocks
	// in a single C call (return previous loan + waitset wait + take) per
	// batch.
	ReceiveThread ReceiveMode = iota
	// ReceiveListener: a C data-available listener on Cyclone's delivery
	// thread takes each batch and calls into Go once per batch.
	ReceiveListener
	// ReceiveNotify: a C data-available listener on Cyclone's delivery
	// thread calls ReaderOptions.Notify and takes nothing; the owner takes
	// with Reader.Take (on that thread or any other). Until it does, the
	// samples stay in the reader's history, bounded by QoS.MaxSamples, so
	// an owner that cannot keep up pushes back on the remote writer and
	// never needs to block Cyclone's thread.
	ReceiveNotify
	// ReceiveWaitSet: no listener and no goroutine; the reader is attached
	// to a WaitSet, whose Wait blocks in C on it (and on the set's other
	// readers and its guard) and takes what arrived. Cyclone's thread
	// calls no Go code.
	ReceiveWaitSet
)

// ReaderOptions configure NewReader.
type ReaderOptions struct {
	QoS
	Mode ReceiveMode
	// Batch is the maximum number of samples per take. Default 64.
	Batch int
	// Buffer is the capacity of the channel returned by C. Default 1024.
	Buffer int
	// Handler, if set, is called synchronously for each sample on the
	// receive thread instead of sending it to C(). It must be quick and must
	// Release the sample (or keep it and Release later). In ReceiveListener
	// mode it runs on Cyclone's delivery thread and blocks all delivery
	// while it runs.
	Handler func(*Sample)
	// Notify (ReceiveNotify only, required) is called on Cyclone's
	// delivery thread when samples arrive, at most once between two
	// Takes: after a notification, a sample that arrives before the next
	// Take does not notify again (that Take gets it; the owner takes until
	// a Take returns fewer than Batch), so a flood costs Cyclone's thread
	// one call into Go per Take. Samples that arrive before
	// NewReader returns may find Take refusing them (it returns 0 until
	// then), so the owner calls Take once after NewReader. Notify must not
	// block on anything that waits for Cyclone's delivery; it may call
	// Take. It is never called after Close returns.
	Notify func()
}

// Sample is one received Envelope. Payload aliases a pooled buffer and is
// valid until Release; the owner must call Release exactly once.
type Sample struct {
	Header
	Payload []byte
	// SourceTime is the writer's timestamp (ns since the Unix epoch, writer's
	// clock). Publication identifies the writer (DDS instance handle).
	SourceTime  int64
	Publication uint64

	buf []byte
	r   *Reader
}

// Release returns the sample and its buffer to the reader's free list.
func (s *Sample) Release() {
	r := s.r
	if r == nil {
		return
	}
	s.r = nil
	s.Payload = nil
	if cap(s.buf) > maxPooledBuf {
		s.buf = nil
	}
	select {
	case r.free <- s:
	default: // free list full: let the GC have it
	}
}

// Free-list bounds: at most freeListLen Samples are kept per reader, and
// buffers above maxPooledBuf (rare, large entries) are not kept, so an idle
// reader retains at most freeListLen*maxPooledBuf bytes.
const (
	freeListLen  = 64
	maxPooledBuf = 256 << 10
)

// ReaderStats counts buffer recycling (for tests and metrics).
type ReaderStats struct {
	Samples uint64 // samples delivered
	Allocs  uint64 // payload buffers allocated (pool miss or too small)
}

// Reader receives Envelopes on one topic. It owns one goroutine
// (ReceiveThread) or one Cyclone listener (ReceiveListener); Close stops it
// and then closes the channel returned by C.
type Reader struct {
	p       *Participant
	handle  C.dds_entity_t
	rx      *C.dyad_rx
	mode    ReceiveMode
	handler func(*Sample)
	ch      chan *Sample
	stop    chan struct{}
	done    chan struct{} // closed when the receive goroutine exits (thread mode)
	cgoh    cgo.Handle

	free    chan *Sample // bounded free list (deterministic, unlike sync.Pool)
	samples atomic.Uint64
	allocs  atomic.Uint64

	// ReceiveNotify: notify is ReaderOptions.Notify; ready is set once
	// handle and rx are final (the listener may fire before that).
	// takeMu serialises Take and Close's teardown of rx, so the batches
	// of concurrent Takes do not interleave; gone is set, before the reader is deleted, so no Take holds a loan of a deleted reader.
	notify func()
	ready  atomic.Bool
	takeMu sync.Mutex
	gone   bool

	// ReceiveWaitSet: ws is the WaitSet r is attached to (nil: none);
	// wsGone is set by Close before it detaches, so no later Attach
	// succeeds. Both under wsMu (lock order: WaitSet.mu -> wsMu).
	wsMu   sync.Mutex
	ws     *WaitSet
	wsGone bool

	closeOnce sync.Once
	closeErr  error
}

// NewReader creates a reader on topic and starts receiving.
func (p *Participant) NewReader(topic string, opt ReaderOptions) (*Reader, error) {
	if opt.Batch <= 0 {
		opt.Batch = 64
	}
	if opt.Buffer <= 0 {
		opt.Buffer = 1024
	}
	r := &Reader{
		p:       p,
		mode:    opt.Mode,
		handler: opt.Handler,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if r.handler == nil && r.mode != ReceiveWaitSet {
		r.ch = make(chan *Sample, opt.Buffer)
	}
	r.free = make(chan *Sample, freeListLen)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	t, err := p.topic(topic, nil)
	if err != nil {
		return nil, err
	}
	q := opt.QoS.c()
	defer C.dds_delete_qos(q)

	switch r.mode {
	case ReceiveNotify:
		if opt.Notify == nil {
			return nil, &Error{Op: "NewReader(ReceiveNotify without Notify)", Code: 4}
		}
		r.notify = opt.Notify
		if err := r.attachListener(t, q, opt.Batch, true); err != nil {
			return nil, err
		}
		r.ready.Store(true)
		close(r.done)
	case ReceiveListener:
		if err := r.attachListener(t, q, opt.Batch, false); err != nil {
			return nil, err
		}
		close(r.done)
	case ReceiveWaitSet:
		h := C.dds_create_reader(p.handle, t, q, nil)
		if h < 0 {
			return nil, ddsErr("dds_create_reader", h)
		}
		r.handle = h
		r.rx = C.dyad_rx_new_ws(h, C.uint32_t(opt.Batch))
		if r.rx == nil {
			C.dds_delete(h)
			return nil, &Error{Op: "dyad_rx_new_ws", Code: 1}
		}
		close(r.done)
	default:
		h := C.dds_create_reader(p.handle, t, q, nil)
		if h < 0 {
			return nil, ddsErr("dds_create_reader", h)
		}
		r.handle = h
		r.rx = C.dyad_rx_new(p.handle, h, C.uint32_t(opt.Batch))
		if r.rx == nil {
			C.dds_delete(h)
			return nil, &Error{Op: "dyad_rx_new", Code: 1}
		}
		go r.loop()
	}
	p.readers[r] = struct{}{}
	return r, nil
}

// attachListener gives r a cgo handle, a listener-mode rx and a Cyclone
// reader on topic t with QoS q whose listener calls back into r: with
// notifyOnly the listener only signals data-available (ReceiveNotify,
// the caller takes), otherwise it takes and delivers samples itself
// (ReceiveListener). On error nothing it allocated is left behind. The
// caller holds r.p.mu; the listener may fire before this returns.
func (r *Reader) attachListener(t C.dds_entity_t, q *C.dds_qos_t, batch int, notifyOnly bool) error {
	r.cgoh = cgo.NewHandle(r)
	r.rx = C.dyad_rx_new_listener(C.uint32_t(batch), C.uintptr_t(r.cgoh))
	if r.rx == nil {
		r.cgoh.Delete()
		return &Error{Op: "dyad_rx_new_listener", Code: 5}
	}
	var l *C.dds_listener_t
	if notifyOnly {
		l = C.dyad_notify_listener(r.rx)
	} else {
		l = C.dyad_listener(r.rx)
	}
	h := C.dds_create_reader(r.p.handle, t, q, l)
	C.dds_delete_listener(l)
	if h < 0 {
		C.dyad_rx_free(r.rx)
		r.cgoh.Delete()
		return ddsErr("dds_create_reader", h)
	}
	r.handle = h
	return nil
}

// headerOf copies the header fields of a received envelope.
func headerOf(env *C.dyad_Envelope) Header {
	return Header{
		Version: uint16(env.version),
		Kind:    uint16(env.kind),
		Flags:   uint32(env.flags),
		Cluster: uint64(env.cluster),
		Node:    uint64(env.node),
		Term:    uint64(env.term),
		Index:   uint64(env.index),
	}
}

// Take takes the samples waiting in a ReceiveNotify reader, up to
// ReaderOptions.Batch, without waiting, and calls fn for each valid one in
// order. payload aliases the sample as Cyclone loaned it (no copy) and is
// valid only until fn returns. It returns the number of samples taken,
// valid or not (0: the reader was empty), or ErrClosed. Concurrent Takes
// are serialised, so each batch is contiguous in the writer's order.
// One cgo call per batch: the loan is returned by the next Take (or
// Close), after fn has seen the samples.
func (r *Reader) Take(fn func(h *Header, payload []byte)) (int, error) {
	if r.mode != ReceiveNotify {
		return 0, &Error{Op: "Take (reader not in ReceiveNotify mode)", Code: 4}
	}
	if !r.ready.Load() {
		return 0, nil // the owner takes again once NewReader returned
	}
	r.takeMu.Lock()
	defer r.takeMu.Unlock()
	if r.gone {
		return 0, ErrClosed
	}
	n := int(C.dyad_take(r.rx, r.handle))
	if n < 0 {
		return 0, ddsErr("dds_take", C.dds_return_t(n))
	}
	r.eachTaken(n, fn)
	return n, nil
}

// eachTaken calls fn for each of the n samples the last take left on
// r.rx's loan that carry data (a disposal has none), and counts them.
// The payload points into the loan: valid only during fn.
func (r *Reader) eachTaken(n int, fn func(h *Header, payload []byte)) int {
	bufs := unsafe.Slice((*unsafe.Pointer)(unsafe.Pointer(r.rx.bufs)), n)
	infos := unsafe.Slice(r.rx.infos, n)
	got := 0
	for i := 0; i < n; i++ {
		if !bool(infos[i].valid_data) {
			continue
		}
		env := (*C.dyad_Envelope)(bufs[i])
		h := headerOf(env)
		var payload []byte
		if ln := int(env.payload._length); ln > 0 {
			payload = unsafe.Slice((*byte)(unsafe.Pointer(env.payload._buffer)), ln)
		}
		r.samples.Add(1)
		got++
		fn(&h, payload)
	}
	return got
}

// C returns the channel samples are delivered on (nil if a Handler is set).
// It is closed by Close.
func (r *Reader) C() <-chan *Sample { return r.ch }

// Stats returns delivery and allocation counters.
func (r *Reader) Stats() ReaderStats {
	return ReaderStats{Samples: r.samples.Load(), Allocs: r.allocs.Load()}
}

// Matched returns the number of writers currently matched.
func (r *Reader) Matched() (int, error) {
	var st C.dds_subscription_matched_status_t
	select {
	case <-r.stop:
		return 0, ErrClosed
	default:
	}
	if rc := C.dds_get_subscription_matched_status(r.handle, &st); rc < 0 {
		return 0, ddsErr("dds_get_subscription_matched_status", rc)
	}
	return int(st.current_count), nil
}

// WaitMatched waits until at least n writers are matched.
func (r *Reader) WaitMatched(ctx context.Context, n int) error {
	return waitUntil(ctx, func() (bool, error) {
		m, err := r.Matched()
		return m >= n, err
	})
}

// loop is the ReceiveThread goroutine. It is locked to its OS thread so the
// blocking C call does not migrate the goroutine between threads; the only
// cgo call per batch is dyad_wait_take.
func (r *Reader) loop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(r.done)
	for {
		n := C.dyad_wait_take(r.rx, C.int64_t(-1)) // DDS_INFINITY is INT64_MAX; any negative is treated as infinite below
		select {
		case <-r.stop:
			C.dyad_return(r.rx)
			return
		default:
		}
		if n < 0 {
			// A DDS error here means the reader is being torn down.
			return
		}
		if !r.deliver(r.rx, int(n)) {
			C.dyad_return(r.rx)
			return
		}
	}
}

// deliver copies n loaned samples out of rx into pooled Samples and hands
// them to the owner. It reads C memory directly (no cgo calls). It returns
// false if the reader is stopping.
func (r *Reader) deliver(rx *C.dyad_rx, n int) bool {
	bufs := unsafe.Slice((*unsafe.Pointer)(unsafe.Pointer(rx.bufs)), n)
	infos := unsafe.Slice(rx.infos, n)
	for i := 0; i < n; i++ {
		info := &infos[i]
		if !bool(info.valid_data) {
			continue
		}
		env := (*C.dyad_Envelope)(bufs[i])
		var s *Sample
		select {
		case s = <-r.free:
		default:
			s = new(Sample)
		}
		s.r = r
		s.Header = headerOf(env)
		s.SourceTime = int64(info.source_timestamp)
		s.Publication = uint64(info.publication_handle)
		ln := int(env.payload._length)
		if cap(s.buf) < ln {
			s.buf = make([]byte, ln, roundUp(ln))
			r.allocs.Add(1)
		}
		s.Payload = s.buf[:ln]
		if ln > 0 {
			copy(s.Payload, unsafe.Slice((*byte)(unsafe.Pointer(env.payload._buffer)), ln))
		}
		r.samples.Add(1)
		if r.handler != nil {
			r.handler(s)
			continue
		}
		select {
		case r.ch <- s:
		case <-r.stop:
			s.Release()
			return false
		}
	}
	return true
}

func roundUp(n int) int {
	c := 256
	for c < n {
		c <<= 1
	}
	return c
}

//export dyadOnNotify
func dyadOnNotify(h C.uintptr_t) {
	r := cgo.Handle(h).Value().(*Reader)
	select {
	case <-r.stop:
		return // closing: the owner takes nothing more
	default:
	}
	r.notify()
}

//export dyadOnData
func dyadOnData(h C.uintptr_t, rx *C.dyad_rx, n C.int32_t) {
	r := cgo.Handle(h).Value().(*Reader)
	r.deliver(rx, int(n))
}

// Close stops delivery, deletes the reader and closes C(). Samples already
// delivered stay valid until Released. Idempotent.
func (r *Reader) Close() error {
	r.closeOnce.Do(func() {
		close(r.stop)
		switch r.mode {
		case ReceiveNotify:
			// First wait out a Take in progress and refuse later ones
			// (no loan may outlive the reader); takeMu is not held across
			// dds_delete, which waits for a running listener callback that
			// may itself be waiting to Take.
			r.takeMu.Lock()
			r.gone = true
			r.takeMu.Unlock()
			r.closeErr = ddsErr("dds_delete(reader)", C.dds_delete(r.handle))
			C.dyad_rx_free(r.rx)
			r.cgoh.Delete()
		case ReceiveWaitSet:
			// Out of the WaitSet first (it waits out a running Wait and
			// returns the loan), then delete: the read condition goes
			// with the reader.
			r.wsMu.Lock()
			r.wsGone = true
			ws := r.ws
			r.ws = nil
			r.wsMu.Unlock()
			if ws != nil {
				ws.detach(r)
			}
			r.closeErr = ddsErr("dds_delete(reader)", C.dds_delete(r.handle))
			C.dyad_rx_free(r.rx)
		case ReceiveListener:
			// dds_delete waits for a running listener callback; deliver
			// returns promptly because stop is closed.
			r.closeErr = ddsErr("dds_delete(reader)", C.dds_delete(r.handle))
			C.dyad_rx_free(r.rx)
			r.cgoh.Delete()
		default:
			C.dyad_wake(r.rx)
			<-r.done
			C.dyad_rx_free(r.rx)
			r.closeErr = ddsErr("dds_delete(reader)", C.dds_delete(r.handle))
		}
		if r.ch != nil {
			close(r.ch)
		}
		r.p.mu.Lock()
		delete(r.p.readers, r)
		r.p.mu.Unlock()
	})
	return r.closeErr
}
