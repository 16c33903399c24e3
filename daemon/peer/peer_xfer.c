/* Op data between nodes: one tagged message per stream, sent from and
 * received into the clients' mapped buffers through iov lists. */
#include <stdio.h>
#include <stdlib.h>

#include "peer_internal.h"
#include "plan.h"

static void xfer_report(spd_xfer *x, ucs_status_t status,
                        const ucp_tag_recv_info_t *info) {
  spd_peer_event *ev = &x->ev;
  x->done = 1;
  ev->kind = EV_XFER;
  ev->node = x->node;
  ev->xfer = x;
  ev->status = status == UCS_OK ? SPK_OK : SPK_ENODE_LOST;
  if (status != UCS_OK)
    snprintf(ev->why, sizeof(ev->why), "%s node %d failed: %s",
             x->recv ? "receive from" : "send to", x->node,
             ucs_status_string(status));
  else if (info != NULL && info->length != x->bytes) {
    ev->status = SPK_EPROTOCOL;
    snprintf(ev->why, sizeof(ev->why), "node %d sent %zu bytes where %llu "
             "were planned", x->node, info->length,
             (unsigned long long)x->bytes);
  }
  spd_peer_event_push(x->peers, ev);
}

static void on_sent(void *req, ucs_status_t status, void *user_data) {
  (void)req;
  xfer_report(user_data, status, NULL);
}

static void on_received(void *req, ucs_status_t status,
                        const ucp_tag_recv_info_t *info, void *user_data) {
  (void)req;
  xfer_report(user_data, status, status == UCS_OK ? info : NULL);
}

/* Streams given up stay listed until UCX is done with them, but need no
 * progress timer of their own. */
static int xfers_active(spd_peers *P) {
  spd_xfer *x;
  TAILQ_FOREACH(x, &P->xfers, link)
    if (!x->given_up)
      return 1;
  return 0;
}

/* The stream's event came out of the queue: it is over. */
void spd_peer_xfer_finish(spd_peers *P, spd_xfer *x) {
  TAILQ_REMOVE(&P->xfers, x, link);
  if (x->req != NULL)
    ucp_request_free(x->req);
  if (!xfers_active(P) && !P->stopping)
    uv_timer_stop(&P->kick);
  if (x->cb != NULL)
    x->cb(x->arg, x->ev.status, x->ev.status < 0 ? x->ev.why : "");
  free(x->iov);
  free(x);
}

void spd_peer_xfer_given_up(spd_peers *P, spd_xfer *x) {
  spd_xfer_cb cb = x->cb;
  x->cb = NULL;
  if (!xfers_active(P) && !P->stopping)
    uv_timer_stop(&P->kick);
  if (cb != NULL)
    cb(x->arg, x->given_up_ev.status, x->given_up_ev.why);
}

/* The worker's fd wakes the loop for network events; this timer is the
 * safety net that keeps progress going while a stream is in flight. */
static void on_kick(uv_timer_t *t) {
  spd_peers_progress(t->data);
}

int spd_peer_stream(spd_ctx *ctx, int node, int recv, uint64_t tag,
                    const spd_iov *iov, size_t niov, uint64_t bytes,
                    spd_xfer_cb cb, void *arg, spk_err *err) {
  spd_peers *P = ctx->peers;
  if (P == NULL || !P->peer[node].up || P->peer[node].ep == NULL)
    return spk_err_set(err, SPK_ENODE_LOST, "node %d is not connected", node);
  spd_xfer *x = calloc(1, sizeof(*x));
  if (x == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a stream failed");
  *x = (spd_xfer){.peers = P, .node = node, .recv = recv, .bytes = bytes,
                  .cb = cb, .arg = arg};
  x->iov = malloc((niov ? niov : 1) * sizeof(*x->iov));
  if (x->iov == NULL) {
    free(x);
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of a stream's %zu iov "
                       "entries failed", niov);
  }
  for (size_t i = 0; i < niov; i++)
    x->iov[i] = (ucp_dt_iov_t){iov[i].base, iov[i].len};
  ucp_request_param_t prm = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
      .datatype = ucp_dt_make_iov(), .user_data = x};
  void *req;
  if (recv) {
    prm.cb.recv = on_received;
    req = ucp_tag_recv_nbx(P->worker, x->iov, niov,
                           tag ^ P->peer[node].in.salt, (ucp_tag_t)-1, &prm);
  } else {
    prm.cb.send = on_sent;
    req = ucp_tag_send_nbx(P->peer[node].ep, x->iov, niov,
                           tag ^ P->peer[node].out.salt, &prm);
    if (!UCS_PTR_IS_ERR(req))
      P->ctx->stats.peer_streams_sent++;
  }
  if (UCS_PTR_IS_ERR(req)) {
    free(x->iov);
    free(x);
    return spk_err_set(err, SPK_ENODE_LOST, "%s node %d (%llu bytes): %s",
                       recv ? "ucp_tag_recv_nbx from" : "ucp_tag_send_nbx to",
                       node, (unsigned long long)bytes,
                       ucs_status_string(UCS_PTR_STATUS(req)));
  }
  x->req = req;
  TAILQ_INSERT_TAIL(&P->xfers, x, link);
  int rc = uv_timer_start(&P->kick, on_kick, 2, 2);
  if (rc < 0)
    SPD_WARN(&ctx->log, "uv_timer_start(stream progress): %s",
             uv_strerror(rc));
  spd_peers_progress(P);
  return SPK_OK;
}

