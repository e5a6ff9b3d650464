package watch

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/mvcc"
)

// Source is what the hub needs from the MVCC store; *mvcc.Store implements
// it.
type Source interface {
	// History returns the events with revisions in [from, to], at most
	// limit whole revisions, and the last revision it covered; it fails
	// with mvcc.ErrCompacted when from is compacted away.
	History(from, to int64, limit int) ([]mvccpb.Event, int64, error)
	// Range reads keys at a revision (used to fill PrevKv of replayed
	// events).
	Range(key, end []byte, ro mvcc.RangeOptions) (mvcc.RangeResult, int64, error)
	// Revs returns the readable, current and compacted revisions.
	Revs() (readable, current, compacted int64)
}

// Options tune the hub. Zero values take the defaults.
type Options struct {
	// ProgressInterval is the period of progress_notify responses (etcd's
	// --experimental-watch-progress-notify-interval). Default 10 minutes.
	ProgressInterval time.Duration
	// SyncInterval is how often unsynced watchers are retried when there is
	// no other reason to (etcd: 100ms). Default 100ms.
	SyncInterval time.Duration
	// HistoryBatch is the most revisions read from history for one catch-up
	// round (etcd's watchBatchMaxRevs). Default 1000.
	HistoryBatch int
	// MaxWatchersPerSync bounds the unsynced watchers served by one
	// catch-up round (etcd: 512). Default 512.
	MaxWatchersPerSync int
	// Log receives storage errors met while catching up. Default: discard.
	Log *slog.Logger
	// OnUnsync, if set, is called once for every move of a watcher from
	// synced to unsynced (its consumer fell behind, or a revision it is
	// owed was never handed to Notify). It runs with the hub's lock held,
	// on the writer's path: it must be cheap and must not call the hub.
	OnUnsync func()
}

const (
	// AutoWatchID in a create request asks the server to pick the ID.
	AutoWatchID int64 = 0
	// InvalidWatchID is the WatchId of stream-wide progress responses and
	// of failed creates (clientv3.InvalidWatchID).
	InvalidWatchID int64 = -1
)

// Hub delivers events to the watchers of every stream. See the package
// documentation for its states and invariants.
type Hub struct {
	src  Source
	opts Options
	kick chan struct{} // wakes Run: a watcher became unsynced

	mu       sync.Mutex
	notified int64 // last revision handed to Notify
	synced   index
	unsynced map[*watcher]struct{}
	deferred map[*Stream]struct{}  // streams with an unanswered progress request
	progress map[*watcher]struct{} // watchers created with progress_notify
	unsyncs  int64                 // synced -> unsynced moves (tests and metrics)
	// order is deliverLocked's scratch list of the watchers receiving
	// events, kept between calls so that a write allocates no list.
	order []*watcher
	// resetRev, once set by Reset, cancels as compacted every watcher
	// whose next revision is at or below it.
	resetRev int64
}

// NewHub builds a hub over src. The hub starts at src's readable revision:
// create it before the writer starts or at a point where every durable
// revision has been handed out (Notify must then follow without a gap).
func NewHub(src Source, opts Options) *Hub {
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 10 * time.Minute
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = 100 * time.Millisecond
	}
	if opts.HistoryBatch <= 0 {
		opts.HistoryBatch = 1000
	}
	if opts.MaxWatchersPerSync <= 0 {
		opts.MaxWatchersPerSync = 512
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	readable, _, _ := src.Revs()
	return &Hub{
		src:      src,
		opts:     opts,
		kick:     make(chan struct{}, 1),
		notified: readable,
		synced:   newIndex(),
		unsynced: make(map[*watcher]struct{}),
		deferred: make(map[*Stream]struct{}),
		progress: make(map[*watcher]struct{}),
	}
}

// Rev is the last revision handed to Notify.
func (h *Hub) Rev() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notified
}

// Notify hands the hub the events of every revision after the previous
// Notify up to rev, in order, once they are durable. Single writer only.
// Events carry PrevKv; the hub strips it for watchers that did not ask. The
// hub keeps evs: the caller must not change it afterwards. Notify never
// blocks on a consumer.
func (h *Hub) Notify(rev int64, evs []mvccpb.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notifyLocked(h.notified+1, rev, evs)
}

