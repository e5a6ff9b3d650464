#include <time.h>
#include "shim.h"

// The guard's attach argument; a reader's is its index in ws->rx.
#define DYAD_WS_GUARD ((dds_attach_t) DYAD_WS_MAX)

dyad_ws *dyad_ws_new(dds_entity_t participant)
{
  dyad_ws *ws = calloc(1, sizeof(*ws));
  if (ws == NULL) return NULL;
  ws->waitset = dds_create_waitset(participant);
  ws->guard = dds_create_guardcondition(participant);
  if (ws->waitset < 0 || ws->guard < 0 || dds_waitset_attach(ws->waitset, ws->guard, DYAD_WS_GUARD) < 0) {
    dyad_ws_free(ws);
    return NULL;
  }
  return ws;
}

void dyad_ws_free(dyad_ws *ws)
{
  if (ws == NULL) return;
  for (uint32_t i = 0; i < ws->n; i++) dyad_return(ws->rx[i]);
  if (ws->waitset > 0) dds_delete(ws->waitset);
  if (ws->guard > 0) dds_delete(ws->guard);
  free(ws);
}

dyad_rx *dyad_rx_new_ws(dds_entity_t reader, uint32_t max)
{
  dyad_rx *rx = calloc(1, sizeof(*rx));
  if (rx == NULL) return NULL;
  rx->reader = reader;
  rx->max = max;
  rx->bufs = calloc(max, sizeof(void *));
  rx->infos = calloc(max, sizeof(dds_sample_info_t));
  rx->cond = dds_create_readcondition(reader, DDS_ANY_STATE);
  if (rx->bufs == NULL || rx->infos == NULL || rx->cond < 0) {
    if (rx->cond > 0) dds_delete(rx->cond);
    rx->cond = 0;
    dyad_rx_free(rx);
    return NULL;
  }
  return rx;
}

dds_return_t dyad_ws_attach(dyad_ws *ws, dyad_rx *rx)
{
  if (ws->n >= DYAD_WS_MAX) return DDS_RETCODE_OUT_OF_RESOURCES;
  dds_return_t rc = dds_waitset_attach(ws->waitset, rx->cond, (dds_attach_t) ws->n);
  if (rc < 0) return rc;
  ws->rx[ws->n++] = rx;
  return 0;
}

dds_return_t dyad_ws_detach(dyad_ws *ws, dyad_rx *rx)
{
  for (uint32_t i = 0; i < ws->n; i++) {
    if (ws->rx[i] != rx) continue;
    dyad_return(rx);
    dds_return_t rc = rx->muted ? 0 : dds_waitset_detach(ws->waitset, rx->cond);
    // Keep the attach arguments equal to the indices: the last reader
    // moves into the hole under a new argument (a muted one stays out).
    uint32_t last = --ws->n;
    if (i != last) {
      ws->rx[i] = ws->rx[last];
      if (!ws->rx[i]->muted) {
        dds_waitset_detach(ws->waitset, ws->rx[i]->cond);
        dds_return_t rc2 = dds_waitset_attach(ws->waitset, ws->rx[i]->cond, (dds_attach_t) i);
        if (rc >= 0) rc = rc2;
      }
    }
    ws->rx[last] = NULL;
    return rc;
  }
  return DDS_RETCODE_BAD_PARAMETER;
}

dds_return_t dyad_ws_wake(dyad_ws *ws)
{
  return dds_set_guardcondition(ws->guard, true);
}

int32_t dyad_ws_wait_take(dyad_ws *ws, int64_t timeout_ns)
{
  for (uint32_t i = 0; i < ws->n; i++) dyad_return(ws->rx[i]);
  if (timeout_ns < 0) timeout_ns = DDS_INFINITY;
  ws->woken = 0;
  dds_return_t nt = dds_waitset_wait(ws->waitset, ws->trig, ws->n + 1, timeout_ns);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ws->returned_ns = (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
  if (nt < 0) return nt;
  if (nt > (dds_return_t) ws->n + 1) nt = (dds_return_t) ws->n + 1;
  int32_t got = 0;
  for (dds_return_t k = 0; k < nt; k++) {
    dds_attach_t a = ws->trig[k];
    if (a == DYAD_WS_GUARD) {
      bool t = false;
      dds_take_guardcondition(ws->guard, &t);
      ws->woken = 1;
      continue;
    }
    if (a >= ws->n) continue;
    dyad_rx *rx = ws->rx[a];
    rx->bufs[0] = NULL;
    int32_t n = dds_take(rx->cond, rx->bufs, rx->infos, rx->max, rx->max);
    if (n < 0) return n;
    if (n > 0) {
      rx->outstanding = n;
      got++;
    }
  }
  return got;
}

dds_return_t dyad_ws_mute(dyad_ws *ws, dyad_rx *rx, int mute)
{
  for (uint32_t i = 0; i < ws->n; i++) {
    if (ws->rx[i] != rx) continue;
    if (rx->muted == mute) return 0;
    dds_return_t rc = mute ? dds_waitset_detach(ws->waitset, rx->cond) : dds_waitset_attach(ws->waitset, rx->cond, (dds_attach_t) i);
    if (rc >= 0) rx->muted = mute;
    return rc;
  }
  return DDS_RETCODE_BAD_PARAMETER;
}
