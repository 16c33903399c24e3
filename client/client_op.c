/* Op requests: describe the op, send it, and complete it (blocking or
 * through a request). Argument agreement is the daemon's to check, so that
 * a rank's bad argument fails the op on every rank instead of leaving the
 * others waiting. */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

typedef struct {
  spk_op_kind op;
  int ndims;
  int dims[4];
  const int64_t *sizes;
  int nsizes;
  const int64_t *sizes2;
  int nsizes2;
  int64_t scalar;
  uint32_t flags;
} op_params;

static void tensor_msg(Spcoll__Tensor *m, const spc_tensor *t) {
  m->buffer_id = t->buf->id;
  m->offset = t->offset;
  m->dtype = (uint32_t)t->dtype;
  m->n_shape = (size_t)t->ndim;
  m->shape = (int64_t *)t->shape;
}

static int tensor_valid(spc_client *c, const spc_tensor *t, const char *what) {
  if (t == NULL || t->buf == NULL)
    return spc__fail(c, SPC_EINVAL, "%s tensor is NULL or not initialized",
                     what);
  if (t->buf->client != c)
    return spc__fail(c, SPC_EINVAL, "%s tensor's buffer belongs to another "
                     "client", what);
  return SPC_OK;
}

static int op_submit(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                     const op_params *p, spc_request **req_p) {
  if (g == NULL || req_p == NULL)
    return SPC_EINVAL;
  spc_client *c = g->client;
  int rc = tensor_valid(c, in, "input");
  if (rc == SPC_OK)
    rc = tensor_valid(c, out, "output");
  if (rc < 0)
    return rc;
  Spcoll__Tensor tin = SPCOLL__TENSOR__INIT, tout = SPCOLL__TENSOR__INIT;
  Spcoll__OpRequest rq = SPCOLL__OP_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  tensor_msg(&tin, in);
  tensor_msg(&tout, out);
  int32_t dims[4];
  for (int i = 0; i < p->ndims; i++)
    dims[i] = p->dims[i];
  rq.group_id = g->id;
  rq.op = (uint32_t)p->op;
  rq.input = &tin;
  rq.output = &tout;
  rq.n_dims = (size_t)p->ndims;
  rq.dims = dims;
  rq.n_sizes = p->sizes ? (size_t)p->nsizes : 0;
  rq.sizes = (int64_t *)p->sizes;
  rq.n_sizes2 = p->sizes2 ? (size_t)p->nsizes2 : 0;
  rq.sizes2 = (int64_t *)p->sizes2;
  rq.scalar = p->scalar;
  rq.flags = p->flags;
  f.body_case = SPCOLL__FRAME__BODY_OP;
  f.op = &rq;
  return spc__send(c, &f, -1, req_p);
}

int spc_all_gather_async(spc_group *g, const spc_tensor *in,
                         const spc_tensor *out, int dim, const int64_t *sizes,
                         spc_request **req_p) {
  op_params p = {.op = SPK_OP_ALL_GATHER, .ndims = 1, .dims = {dim},
                 .sizes = sizes, .nsizes = g ? g->world : 0};
  return op_submit(g, in, out, &p, req_p);
}

int spc_all_gather(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                   int dim, const int64_t *sizes) {
  spc_request *req;
  int rc = spc_all_gather_async(g, in, out, dim, sizes, &req);
  if (rc < 0)
    return rc;
  return spc_wait(&req);
}
