/* Point-to-point sends and receives (spcoll.h): one P2p request each,
 * matched and checked by the daemon (daemon/core/op_p2p.c). The arguments
 * matching needs, and the tensor's fit in its buffer, are checked here
 * too, so a bad one is reported without a round trip, naming it. */
#include <stdlib.h>

#include "client_internal.h"

static int p2p_args(spc_group *g, const spc_tensor *t, int peer, int tag,
                    int send) {
  spc_client *c = g->client;
  const char *dir = send ? "spc_send" : "spc_recv";
  if (t == NULL || t->buf == NULL)
    return spc__fail(c, SPC_EINVAL, "%s: tensor is NULL or not initialized",
                     dir);
  if (t->buf->client != c)
    return spc__fail(c, SPC_EINVAL, "%s: the tensor's buffer belongs to "
                     "another client", dir);
  if (t->buf->wrapped)
    return spc__fail(c, SPC_EINVAL, "%s: the tensor wraps caller memory "
                     "(spc_buffer_wrap): only spc_run takes it", dir);
  int lo = send ? 0 : SPC_ANY_SOURCE;
  if (peer < lo || peer >= g->world || peer == g->rank)
    return spc__fail(c, SPC_EINVAL, "%s: peer %d is not another rank of the "
                     "group (0..%d%s; this is rank %d)", dir, peer,
                     g->world - 1, send ? "" : ", or SPC_ANY_SOURCE",
                     g->rank);
  if (tag < 0)
    return spc__fail(c, SPC_EINVAL, "%s: tag %d is negative", dir, tag);
  /* A pair waits for its other half: a tensor outside its buffer is
   * refused now, not when (if ever) the other rank posts. */
  return spc__tensor_check(c, send ? "spc_send: send" : "spc_recv: receive",
                           t->buf, t->offset, t->dtype, t->ndim, t->shape);
}

static int p2p_start(spc_group *g, const spc_tensor *t, int peer, int tag,
                     int send, int *src_p, spc_request **req_p) {
  if (g == NULL || req_p == NULL)
    return SPC_EINVAL;
  int rc = p2p_args(g, t, peer, tag, send);
  if (rc == SPC_OK) /* the ids below are then the new ones */
    rc = spc__group_ready(g);
  if (rc < 0)
    return rc;
  Spcoll__Tensor tm = SPCOLL__TENSOR__INIT;
  tm.buffer_id = t->buf->id;
  tm.offset = t->offset;
  tm.dtype = (uint32_t)t->dtype;
  tm.n_shape = (size_t)t->ndim;
  tm.shape = (int64_t *)t->shape;
  Spcoll__P2p rq = SPCOLL__P2P__INIT;
  rq.group_id = g->id;
  rq.send = send;
  rq.peer = peer;
  rq.tag = tag;
  rq.tensor = &tm;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_P2P;
  f.p2p = &rq;
  rc = spc__send(g->client, &f, -1, req_p);
  if (rc == SPC_OK)
    (*req_p)->source_p = src_p, (*req_p)->group_id = g->id;
  return rc;
}

int spc_start_send(spc_group *g, const spc_tensor *t, int dst, int tag,
                   spc_request **req_p) {
  return p2p_start(g, t, dst, tag, 1, NULL, req_p);
}

int spc_start_recv(spc_group *g, const spc_tensor *t, int src, int tag,
                   int *src_p, spc_request **req_p) {
  return p2p_start(g, t, src, tag, 0, src_p, req_p);
}

int spc_send(spc_group *g, const spc_tensor *t, int dst, int tag) {
  spc_request *req;
  int rc = spc_start_send(g, t, dst, tag, &req);
  return rc < 0 ? rc : spc_wait(&req);
}

int spc_recv(spc_group *g, const spc_tensor *t, int src, int tag,
             int *src_p) {
  spc_request *req;
  int rc = spc_start_recv(g, t, src, tag, src_p, &req);
  return rc < 0 ? rc : spc_wait(&req);
}
