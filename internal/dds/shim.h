// C shim for package dds. Everything cgo touches lives here so that the Go
// side makes exactly one cgo call per write and per received batch.
#ifndef DYAD_SHIM_H
#define DYAD_SHIM_H

#include <stdint.h>
#include <stdlib.h>
#include <dds/dds.h>
#include "dyad.h"

typedef struct dyad_hdr {
  uint16_t version;
  uint16_t kind;
  uint32_t flags;
  uint64_t cluster;
  uint64_t node;
  uint64_t term;
  uint64_t index;
} dyad_hdr;

// dyad_write serialises one Envelope whose payload aliases buf (a Go slice).
// dds_write copies/serialises synchronously, so buf is not retained. With
// flush it then sends what the writer batched (dds_write_flush; only a
// domain with Internal/WriteBatch batches, otherwise dds_write has sent
// the sample already and the flush finds nothing).
dds_return_t dyad_write(dds_entity_t wr, const dyad_hdr *h, const void *buf, uint32_t len, int flush);

// dyad_wstamp is what dyad_write_stamped measured of one dds_write on the
// calling thread: its wall time (CLOCK_MONOTONIC), the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID) and the thread's voluntary and involuntary
// context switches (getrusage(RUSAGE_THREAD)) between entering and leaving
// dds_write. Instrumentation for dyad perf only.
typedef struct dyad_wstamp {
  int64_t wall_ns;
  int64_t cpu_ns;
  int64_t nvcsw;
  int64_t nivcsw;
} dyad_wstamp;

// dyad_write_stamped is dyad_write measuring dds_write into *st. The
// wall clock's reads are the outermost, then getrusage's, then the CPU
// clock's, so the CPU time lies within the wall time. wr 0 stamps nothing
// (no write): what the stamping itself costs.
dds_return_t dyad_write_stamped(dds_entity_t wr, const dyad_hdr *h, const void *buf, uint32_t len, int flush, dyad_wstamp *st);

// dyad_rx is a per-reader receive area in C memory. The Go side reads the
// loaned samples directly (no cgo call) and hands the loan back on the next
// call to dyad_wait_take (or dyad_return).
typedef struct dyad_rx {
  dds_entity_t reader;
  dds_entity_t waitset;
  dds_entity_t guard;   // triggered by Close to wake the waitset
  uintptr_t gohandle;   // runtime/cgo.Handle of the Go *Reader (listener mode)
  uint32_t max;
  int32_t outstanding;  // number of loaned samples in bufs
  int signalled;        // notify mode: Go was told since the last take (atomic)
  dds_entity_t cond;    // waitset mode: the read condition the waitset waits on
  int muted;            // waitset mode: cond is detached (dyad_ws_mute)
  void **bufs;
  dds_sample_info_t *infos;
} dyad_rx;

dyad_rx *dyad_rx_new(dds_entity_t participant, dds_entity_t reader, uint32_t max);
void dyad_rx_free(dyad_rx *rx);
int32_t dyad_wait_take(dyad_rx *rx, int64_t timeout_ns);
void dyad_return(dyad_rx *rx);
dds_return_t dyad_wake(dyad_rx *rx);

// Listener mode: the reader is created with dyad_listener(rx); Cyclone's
// delivery thread takes batches and hands each to the exported Go function
// dyadOnData, then returns the loan.
dyad_rx *dyad_rx_new_listener(uint32_t max, uintptr_t gohandle);
dds_listener_t *dyad_listener(dyad_rx *rx);

// Notify mode: the reader is created with dyad_notify_listener(rx); Cyclone's
// delivery thread only tells Go (exported dyadOnNotify) that data is
// waiting, once until the next dyad_take, and the owner takes it with
// dyad_take, from whichever thread.
dds_listener_t *dyad_notify_listener(dyad_rx *rx);

// dyad_take returns the previous loan, re-arms the notification (before the
// take, so a sample arriving after it notifies again), then takes up to rx->max samples of
// reader with a loan, without waiting. Returns the number taken (loaned in
// rx->bufs) or a negative DDS return code.
int32_t dyad_take(dyad_rx *rx, dds_entity_t reader);

// WaitSet mode: readers are created without a listener and each gets a read
// condition on all its samples (level-triggered: it stays triggered while
// the reader holds a sample, so a take that leaves samples behind is
// followed by a wait that returns at once). A dyad_ws waits on the read
// conditions of its readers and on a guard condition, and takes from the
// triggered readers, in one call.
#define DYAD_WS_MAX 32

typedef struct dyad_ws {
  dds_entity_t waitset;
  dds_entity_t guard;   // triggered by dyad_ws_wake (any thread)
  int woken;            // the last wait found the guard triggered (and reset it)
  int64_t returned_ns;  // CLOCK_REALTIME when the last dds_waitset_wait returned (instrumentation)
  uint32_t n;           // readers attached: rx[0..n)
  dyad_rx *rx[DYAD_WS_MAX];
  dds_attach_t trig[DYAD_WS_MAX + 1];
} dyad_ws;

dyad_ws *dyad_ws_new(dds_entity_t participant);
void dyad_ws_free(dyad_ws *ws);
// dyad_ws_attach adds the reader whose receive area rx was made by
// dyad_rx_new_ws; it fails when DYAD_WS_MAX readers are attached.
dds_return_t dyad_ws_attach(dyad_ws *ws, dyad_rx *rx);
// dyad_ws_detach returns rx's loan and removes it (the caller makes sure no
// dyad_ws_wait_take runs).
dds_return_t dyad_ws_detach(dyad_ws *ws, dyad_rx *rx);
dds_return_t dyad_ws_wake(dyad_ws *ws);
// dyad_ws_mute stops (mute) or resumes waiting on rx's reader; a muted
// reader's samples stay in its history and are not taken.
dds_return_t dyad_ws_mute(dyad_ws *ws, dyad_rx *rx, int mute);
// dyad_ws_wait_take returns every reader's previous loan, waits (up to
// timeout_ns; negative: for ever) until a reader holds a sample or the
// guard is triggered, resets the guard (ws->woken), and takes up to
// rx->max samples of each triggered reader with a loan (rx->outstanding
// of them in rx->bufs). Returns the number of readers it took from, 0 on a
// timeout or a bare wake-up, or a negative DDS return code.
int32_t dyad_ws_wait_take(dyad_ws *ws, int64_t timeout_ns);
dyad_rx *dyad_rx_new_ws(dds_entity_t reader, uint32_t max);

dds_qos_t *dyad_qos(int32_t depth, int64_t max_blocking_ns, int32_t max_samples, int best_effort);

#endif
