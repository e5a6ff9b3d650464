// Package watch owns dyad's watch hub: every watcher of every etcd Watch
// stream, the delivery of new events to them, their catch-up from history,
// compaction cancels and progress notifications. It behaves like etcd 3.5's
// watchableStore plus the stream bookkeeping of its v3rpc watch server; the
// gRPC transport itself (package api) only moves requests in and responses
// out.
//
// # Revisions
//
// The hub keeps its own notified revision: the last revision the single
// writer handed to Notify. It, not the store's readable revision, is the
// upper bound of every history read, the revision of progress responses and
// the base of a start_revision of 0. Nothing above it is ever delivered.
// A writer that made revisions visible without handing their events over
// says so with NotifyFrom (the first revision whose events it passes):
// every synced watcher owed one of the skipped revisions turns unsynced
// and replays them from history, so no visible revision is skipped.
//
// # Watcher states
//
//   - creating: registered on its stream (its ID is taken) while its Created
//     response is being queued. Receives nothing.
//   - synced: every matching event with a revision in [startRev, notified]
//     has been queued on its stream. Notify delivers new events to it
//     directly. A future start revision is synced from the start.
//   - unsynced: events from next on (next <= notified) are still owed. Run
//     replays them from Source.History and moves it back to synced once
//     next passes notified. A synced watcher whose stream buffer is full when
//     Notify delivers to it becomes unsynced with next at the first revision
//     it missed, so the writer never blocks.
//   - compacted: next fell below the compaction point; it got a response with
//     CompactRevision set and Canceled and receives nothing more. Its ID
//     stays taken until the client cancels it, as in etcd.
//
// Invariants: for each watcher, revisions queued are strictly increasing
// across responses and never repeat; all events of one revision go out in
// one response (the transport may fragment it when the watcher asked for
// it); the Created response precedes every other response of the watcher
// and the Canceled response follows all of them.
//
// # Responses
//
// Each stream has one bounded channel. Notify, Run and progress answers send
// to it without blocking, holding Hub.mu, so responses are queued in the
// order the hub decides them. Created and Canceled responses are sent by the
// caller of Watch and Cancel (the stream's receive loop), which may block
// until the consumer reads or the stream closes; they are sent without any
// lock held, and the state machine above keeps their order.
//
// # Progress
//
// RequestProgress answers (WatchId -1, header revision = notified) only when
// every watcher of the stream is synced and notified has reached every
// watcher's start revision, as etcd >= 3.5.13 does; otherwise the request is
// deferred and answered as soon as that holds (further requests while one is
// deferred are coalesced). Periodic progress_notify responses (WatchId = the
// watcher's ID) go to synced watchers that have reached their start revision
// and were sent no events since the previous tick.
//
// # Concurrency and lock order
//
// Hub.mu guards all watcher and stream state. It is never held while calling
// Source nor while blocking on a channel. Source methods take the store's
// own locks, so the order is: Hub.mu is never held when the store's locks
// are taken; the writer calls Notify after MarkDurable, holding no store
// lock. Notify is on the write's path (the next batch waits for it), so
// its cost per event is one lookup in the synced watchers' index, which
// does not scan every range watcher, plus one response per watcher that
// receives the event. Run is the only goroutine the hub needs; its owner starts it and
// stops it through the context.
package watch