void spd_peer_xfers_cancel(spd_peers *P, int node) {
  spd_xfer *x;
  TAILQ_FOREACH(x, &P->xfers, link)
    if (x->node == node && x->recv && !x->done && x->req != NULL)
      ucp_request_cancel(P->worker, x->req);
}

int spd_peer_xfers_stuck(const spd_peers *P, int node) {
  const spd_xfer *x;
  TAILQ_FOREACH(x, &P->xfers, link)
    if (x->node == node && !x->recv && !x->done && x->req != NULL)
      return 1;
  return 0;
}

void spd_peer_stream_cancel(spd_ctx *ctx, void *arg) {
  spd_peers *P = ctx->peers;
  spd_xfer *x;
  if (P == NULL)
    return;
  TAILQ_FOREACH(x, &P->xfers, link) {
    if (x->arg != arg || x->done || x->req == NULL || x->given_up)
      continue;
    if (x->recv) {
      ucp_request_cancel(P->worker, x->req);
      continue;
    }
    /* A peer that gave up the op never posts the receive, and a
     * rendezvous send waits for it forever (UCX cannot cancel a send):
     * the op hears now; the request stays until UCX ends it (at the
     * latest when the endpoint closes), the receiver never reads. */
    x->given_up = 1;
    SPD_DEBUG(&P->ctx->log, "send of %llu bytes to node %d given up",
              (unsigned long long)x->bytes, x->node);
    spd_peer_event *ev = &x->given_up_ev;
    ev->kind = EV_XFER_GIVEN_UP;
    ev->node = x->node;
    ev->xfer = x;
    ev->status = SPK_ENODE_LOST;
    snprintf(ev->why, sizeof(ev->why), "send to node %d given up: that "
             "node dropped the op", x->node);
    spd_peer_event_push(P, ev);
  }
}

int spd_peer_map(spd_ctx *ctx, void *base, size_t size, uint64_t id,
                 void **memh_p, spk_err *err) {
  spd_peers *P = ctx->peers;
  if (P == NULL || *memh_p != NULL)
    return SPK_OK;
  int rc = spk_grow((void **)&P->mapped, P->nmapped, &P->mapped_cap,
                    sizeof(*P->mapped), "mapped buffers", err);
  if (rc < 0)
    return rc;
  ucp_mem_map_params_t mp = {
      .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH,
      .address = base, .length = size};
  ucp_mem_h memh;
  ucs_status_t st = ucp_mem_map(P->ucp, &mp, &memh);
  if (st != UCS_OK)
    return spk_err_set(err, SPK_ESYSTEM, "ucp_mem_map of buffer %llu (%zu "
                       "bytes): %s", (unsigned long long)id, size,
                       ucs_status_string(st));
  *memh_p = memh;
  P->mapped[P->nmapped++] = (spd_peer_mapped){memh_p, id};
  return SPK_OK;
}

static void unmap_one(spd_peers *P, const spd_peer_mapped *m) {
  ucs_status_t st = ucp_mem_unmap(P->ucp, *m->memh_p);
  if (st != UCS_OK)
    SPD_WARN(&P->ctx->log, "ucp_mem_unmap of buffer %llu: %s",
             (unsigned long long)m->id, ucs_status_string(st));
  *m->memh_p = NULL;
}

void spd_peer_unmap(spd_ctx *ctx, void **memh_p) {
  spd_peers *P = ctx->peers;
  if (P == NULL || *memh_p == NULL)
    return;
  for (size_t i = 0; i < P->nmapped; i++)
    if (P->mapped[i].memh_p == memh_p) {
      unmap_one(P, &P->mapped[i]);
      P->mapped[i] = P->mapped[--P->nmapped];
      return;
    }
}

void spd_peer_unmap_all(spd_peers *P) {
  for (size_t i = 0; i < P->nmapped; i++)
    unmap_one(P, &P->mapped[i]);
  free(P->mapped);
  P->mapped = NULL;
  P->nmapped = P->mapped_cap = 0;
}