// NotifyFrom is Notify for a writer that holds the events of revisions
// from..rev only. Revisions after the previous Notify and before from
// became visible as well (the writer made them durable without handing
// out their events, as a primary that stepped down does with its
// unacknowledged batches); every synced watcher owed any of them becomes
// unsynced and gets them, with the rest, from history. So every revision
// that becomes visible reaches every watcher that wants it.
func (h *Hub) NotifyFrom(from, rev int64, evs []mvccpb.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notifyLocked(from, rev, evs)
}

func (h *Hub) notifyLocked(from, rev int64, evs []mvccpb.Event) {
	if rev <= h.notified {
		return
	}
	if from > h.notified+1 {
		h.unsyncBeforeLocked(from)
	}
	prev := h.notified
	h.notified = rev
	if h.synced.n > 0 && len(evs) > 0 {
		h.deliverLocked(prev, rev, evs)
	}
	h.retryDeferredLocked()
}

// maxPendingCap bounds the scratch capacity a watcher keeps between writes
// (watcher.pending): a write of up to that many events for one watcher
// allocates no index list.
const maxPendingCap = 64

// deliverLocked queues the events of revisions prev+1..rev on every synced
// watcher that wants them, one response per watcher. It runs on the
// writer's path: it reuses the hub's scratch slices and allocates, per
// receiving watcher, only what the consumer keeps (the response and its
// event slice).
func (h *Hub) deliverLocked(prev, rev int64, evs []mvccpb.Event) {
	order := h.order[:0]
	for i := range evs {
		ev := &evs[i]
		r := ev.Kv.ModRevision
		if r <= prev || r > rev {
			continue
		}
		h.synced.each(ev.Kv.Key, func(w *watcher) {
			if r < w.next || !w.wants(ev) {
				return
			}
			if len(w.pending) == 0 {
				order = append(order, w)
			}
			w.pending = append(w.pending, i)
		})
	}
	var stripped []*mvccpb.Event
	for _, w := range order {
		idx := w.pending
		w.pending = w.pending[:0]
		if cap(idx) > maxPendingCap {
			// A large transaction: do not keep its capacity on the
			// watcher for good.
			w.pending = nil
		}
		out := make([]*mvccpb.Event, len(idx))
		for j, i := range idx {
			if w.prevKV || evs[i].PrevKv == nil {
				out[j] = &evs[i]
				continue
			}
			if stripped == nil {
				stripped = make([]*mvccpb.Event, len(evs))
			}
			if stripped[i] == nil {
				e := evs[i]
				e.PrevKv = nil
				stripped[i] = &e
			}
			out[j] = stripped[i]
		}
		resp := newResponse(rev)
		resp.WatchId, resp.Events, resp.Fragment = w.id, out, w.fragment
		if w.s.trySend(resp) {
			w.sentEvents = true
			w.next = rev + 1
			continue
		}
		// The consumer is behind: owe it everything after prev, from
		// history.
		h.synced.remove(w)
		w.state = stateUnsynced
		w.next = max(w.next, prev+1)
		h.unsynced[w] = struct{}{}
		h.countUnsyncLocked()
		h.wake()
	}
	// Keep the scratch slice's capacity, not the watchers it pointed to.
	clear(order)
	h.order = order[:0]
}

// unsyncBeforeLocked moves every synced watcher that still expects a
// revision below from (from > notified+1) to unsynced: Notify will not
// hand it those events, Run replays them from history (bounded by
// notified, as always).
func (h *Hub) unsyncBeforeLocked(from int64) {
	var owed []*watcher
	h.synced.all(func(w *watcher) {
		if w.next < from {
			owed = append(owed, w)
		}
	})
	for _, w := range owed {
		h.synced.remove(w)
		w.state = stateUnsynced
		// Synced: it has everything up to notified (next may lag behind
		// for a watcher that matched nothing lately).
		w.next = max(w.next, h.notified+1)
		h.unsynced[w] = struct{}{}
		h.countUnsyncLocked()
	}
	if len(owed) > 0 {
		h.wake()
	}
}

