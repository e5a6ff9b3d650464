package sim

import "container/heap"

// event is something that happens at a virtual time. seq breaks ties in
// the order events were scheduled, so runs are deterministic.
type event struct {
	at  int64
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Queue is the event queue and the virtual clock: Now only moves forward,
// to the time of the event being run.
type Queue struct {
	h   eventHeap
	seq uint64
	now int64
}

// Now is the virtual time (ns).
func (q *Queue) Now() int64 { return q.now }

// At schedules fn at virtual time t (the current time if t is in the
// past: nothing runs backwards).
func (q *Queue) At(t int64, fn func()) {
	if t < q.now {
		t = q.now
	}
	q.seq++
	heap.Push(&q.h, event{at: t, seq: q.seq, fn: fn})
}

// After schedules fn d ns from now.
func (q *Queue) After(d int64, fn func()) { q.At(q.now+d, fn) }

// Len is the number of events scheduled.
func (q *Queue) Len() int { return len(q.h) }

// RunUntil runs events in order up to and including time end (or until
// stop returns true after an event), then sets Now to end if it got
// there. It reports whether stop ended it.
func (q *Queue) RunUntil(end int64, stop func() bool) bool {
	for len(q.h) > 0 && q.h[0].at <= end {
		e := heap.Pop(&q.h).(event)
		q.now = e.at
		e.fn()
		if stop != nil && stop() {
			return true
		}
	}
	if end > q.now {
		q.now = end
	}
	return false
}
