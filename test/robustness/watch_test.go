package robustness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// event is one watch event as the validators compare it.
type event struct {
	Rev    int64 // mod revision (of the delete, for a delete)
	Delete bool
	Key    string
	Value  string
}

func (e event) String() string {
	if e.Delete {
		return fmt.Sprintf("%d:del(%s)", e.Rev, e.Key)
	}
	return fmt.Sprintf("%d:put(%s=%s)", e.Rev, e.Key, e.Value)
}

func toEvent(ev *clientv3.Event) event {
	e := event{Rev: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value)}
	if ev.Type == mvccpb.DELETE {
		e.Delete = true
	}
	return e
}

// response is one watch response as received. A response with Skip set
// is not one: it marks where the watcher, told its next revision was
// compacted, resumed from the compaction revision Header instead.
type response struct {
	Header int64 // header revision
	Events []event
	Skip   bool
}

// watchRecord is everything one watcher received, in order, across the
// re-watches it made after its stream ended.
type watchRecord struct {
	mu        sync.Mutex
	responses []response
	rewatches int // streams that ended (cancelled, compacted, closed) and were resumed
	compacted int // of which ended as compacted
	// skipped counts resumptions that had to jump ahead to the compaction
	// revision (the revisions in between are gone from the store): gaps
	// the client was told about.
	skipped int
	errs    []string
}

func (w *watchRecord) snapshot() ([]response, int, int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	errs := append([]string(nil), w.errs...)
	if w.skipped > 0 {
		errs = append(errs, fmt.Sprintf("%d resumptions jumped to the compaction revision", w.skipped))
	}
	return append([]response(nil), w.responses...), w.rewatches, w.compacted, errs
}

// compactedError is readHistory's error when from is compacted.
type compactedError struct{ rev int64 }

func (e compactedError) Error() string {
	return fmt.Sprintf("history compacted up to revision %d", e.rev)
}

// lastRev is the newest event revision received (from-1 if none).
func (w *watchRecord) lastRev(from int64) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	last := from - 1
	for _, r := range w.responses {
		if r.Skip {
			last = max(last, r.Header-1)
		}
		for _, e := range r.Events {
			last = e.Rev
		}
	}
	return last
}

