// Package dds is dyad's binding to Eclipse Cyclone DDS 0.10 (Debian's
// cyclonedds-dev, through cgo). It is the ONLY cgo package in the module and
// it contains no replication logic: it moves opaque Envelopes between
// participants. Entries, acks, heartbeats, epochs and catch-up belong to
// internal/repl, which uses this package as a Transport.
//
// # What it owns
//
//   - The Cyclone configuration (Config.XML): domain, NIC, unicast peers
//     (multicast off, ParticipantIndex=auto, raised MaxAutoParticipantIndex),
//     participant lease, writer history high-water mark, a socket receive
//     buffer request as large as that mark (a smaller one overflowed under
//     a full window and cost a NACK round per lost datagram), optional
//     write batching (Config.WriteBatch: Writer.Queue, Flush), optional
//     DDS Security and expert XML.
//
//   - The wire type dyad::Envelope (dyad.idl) and its generated C type
//     support (dyad.c, dyad.h — checked in). Regenerate after editing the IDL
//     with:
//
//     cd internal/dds && idlc -l c dyad.idl
//
//   - Participants, topics, writers and readers, and the QoS on them:
//     RELIABLE, VOLATILE, KEEP_ALL by default (KEEP_LAST n optional),
//     destination order by reception (the RTPS reliable protocol delivers
//     each writer's samples in write order, without gaps), writer
//     autodispose=false, configurable max_blocking_time and reader
//     max_samples, and ignorelocal=PARTICIPANT: a participant's readers never
//     receive its own writers' samples (ddsnet reads the topics it writes;
//     skipping that local delivery took about 25-30% off its round trip).
//     Other participants in the same process still match each other.
//
//   - A perf protocol (PingPong, Throughput, Respond) for `dyad perf`.
//
// # The Envelope
//
// One @final keyless struct: version, kind, flags, cluster, node, term,
// index and a sequence<octet> payload.
//   - @final (explicit): XCDR1 with no member headers — the cheapest
//     encoding — and no ambiguity when idlc's default changes. Evolution is
//     through the version field and the opaque payload, not XTypes.
//   - Keyless: one instance, so no key hashing or per-instance bookkeeping,
//     and KEEP_ALL ordering spans the whole topic. Instance lifecycle
//     (dispose/unregister) is never used; invalid (no-data) samples are
//     dropped by the Reader.
//   - cluster lets a receiver discard traffic of a different dyad pair that
//     shares the DDS domain; term/node/index are the fields the replication
//     protocol filters on before it decodes the payload. This package gives
//     them no meaning (Header.Version 0 is written as EnvelopeVersion).
//
// # Invariants
//
//   - Write never drops silently: when the writer history holds WhcHigh
//     unacknowledged bytes, dds_write blocks for MaxBlockingTime and then
//     Write returns an *Error with errors.Is(err, ErrTimeout). Cyclone starts
//     writers at WhcHighInit and only grows towards WhcHigh when WhcAdaptive
//     is on; Config sets WhcHigh = WhcHighInit and WhcAdaptive=false so the
//     mark is exactly Config.WhcHigh (default 4 MiB >= 2 x 1.5 MiB).
//   - Write makes one cgo call; the payload slice is not retained (dds_write
//     serialises synchronously; the C shim points the sequence at it).
//     WriteStamped is the same write measured in C (dds_write's wall and
//     thread CPU time, the thread's context switches inside it), for
//     dyad perf; the stamping costs under 1 µs (StampCost).
//   - A delivered *Sample's Payload is valid until Release, which recycles
//     the Sample and its buffer (per-reader sync.Pool). Loans taken from
//     Cyclone are always returned before the next take.
//   - Cyclone allows one domain per ID per process; participants with the
//     same Domain in one process share it and must have identical Config
//     (package-level refcounted table, the package's only global state).
//   - Participant.Close must be called on shutdown, including on SIGTERM:
//     otherwise the peer keeps seeing this participant until LeaseDuration
//     (default 2 s) expires. Liveliness/lease is not failure detection — the
//     brief requires heartbeats from the apply loop (internal/cluster); the
//     matched counts (Writer.Matched, Reader.Matched, WaitMatched) only say
//     whether the peer's endpoints are discovered.
//
// # Receive path
//
// Two modes, selected per reader (ReaderOptions.Mode):
//
//   - ReceiveThread (default): the Reader owns one goroutine locked to its
//     OS thread (runtime.LockOSThread). Per batch it makes ONE cgo call,
//     dyad_wait_take, which returns the previous batch's loan, takes up to
//     Batch samples with a loan, and blocks in dds_waitset_wait only when
//     the reader is empty. Go then copies the loaned samples straight out of
//     C memory (no further cgo calls) into pooled buffers. Because the
//     goroutine never migrates, the blocking call does not bounce it between
//     OS threads. Back-pressure stays inside Cyclone's reader history (bounded
//     by QoS.MaxSamples), so a slow owner never blocks Cyclone's threads or
//     other readers.
//   - ReceiveListener: a C data_available listener on Cyclone's delivery
//     thread takes each batch and calls into Go once (exported dyadOnData).
//     Fewest thread hand-offs, but a blocked channel or a slow Handler stalls
//     Cyclone's delivery for every reader of the participant (heartbeats
//     included) — use it with a quick Handler (e.g. ack/heartbeat handling).
//   - ReceiveNotify: the data_available listener only calls the owner's
//     Notify, once until the next Take (a flag in C memory, re-armed by the
//     take); the owner calls Reader.Take (on that thread or any other),
//     which takes one batch with a loan and shows each payload in place
//     (valid during the callback; no copy by this package). What the owner
//     does not take stays in the reader's history (QoS.MaxSamples), so a
//     busy owner holds back the remote writer instead of Cyclone's thread.
//     internal/ddsnet uses it.
//   - ReceiveWaitSet: no listener, no goroutine. The reader is attached to
//     a WaitSet (with any number of others, up to MaxWaitSetReaders, and a
//     guard condition that WaitSet.Wake triggers); WaitSet.Wait blocks the
//     caller's goroutine in ONE cgo call (dyad_ws_wait_take: return the
//     previous loans, dds_waitset_wait, take up to Batch samples of every
//     triggered reader) and then shows each sample in place. Cyclone's
//     thread only signals a condition variable (no call into Go, no Go
//     scheduler wake-up), as ddsperf's waitset mode. Each reader waits
//     through a read condition, which stays triggered while the reader
//     holds a sample, so a partial take is never forgotten; WaitSet.Mute
//     stops waiting on one reader whose owner cannot take more.
//
// The first two modes either send samples on Reader.C() (a buffered channel to the
// owner's goroutine) or, when ReaderOptions.Handler is set, calls the
// handler on the receive thread. Measured over a veth pair (TestPerfNetns,
// loaded 2-core machine; ddsperf on the same pair and config):
// ReceiveListener+Handler comes closest to ddsperf (p50 about 1.6–2.2x
// ddsperf, throughput about equal); channel delivery costs one extra Go
// scheduler hand-off per sample (about 3–6x ddsperf's p50 round trip).
//
// # Goroutines and locks
//
// ReceiveNotify readers own no goroutine; Reader.takeMu serialises Take
// and is taken by Close (not across dds_delete) so no loan outlives the
// reader. ReceiveWaitSet readers own none either; the goroutine that calls
// WaitSet.Wait is the caller's. Reader.Close detaches the reader from its
// WaitSet first (waking and waiting out a running Wait), so no loan or
// pointer of it stays in C; WaitSet.Close (also run by Participant.Close,
// before the readers) ends a running Wait the same way.
//
// Goroutine ownership: each ReceiveThread Reader owns exactly one goroutine,
// stopped by Reader.Close (guard condition wakes the waitset; Close waits for
// it). ReceiveListener readers own no goroutine; Close deletes the reader,
// which waits for a running listener callback. Participant.Close closes all
// readers (first) and writers, then deletes the participant. Reader.Close
// closes C() after the last send. A Handler must not call Close on its own
// reader.
//
// Lock order: Writer.mu -> Participant.mu -> domainsMu (leaf);
// WaitSet.mu -> Reader.wsMu, WaitSet.mu -> Participant.mu; WaitSet.gate is
// a leaf. Reader.Close takes Participant.mu only after its goroutine
// stopped. No Go lock is held across a blocking C call except Writer.mu
// (read-held by Write, so Close waits for in-flight writes) and WaitSet.mu
// (held by Wait; whoever else needs it triggers the guard first).
package dds
