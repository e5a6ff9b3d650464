package watch

import (
	"bytes"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Errors with etcd's messages (server/mvcc/watcher.go); they travel to the
// client as CancelReason.
var (
	ErrWatcherNotExist    = errors.New("mvcc: watcher does not exist")
	ErrEmptyWatcherRange  = errors.New("mvcc: watcher range is empty")
	ErrWatcherDuplicateID = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
	// ErrStreamClosed: the stream closed while a response was being queued.
	ErrStreamClosed = errors.New("watch: stream closed")
)

// Stream is one etcd Watch stream: a set of watchers with client-visible IDs
// sharing one ordered response channel. Watch, Cancel and RequestProgress
// are meant to be called from one goroutine (the stream's receive loop);
// Close may be called from any, any number of times.
type Stream struct {
	h    *Hub
	ch   chan *pb.WatchResponse
	done chan struct{}

	// Guarded by h.mu.
	watchers map[int64]*watcher
	nextID   int64
	closed   bool
	deferred bool // a progress request waits for the stream to be synced
}

// NewStream opens a stream whose channel buffers bufLen responses (etcd:
// 128). A synced watcher whose response does not fit becomes unsynced.
func (h *Hub) NewStream(bufLen int) *Stream {
	if bufLen < 1 {
		bufLen = 1
	}
	return &Stream{
		h:        h,
		ch:       make(chan *pb.WatchResponse, bufLen),
		done:     make(chan struct{}),
		watchers: make(map[int64]*watcher),
	}
}

// Responses is the stream's response channel, in the order they must reach
// the client. Every response carries a Header with only Revision set. It is
// never closed; stop reading when the stream's owner stops.
//
// An event response of a watcher created with fragment=true has Fragment
// set: it asks the transport to split it if it is too large. The transport
// must clear the flag (or set it on each piece but the last when it splits).
func (s *Stream) Responses() <-chan *pb.WatchResponse { return s.ch }

func (s *Stream) trySend(r *pb.WatchResponse) bool {
	select {
	case s.ch <- r:
		return true
	default:
		return false
	}
}

// sendCtrl queues a control response, waiting for room unless the stream
// closes first. Never called with h.mu held.
func (s *Stream) sendCtrl(r *pb.WatchResponse) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.ch <- r:
		return true
	case <-s.done:
		return false
	}
}

// Watch creates a watcher as etcd does for a WatchCreateRequest and queues
// its Created response, which precedes anything else the watcher gets. On
// failure it queues etcd's failure response (WatchId -1, Created, Canceled,
// CancelReason) and returns the error.
//
// Key "" means "\x00"; RangeEnd "" watches Key alone, "\x00" every key >=
// Key. WatchId 0 picks the lowest free ID counting from the last one picked
// (etcd's rule); another ID must be free. StartRevision 0 means the next
// revision, a past one replays history, a future one waits for it.
func (s *Stream) Watch(req *pb.WatchCreateRequest) (int64, error) {
	h := s.h
	key := append([]byte(nil), req.Key...)
	if len(key) == 0 {
		key = []byte{0}
	}
	var end []byte
	switch {
	case len(req.RangeEnd) == 0:
	case len(req.RangeEnd) == 1 && req.RangeEnd[0] == 0:
		end = []byte{}
	default:
		end = append([]byte(nil), req.RangeEnd...)
	}

	h.mu.Lock()
	hdr := h.notified
	fail := func(err error) (int64, error) {
		h.mu.Unlock()
		s.sendCtrl(&pb.WatchResponse{
			Header:       header(hdr),
			WatchId:      InvalidWatchID,
			Created:      true,
			Canceled:     true,
			CancelReason: err.Error(),
		})
		return InvalidWatchID, err
	}
	if req.StartRevision < 0 {
		// etcd 3.5 accepted this and never delivered anything; later
		// etcd refuses it this way.
		return fail(rpctypes.ErrCompacted)
	}
	if len(end) != 0 && bytes.Compare(key, end) >= 0 {
		return fail(ErrEmptyWatcherRange)
	}
	if s.closed {
		return fail(ErrEmptyWatcherRange) // etcd's answer on a closed stream
	}
	id := req.WatchId
	if id == AutoWatchID {
		for s.watchers[s.nextID] != nil {
			s.nextID++
		}
		id = s.nextID
		s.nextID++
	} else if _, ok := s.watchers[id]; ok {
		return fail(ErrWatcherDuplicateID)
	}
	start := req.StartRevision
	if start == 0 {
		start = hdr + 1
	}
	// startRev keeps what the client asked for: a watch "from now" (0) is
	// never ahead of the store, so etcd's progress rule (no notification
	// while the store is behind a watcher's start) does not hold it back.
	// next is where delivery begins.
	w := &watcher{
		s:              s,
		id:             id,
		key:            key,
		end:            end,
		startRev:       req.StartRevision,
		next:           start,
		prevKV:         req.PrevKv,
		fragment:       req.Fragment,
		progressNotify: req.ProgressNotify,
		state:          stateCreating,
	}
	for _, f := range req.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	s.watchers[id] = w
	h.mu.Unlock()

	if !s.sendCtrl(&pb.WatchResponse{Header: header(hdr), WatchId: id, Created: true}) {
		return id, ErrStreamClosed
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if w.state != stateCreating {
		return id, nil // canceled or closed meanwhile
	}
	if w.next > h.notified {
		w.state = stateSynced
		h.synced.add(w)
	} else {
		w.state = stateUnsynced
		h.unsynced[w] = struct{}{}
		h.wake()
	}
	if w.progressNotify {
		h.progress[w] = struct{}{}
	}
	return id, nil
}

// Cancel removes watcher id and queues its Canceled response after
// everything already queued for it. Unknown IDs get ErrWatcherNotExist and
// no response, as in etcd.
func (s *Stream) Cancel(id int64) error {
	h := s.h
	h.mu.Lock()
	w, ok := s.watchers[id]
	if !ok || s.closed {
		h.mu.Unlock()
		return ErrWatcherNotExist
	}
	h.dropLocked(w)
	delete(s.watchers, id)
	hdr := h.notified
	if s.deferred && h.progressLocked(s) {
		s.deferred = false
		delete(h.deferred, s)
	}
	h.mu.Unlock()
	if !s.sendCtrl(&pb.WatchResponse{Header: header(hdr), WatchId: id, Canceled: true}) {
		return ErrStreamClosed
	}
	return nil
}

// RequestProgress asks for a stream-wide progress response (WatchId -1,
// header revision = the hub's notified revision). It is sent at once if
// every watcher is synced and past its start revision, else as soon as
// that holds; requests made while one is pending are merged into it.
func (s *Stream) RequestProgress() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed || s.deferred {
		return
	}
	if !h.progressLocked(s) {
		s.deferred = true
		h.deferred[s] = struct{}{}
	}
}

// Close removes every watcher of the stream and releases anyone blocked
// queueing a control response. Idempotent.
func (s *Stream) Close() {
	h := s.h
	h.mu.Lock()
	if s.closed {
		h.mu.Unlock()
		return
	}
	s.closed = true
	for id, w := range s.watchers {
		h.dropLocked(w)
		delete(s.watchers, id)
	}
	s.deferred = false
	delete(h.deferred, s)
	h.mu.Unlock()
	close(s.done)
}