// countUnsyncLocked counts one synced -> unsynced move.
func (h *Hub) countUnsyncLocked() {
	h.unsyncs++
	if h.opts.OnUnsync != nil {
		h.opts.OnUnsync()
	}
}

func (h *Hub) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Run catches unsynced watchers up from history, answers deferred progress
// requests and sends periodic progress notifications until ctx is done.
func (h *Hub) Run(ctx context.Context) {
	syncT := time.NewTimer(h.opts.SyncInterval)
	defer syncT.Stop()
	progT := time.NewTicker(h.opts.ProgressInterval)
	defer progT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-progT.C:
			h.progressTick()
			continue
		case <-h.kick:
		case <-syncT.C:
		}
		start := time.Now()
		remaining, moved := h.syncRound()
		h.mu.Lock()
		h.retryDeferredLocked()
		h.mu.Unlock()
		wait := h.opts.SyncInterval
		if remaining > 0 && moved > 0 {
			// More to do: go on after yielding as long as the round took.
			wait = time.Since(start)
		}
		syncT.Reset(wait)
	}
}

type syncItem struct {
	w         *watcher
	next      int64
	compacted bool
	events    []*mvccpb.Event
}

// syncRound serves one batch of unsynced watchers from history. It returns
// how many watchers stay unsynced and how many it moved forward.
func (h *Hub) syncRound() (remaining, moved int) {
	h.mu.Lock()
	to := h.notified
	var items []syncItem
	for w := range h.unsynced {
		if len(w.s.ch) == cap(w.s.ch) {
			continue // nothing could be queued now; don't read for it
		}
		items = append(items, syncItem{w: w, next: w.next})
		if len(items) >= h.opts.MaxWatchersPerSync {
			break
		}
	}
	h.mu.Unlock()
	if len(items) == 0 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.unsynced), 0
	}

	_, _, compactRev := h.src.Revs()
	from := int64(math.MaxInt64)
	for i := range items {
		// etcd cancels a watcher whose next revision is below the
		// compaction point.
		if items[i].next < compactRev || items[i].next <= h.resetRev {
			items[i].compacted = true
		} else {
			from = min(from, items[i].next)
		}
	}
	last := to
	historyOK := true
	if from <= to {
		evs, l, err := h.src.History(from, to, h.opts.HistoryBatch)
		switch {
		case errors.Is(err, mvcc.ErrCompacted):
			// A compaction raced us, or the source refuses from ==
			// compaction point: what it cannot replay is gone.
			_, _, compactRev = h.src.Revs()
			for i := range items {
				if items[i].next <= compactRev {
					items[i].compacted = true
				}
			}
			historyOK = false
		case err != nil:
			h.opts.Log.Error("watch: reading history", "from", from, "to", to, "err", err)
			historyOK = false
		default:
			last = l
			h.fillEvents(items, evs)
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range items {
		it := &items[i]
		w := it.w
		if w.state != stateUnsynced || w.next != it.next {
			continue
		}
		if it.compacted {
			cr := compactRev
			if it.next <= h.resetRev && h.resetRev >= cr {
				// Reset refuses every revision up to resetRev: name the
				// first one it accepts, so that a client resuming from the
				// compact revision it is told is not refused again.
				cr = h.resetRev + 1
			}
			resp := &pb.WatchResponse{Header: header(0), WatchId: w.id, CompactRevision: cr, Canceled: cr != 0}
			if w.s.trySend(resp) {
				delete(h.unsynced, w)
				w.state = stateCompacted
				moved++
			}
			continue
		}
		if !historyOK {
			continue
		}
		if len(it.events) > 0 {
			resp := &pb.WatchResponse{Header: header(to), WatchId: w.id, Events: it.events, Fragment: w.fragment}
			if !w.s.trySend(resp) {
				continue
			}
			w.sentEvents = true
			moved++
		}
		w.next = max(w.next, last+1)
		if w.next > h.notified {
			delete(h.unsynced, w)
			w.state = stateSynced
			h.synced.add(w)
			moved++
		}
	}
	h.retryDeferredLocked()
	return len(h.unsynced), moved
}

// fillEvents picks each item's events out of evs (outside Hub.mu: a
// watcher's range and filters never change) and fills PrevKv for those who
// asked, reading the key at the revision before the event as etcd does.
func (h *Hub) fillEvents(items []syncItem, evs []mvccpb.Event) {
	var withPrev []*mvccpb.Event
	for k := range items {
		it := &items[k]
		if it.compacted {
			continue
		}
		w := it.w
		for i := range evs {
			ev := &evs[i]
			if ev.Kv.ModRevision < it.next || !w.wants(ev) {
				continue
			}
			if !w.prevKV || isCreate(ev) {
				it.events = append(it.events, ev)
				continue
			}
			if withPrev == nil {
				withPrev = make([]*mvccpb.Event, len(evs))
			}
			if withPrev[i] == nil {
				e := *ev
				e.PrevKv = h.prevKV(ev)
				withPrev[i] = &e
			}
			it.events = append(it.events, withPrev[i])
		}
	}
}

func isCreate(ev *mvccpb.Event) bool {
	return ev.Type == mvccpb.PUT && ev.Kv.CreateRevision == ev.Kv.ModRevision
}

func (h *Hub) prevKV(ev *mvccpb.Event) *mvccpb.KeyValue {
	at := ev.Kv.ModRevision - 1
	if at <= 0 {
		return nil
	}
	r, _, err := h.src.Range(ev.Kv.Key, nil, mvcc.RangeOptions{Rev: at})
	if err != nil || len(r.KVs) == 0 {
		return nil // compacted away: etcd sends no PrevKv either
	}
	return &r.KVs[0]
}

// progressTick sends the periodic progress notification of every synced
// progress_notify watcher that was sent no events since the last tick.
func (h *Hub) progressTick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.progress {
		if w.sentEvents {
			w.sentEvents = false
			continue
		}
		if w.state == stateSynced && h.notified >= w.startRev {
			// Dropped when the buffer is full, as in etcd: the next
			// tick tries again.
			w.s.trySend(&pb.WatchResponse{Header: header(h.notified), WatchId: w.id})
		}
	}
}

