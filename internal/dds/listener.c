#include "shim.h"
#include "_cgo_export.h"

static void dyad_on_data(dds_entity_t rd, void *arg)
{
  dyad_rx *rx = arg;
  rx->reader = rd;
  for (;;) {
    rx->bufs[0] = NULL;
    int32_t n = dds_take(rd, rx->bufs, rx->infos, rx->max, rx->max);
    if (n <= 0) return;
    rx->outstanding = n;
    dyadOnData(rx->gohandle, rx, n);
    dyad_return(rx);
  }
}

dyad_rx *dyad_rx_new_listener(uint32_t max, uintptr_t gohandle)
{
  dyad_rx *rx = calloc(1, sizeof(*rx));
  if (rx == NULL) return NULL;
  rx->max = max;
  rx->gohandle = gohandle;
  rx->bufs = calloc(max, sizeof(void *));
  rx->infos = calloc(max, sizeof(dds_sample_info_t));
  if (rx->bufs == NULL || rx->infos == NULL) {
    dyad_rx_free(rx);
    return NULL;
  }
  return rx;
}

dds_listener_t *dyad_listener(dyad_rx *rx)
{
  dds_listener_t *l = dds_create_listener(rx);
  dds_lset_data_available(l, dyad_on_data);
  return l;
}

static void dyad_on_notify(dds_entity_t rd, void *arg)
{
  (void) rd;
  dyad_rx *rx = arg;
  if (__atomic_exchange_n(&rx->signalled, 1, __ATOMIC_SEQ_CST) == 0)
    dyadOnNotify(rx->gohandle);
}

dds_listener_t *dyad_notify_listener(dyad_rx *rx)
{
  dds_listener_t *l = dds_create_listener(rx);
  dds_lset_data_available(l, dyad_on_notify);
  return l;
}
