// Package ddsnet is the DDS implementation of transport.Transport: it maps
// each transport.Class to one Cyclone DDS topic through internal/dds (the
// only cgo package) and carries transport.Messages in dyad::Envelope
// samples. It holds no protocol logic.
//
// # Topics and QoS
//
// One topic per class, named <prefix>_<class> ("dyad_log", "dyad_ack",
// "dyad_heartbeat", "dyad_control", "dyad_catchup"). Every topic is
// RELIABLE, VOLATILE, KEEP_ALL, ordered by the writer (RTPS reliable order),
// with autodispose_unregistered_instances=false on the writers. No
// TRANSIENT_LOCAL: Cyclone does not implement TRANSIENT and a KEEP_ALL
// transient-local history grows without bound; catch-up is the explicit
// protocol in internal/repl. The writer history high-water mark is the
// participant-wide dds.Config.WhcHigh (at least 2 x --max-request-bytes);
// what a writer at the mark does is under Sends.
// Readers bound their history (ReaderMaxSamples), so a slow owner pushes
// back on the peer's writer instead of growing memory.
//
// # Versions and the addressee
//
// The envelope's version field carries transport.Message.Version (the
// protocol version the sender wrote the message in; internal/repl owns
// their meaning). From transport.VersionAddressed on, the first 8 bytes
// of the payload sequence are the addressee (Message.To, big-endian) and
// the message's payload follows; Send lays them out (one copy of the
// payload into a pooled buffer) and the receive path strips them, dropping
// a sample too short to hold them (DroppedShort). The IDL type itself
// never changes, so that samples of every version match on every topic
// and a receiver can always read the version of a message it cannot
// decode. Every reader gets every sample; the owner drops what is
// addressed to another node.
//
// # Receive path
//
// Every reader uses dds.ReceiveNotify. When samples arrive on a topic,
// Cyclone's delivery thread only signals Ready (one call into Go, then none
// until the consumer has taken from that reader). The consumer, the
// replication loop, wakes once, and its Resume takes the waiting samples
// of the classes that signalled or hold a refused batch, and of no other
// (one cgo take per batch of up to Config.Batch, on the loan),
// drops samples of another cluster and the node's own, copies the payloads
// into one buffer per batch (lent to the consumer and reused once it
// releases every message of the batch, rxbuf.go), and offers each batch to its
// transport.BatchHandler (StartBatch), which queues it whole or refuses it
// whole without waiting (internal/server/inbox.go). So a burst costs one
// wake-up of the loop and no receiving goroutine of ddsnet's own.
//
// A refused batch is held and offered again, before anything newer of its
// class, by the next Resume; behind it, samples stay in the reader's
// history, bounded by ReaderMaxSamples, so the peer's writer is what waits
// (at its high-water mark), never Cyclone's delivery thread. That thread
// also carries the heartbeats and the RTPS acknowledgements, which is why
// an earlier design kept handlers off it (one locked goroutine per topic,
// then a hand-over per message to the loop: two thread hand-offs per
// message). A second design ran the take and the hand-over on Cyclone's
// thread for each arrival; that cost the thread's socket draining under a
// flood (docs/BENCHMARKS.md). Each class has its own held batch, so a
// refused log batch does not hold back heartbeats.
//
// Start (transport.Transport) instead takes and hands over on Cyclone's
// thread with a handler that accepts everything; it must be quick.
//
// Config.WaitSet (dyad serve --dds-waitset, on by default) replaces the
// notification: every reader is attached to one dds.WaitSet, and the
// consumer calls Wait where it would select on Ready (transport.Waiter).
// Wait blocks in one cgo call until a class has samples or Wake is called
// (the consumer's own events) or Close, takes every class that has
// samples and offers them on the consumer's goroutine; Cyclone's thread
// calls no Go code. Wake is a level-triggered guard condition: a Wake
// before a Wait makes that Wait return at once, so a consumer that queues
// and then wakes never loses the wake-up between its last look at its
// queues and its Wait (TestWaitSetWakeBeforeWait). A class whose batch
// was refused is muted in the waitset until Resume hands the held batch
// over (waitset.go). internal/server's apply loop waits this way
// (loopwait.go there).
//
// # Sends
//
// Send is one dds_write on the caller's goroutine, and on every class but
// Catchup it never waits for the peer (send.go): those writers refuse at
// once at their high-water mark, and Send then copies the sample into its
// class's backlog, where every later sample of the class queues too until
// the backlog has drained, so the class keeps its order. The backlog is
// bounded (Config.Backlog bytes per class, default the high-water mark);
// beyond it Send returns transport.ErrTimeout at once. The replication
// loop makes these sends, and a loop that waited for a slow or frozen
// peer would stop ticking; a stall of a quarter lease looks to its
// detector like a freeze of the node and would delay the failover the
// peer's silence should cause. Catchup (sent off the loop) waits at the
// mark up to SendTimeout, which paces a bulk transfer. Queued sends are
// counted in SendBlocked (dyad_replication_send_blocked_total), refused
// ones in SendTimeouts (dyad_dds_send_timeouts_total).
//
// SendAll sends several messages as Send would, in order. In a participant
// with dds.Config.WriteBatch it queues their writes and flushes each class
// once, with the write of the class's last message (one cgo call, as
// Send's), so the messages of a class share datagrams (Send still flushes
// every write), and the flusher drains a backlog the same way. The
// server's replication loop sends each turn's messages with one SendAll
// (internal/server, flushSends) and dyad serve turns WriteBatch on. A
// class's datagrams are its own (one writer per topic), so only messages
// of one class share them.
//
// # Goroutines and locks
//
// Net owns one goroutine, the flusher, which writes backlogs out (it
// sleeps while none waits); New starts it and Close stops it before it
// closes the participant. Handlers run in Resume (and, with
// Config.WaitSet, in Wait) on the consumer's goroutine (or, after Start,
// on Cyclone's delivery thread). Close closes the participant, its
// waitset and readers first; deleting a reader waits for a running
// listener. Net.mu guards started/closed only and is held across
// StartBatch and Close. Lock order: Net.mu -> inlet.mu -> the consumer's
// lock (inside the handler) -> dds.Reader's take lock; outlet.mu ->
// dds.Writer.mu.
package ddsnet
