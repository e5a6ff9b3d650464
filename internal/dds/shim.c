#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include "shim.h"

static void dyad_envelope(dyad_Envelope *s, const dyad_hdr *h, const void *buf, uint32_t len)
{
  s->version = h->version;
  s->kind = h->kind;
  s->flags = h->flags;
  s->cluster = h->cluster;
  s->node = h->node;
  s->term = h->term;
  s->index = h->index;
  s->payload._maximum = len;
  s->payload._length = len;
  s->payload._buffer = (uint8_t *) buf;
  s->payload._release = false;
}

static int64_t dyad_ns(clockid_t c)
{
  struct timespec ts;
  clock_gettime(c, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

dds_return_t dyad_write_stamped(dds_entity_t wr, const dyad_hdr *h, const void *buf, uint32_t len, int flush, dyad_wstamp *st)
{
  dyad_Envelope s;
  struct rusage r0, r1;
  dyad_envelope(&s, h, buf, len);
  int64_t w0 = dyad_ns(CLOCK_MONOTONIC);
  getrusage(RUSAGE_THREAD, &r0);
  int64_t c0 = dyad_ns(CLOCK_THREAD_CPUTIME_ID);
  dds_return_t rc = 0;
  if (wr != 0) {
    rc = dds_write(wr, &s);
    if (flush) dds_write_flush(wr);
  }
  int64_t c1 = dyad_ns(CLOCK_THREAD_CPUTIME_ID);
  getrusage(RUSAGE_THREAD, &r1);
  int64_t w1 = dyad_ns(CLOCK_MONOTONIC);
  st->wall_ns = w1 - w0;
  st->cpu_ns = c1 - c0;
  st->nvcsw = r1.ru_nvcsw - r0.ru_nvcsw;
  st->nivcsw = r1.ru_nivcsw - r0.ru_nivcsw;
  return rc;
}

dds_return_t dyad_write(dds_entity_t wr, const dyad_hdr *h, const void *buf, uint32_t len, int flush)
{
  dyad_Envelope s;
  dyad_envelope(&s, h, buf, len);
  dds_return_t rc = dds_write(wr, &s);
  /* Also after a failed write: one refused at the high-water mark has
     already sent what was batched, and a flush of nothing sends nothing. */
  if (flush) dds_write_flush(wr);
  return rc;
}

dyad_rx *dyad_rx_new(dds_entity_t participant, dds_entity_t reader, uint32_t max)
{
  dyad_rx *rx = calloc(1, sizeof(*rx));
  if (rx == NULL) return NULL;
  rx->reader = reader;
  rx->max = max;
  rx->bufs = calloc(max, sizeof(void *));
  rx->infos = calloc(max, sizeof(dds_sample_info_t));
  rx->waitset = dds_create_waitset(participant);
  rx->guard = dds_create_guardcondition(participant);
  if (rx->bufs == NULL || rx->infos == NULL || rx->waitset < 0 || rx->guard < 0) goto fail;
  if (dds_set_status_mask(reader, DDS_DATA_AVAILABLE_STATUS) < 0) goto fail;
  if (dds_waitset_attach(rx->waitset, reader, 0) < 0) goto fail;
  if (dds_waitset_attach(rx->waitset, rx->guard, 1) < 0) goto fail;
  return rx;
fail:
  dyad_rx_free(rx);
  return NULL;
}

void dyad_return(dyad_rx *rx)
{
  if (rx->outstanding > 0) {
    dds_return_loan(rx->reader, rx->bufs, rx->outstanding);
    rx->outstanding = 0;
  }
}

void dyad_rx_free(dyad_rx *rx)
{
  if (rx == NULL) return;
  dyad_return(rx);
  if (rx->waitset > 0) dds_delete(rx->waitset);
  if (rx->guard > 0) dds_delete(rx->guard);
  free(rx->bufs);
  free(rx->infos);
  free(rx);
}

dds_return_t dyad_wake(dyad_rx *rx)
{
  return dds_set_guardcondition(rx->guard, true);
}

// dyad_wait_take returns the previous batch's loan, then takes up to max
// samples, blocking on the waitset (up to timeout_ns) only when the reader
// is empty. Returns the number of samples (loaned in rx->bufs), 0 on
// timeout or wake-up, or a negative DDS return code.
int32_t dyad_wait_take(dyad_rx *rx, int64_t timeout_ns)
{
  dyad_return(rx);
  if (timeout_ns < 0) timeout_ns = DDS_INFINITY;
  for (int attempt = 0; attempt < 2; attempt++) {
    rx->bufs[0] = NULL;
    int32_t n = dds_take(rx->reader, rx->bufs, rx->infos, rx->max, rx->max);
    if (n != 0) {
      if (n > 0) rx->outstanding = n;
      return n;
    }
    if (attempt == 1) return 0;
    bool woken = false;
    if (dds_read_guardcondition(rx->guard, &woken) == 0 && woken) return 0;
    dds_return_t r = dds_waitset_wait(rx->waitset, NULL, 0, timeout_ns);
    if (r < 0) return r;
    if (dds_read_guardcondition(rx->guard, &woken) == 0 && woken) return 0;
  }
  return 0;
}

int32_t dyad_take(dyad_rx *rx, dds_entity_t reader)
{
  dyad_return(rx);
  __atomic_store_n(&rx->signalled, 0, __ATOMIC_SEQ_CST);
  rx->reader = reader;
  rx->bufs[0] = NULL;
  int32_t n = dds_take(reader, rx->bufs, rx->infos, rx->max, rx->max);
  if (n > 0) rx->outstanding = n;
  return n;
}

dds_qos_t *dyad_qos(int32_t depth, int64_t max_blocking_ns, int32_t max_samples, int best_effort)
{
  dds_qos_t *q = dds_create_qos();
  dds_qset_reliability(q, best_effort ? DDS_RELIABILITY_BEST_EFFORT : DDS_RELIABILITY_RELIABLE, max_blocking_ns);
  if (depth <= 0)
    dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
  else
    dds_qset_history(q, DDS_HISTORY_KEEP_LAST, depth);
  dds_qset_resource_limits(q, max_samples > 0 ? max_samples : DDS_LENGTH_UNLIMITED, DDS_LENGTH_UNLIMITED, DDS_LENGTH_UNLIMITED);
  dds_qset_durability(q, DDS_DURABILITY_VOLATILE);
  dds_qset_destination_order(q, DDS_DESTINATIONORDER_BY_RECEPTION_TIMESTAMP);
  dds_qset_writer_data_lifecycle(q, false);
  /* A participant never consumes its own samples: ddsnet writes and reads
     the same topics and dropped its own samples in Go, after Cyclone had
     delivered them locally (a copy into the reader's history and a wake-up
     of the receive thread per write). Other participants of the same
     process still match, so in-process pairs and tests are unaffected. */
  dds_qset_ignorelocal(q, DDS_IGNORELOCAL_PARTICIPANT);
  return q;
}
