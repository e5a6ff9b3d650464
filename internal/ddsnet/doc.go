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
// a write blocked at the mark for SendTimeout returns transport.ErrTimeout.
// Readers bound their history (ReaderMaxSamples), so a slow owner pushes
// back on the peer's writer instead of growing memory.
//
// # Receive path
//
// Every reader uses dds.ReceiveNotify. When samples arrive, Cyclone's
// delivery thread takes what waits on that topic (up to Config.Batch, one
// cgo take on a loan), drops samples of another cluster and the node's own,
// copies the payloads out of the loan into one buffer for the batch, and
// offers the batch to the consumer's transport.BatchHandler (StartBatch).
// The replication loop's handler queues the whole batch or refuses it whole,
// and never waits (internal/server/inbox.go), so one batch costs one wake-up
// of the loop, with no goroutine of ddsnet's own in between.
//
// A refused batch is held and offered again, before anything newer of its
// class, when the consumer calls Resume or the next sample arrives; behind
// it, samples stay in the reader's history, bounded by ReaderMaxSamples, so
// the peer's writer is what waits (at its high-water mark), never Cyclone's
// delivery thread. That thread also carries the heartbeats and the RTPS
// acknowledgements, which is why an earlier design kept the handler off it
// (one locked goroutine per topic, then a hand-over per message to the
// loop: two thread hand-offs per message). Each class has its own held
// batch, so a refused log batch does not hold back heartbeats.
//
// Start (transport.Transport) is StartBatch with a handler that accepts
// everything; it runs on Cyclone's thread and must be quick.
//
// # Sends
//
// Send is one dds_write on the caller's goroutine. At the writer's
// high-water mark it blocks up to LoopSendTimeout (Catchup: SendTimeout) and
// then returns transport.ErrTimeout, counted in Stats and in
// dyad_dds_send_timeouts_total. The replication loop sends, and a stall of
// a quarter lease looks to its detector like a freeze of the node, so
// dyad serve bounds the loop's classes at lease/16.
//
// # Goroutines and locks
//
// Net owns no goroutine: handlers run on Cyclone's delivery thread or in
// Resume on the consumer's. Close closes the participant, readers first;
// deleting a reader waits for a running listener. Net.mu guards
// started/closed only and is held across StartBatch and Close. Lock order:
// Net.mu -> inlet.mu -> the consumer's lock (inside the handler) ->
// dds.Reader's take lock.
package ddsnet