// progressLocked answers a progress request of s if etcd would: every
// watcher of s is synced and notified has reached its start revision. It
// reports whether the request is settled.
func (h *Hub) progressLocked(s *Stream) bool {
	if len(s.watchers) == 0 {
		return true // etcd settles it without sending anything
	}
	for _, w := range s.watchers {
		if w.state != stateSynced || h.notified < w.startRev {
			return false
		}
	}
	return s.trySend(&pb.WatchResponse{Header: header(h.notified), WatchId: InvalidWatchID})
}

func (h *Hub) retryDeferredLocked() {
	for s := range h.deferred {
		if h.progressLocked(s) {
			s.deferred = false
			delete(h.deferred, s)
		}
	}
}

// dropLocked removes w from every set.
func (h *Hub) dropLocked(w *watcher) {
	switch w.state {
	case stateSynced:
		h.synced.remove(w)
	case stateUnsynced:
		delete(h.unsynced, w)
	}
	delete(h.progress, w)
	w.state = stateGone
}

// Reset follows a replacement of the source's whole state (a replica
// installed a snapshot): the history the watchers were following may not
// continue, so every watcher is cancelled as compacted at the new readable
// revision, and clients re-list, as etcd's clients do after a compaction.
func (h *Hub) Reset() {
	readable, _, _ := h.src.Revs()
	h.mu.Lock()
	var all []*watcher
	h.synced.all(func(w *watcher) { all = append(all, w) })
	for _, w := range all {
		h.synced.remove(w)
		w.state = stateUnsynced
		h.unsynced[w] = struct{}{}
	}
	for w := range h.unsynced {
		if w.next > readable {
			w.next = readable
		}
	}
	h.resetRev = readable
	h.notified = readable
	h.mu.Unlock()
	h.wake()
}
