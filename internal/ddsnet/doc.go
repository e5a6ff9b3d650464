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
// Every reader uses dds.ReceiveThread with a Handler: one goroutine locked
// to its OS thread per topic takes batches with one cgo call and calls the
// handler there. The listener mode is faster (see internal/dds) but runs on
// Cyclone's shared delivery thread, where a handler blocked by a full
// apply-loop queue would also stall heartbeats; per-topic threads keep the
// classes independent. The payload is copied out of the pooled sample and
// the sample released before the handler runs, so the handler owns the
// Message. Samples of another cluster, and the node's own samples, are
// dropped before that copy.
//
// # Goroutines and locks
//
// The readers' goroutines belong to internal/dds and stop in Close, which
// closes the participant (readers first, waiting for a running handler).
// Net.mu guards started/closed only; it is never held across a DDS call
// except Close's.
package ddsnet