// watch records every event under the whole key space from revision from
// until ctx is done. A stream that ends is resumed from the revision after
// the last event received, as a client (an informer) must; only when that
// revision itself is compacted (two compacted answers in a row for it) does
// it jump to the compaction revision, as a client re-listing would.
func watch(ctx context.Context, cli *clientv3.Client, from int64, rec *watchRecord) {
	next := from
	// strikes counts the compacted answers in a row for strikeAt;
	// compactRev is the compaction revision of the last one.
	var strikes int
	var strikeAt, compactRev int64
	for ctx.Err() == nil {
		if strikes >= 2 && strikeAt == next && compactRev > next {
			next, strikes = compactRev, 0
			rec.mu.Lock()
			rec.skipped++
			rec.responses = append(rec.responses, response{Header: next, Skip: true})
			rec.mu.Unlock()
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(next))
		for resp := range ch {
			if err := resp.Err(); err != nil {
				rec.mu.Lock()
				if resp.CompactRevision != 0 || errors.Is(err, rpctypes.ErrCompacted) {
					rec.compacted++
					if strikeAt != next {
						strikeAt, strikes = next, 0
					}
					strikes++
					compactRev = resp.CompactRevision
				}
				if len(rec.errs) < 20 {
					rec.errs = append(rec.errs, err.Error())
				}
				rec.mu.Unlock()
				break
			}
			if len(resp.Events) == 0 {
				continue // progress notification
			}
			r := response{Header: resp.Header.Revision}
			for _, ev := range resp.Events {
				r.Events = append(r.Events, toEvent(ev))
			}
			rec.mu.Lock()
			rec.responses = append(rec.responses, r)
			rec.mu.Unlock()
			next = r.Events[len(r.Events)-1].Rev + 1
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		rec.mu.Lock()
		rec.rewatches++
		rec.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readHistory returns every event in (from-1, to] from cli: the store's
// history, against which the watchers are judged.
func readHistory(ctx context.Context, cli *clientv3.Client, from, to int64) ([]response, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []response
	ch := cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(from))
	last := from - 1
	for last < to {
		resp, ok := <-ch
		if !ok {
			return nil, fmt.Errorf("history watch from %d closed at %d of %d: %v", from, last, to, ctx.Err())
		}
		if err := resp.Err(); err != nil {
			if resp.CompactRevision > 0 {
				return nil, compactedError{rev: resp.CompactRevision}
			}
			return nil, fmt.Errorf("history watch from %d: %w", from, err)
		}
		if len(resp.Events) == 0 {
			continue
		}
		r := response{Header: resp.Header.Revision}
		for _, ev := range resp.Events {
			if e := toEvent(ev); e.Rev <= to {
				r.Events = append(r.Events, e)
			}
		}
		if len(r.Events) > 0 {
			out = append(out, r)
		}
		last = resp.Events[len(resp.Events)-1].Kv.ModRevision
	}
	return out, nil
}

// byRevision groups events by revision.
func byRevision(rs []response) map[int64][]event {
	m := map[int64][]event{}
	for _, r := range rs {
		for _, e := range r.Events {
			m[e.Rev] = append(m[e.Rev], e)
		}
	}
	return m
}

// position returns the index of the first of revs at or above rev.
func position(revs []int64, rev int64) int {
	for i, r := range revs {
		if r >= rev {
			return i
		}
	}
	return len(revs)
}

// revisions lists the revisions of rs in order of appearance.
func revisions(rs []response) []int64 {
	var revs []int64
	for _, r := range rs {
		for _, e := range r.Events {
			if len(revs) == 0 || revs[len(revs)-1] != e.Rev {
				revs = append(revs, e.Rev)
			}
		}
	}
	return revs
}

// validateWatch checks what one watcher received. Always: events are
// ordered (revisions never decrease, and increase from one response to the
// next), no event comes twice, every revision arrives whole in one
// response, and no response header is older than what the watcher already
// saw. With ref (the store's history over the same range): every event
// received is the store's, and the revisions received are exactly the
// store's from the first one on, with no gap but where the watcher was told
// its next revision was compacted and resumed at the compaction revision
// (a Skip marker: the signalled gap an informer answers by re-listing).
func validateWatch(rs []response, ref []response) []string {
	var problems []string
	add := func(f string, a ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(f, a...))
		}
	}
	var lastRev, lastHeader int64
	seen := map[int64]bool{} // revisions already complete
	dup := map[event]bool{}  // events received
	for i, r := range rs {
		if r.Skip {
			// Told to resume here: nothing older may follow.
			lastRev = max(lastRev, r.Header-1)
			continue
		}
		if r.Header < lastHeader {
			add("response %d: header revision %d is older than %d, already seen", i, r.Header, lastHeader)
		}
		lastHeader = max(lastHeader, r.Header)
		for j, e := range r.Events {
			if e.Rev < lastRev || (j == 0 && e.Rev == lastRev && i > 0) {
				add("response %d: event %v after revision %d (out of order or split revision)", i, e, lastRev)
			}
			if seen[e.Rev] && e.Rev != lastRev {
				add("response %d: revision %d delivered again", i, e.Rev)
			}
			if dup[e] {
				add("response %d: duplicate event %v", i, e)
			}
			if e.Rev > r.Header {
				add("response %d: event %v newer than its header revision %d", i, e, r.Header)
			}
			dup[e] = true
			seen[e.Rev] = true
			lastRev = e.Rev
		}
	}
	if ref == nil {
		return problems
	}
	want := byRevision(ref)
	got := byRevision(rs)
	refRevs := revisions(ref)
	gotRevs := revisions(rs)
	// No gap: the revisions received are the store's, from the first on
	// (from the compaction revision on after a Skip).
	ri := 0
	var prev int64 = -1
walk:
	for _, r := range rs {
		if r.Skip {
			ri = position(refRevs, r.Header)
			continue
		}
		for _, e := range r.Events {
			if e.Rev == prev {
				continue
			}
			prev = e.Rev
			if ri >= len(refRevs) {
				add("revision %d received, beyond the store's history (%d revisions)", e.Rev, len(refRevs))
				break walk
			}
			if refRevs[ri] != e.Rev {
				add("gap or foreign revision: received %d where the store has %d next", e.Rev, refRevs[ri])
				break walk
			}
			ri++
		}
	}
	// Atomic and faithful: each revision received whole and as stored.
	for _, rev := range gotRevs {
		g, w := got[rev], want[rev]
		if fmt.Sprint(g) != fmt.Sprint(w) {
			add("revision %d: received %v, the store has %v", rev, g, w)
		}
	}
	return problems
}
