/* Op requests: describe the op, send it, and complete it (blocking or
 * through a request). Argument agreement is the daemon's to check, so that
 * a rank's bad argument fails the op on every rank instead of leaving the
 * others waiting. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "client_fast.h"
#include "client_gpu.h"
#include "planner.h"

static void tensor_msg(Spcoll__Tensor *m, const spc_tensor *t) {
  m->buffer_id = t->buf->id;
  m->offset = spc__gpu_wire_offset(t->buf, t->offset);
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

/* Build and send the request. Tensors may be NULL only for ops that take
 * none (group split). Device tensors carry stream events (ordered on
 * stream). */
static int op_send(spc_group *g, const spc_op *op, const spc_tensor *in,
                   const spc_tensor *out, void *stream, spc_request **req_p) {
  spc_client *c = g->client;
  Spcoll__Tensor tin = SPCOLL__TENSOR__INIT, tout = SPCOLL__TENSOR__INIT;
  Spcoll__OpRequest rq = SPCOLL__OP_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  if (in != NULL) {
    tensor_msg(&tin, in);
    rq.input = &tin;
  }
  if (out != NULL) {
    tensor_msg(&tout, out);
    rq.output = &tout;
  }
  int32_t dims[2] = {op->dims[0], op->dims[1]};
  rq.group_id = g->id;
  rq.op = (uint32_t)op->kind;
  rq.n_dims = (size_t)op->ndims;
  rq.dims = dims;
  rq.n_sizes = op->sizes ? (size_t)(op->nsizes ? op->nsizes : g->world) : 0;
  rq.sizes = (int64_t *)op->sizes;
  rq.n_sizes2 = op->sizes2 ? (size_t)(op->nsizes2 ? op->nsizes2 : g->world)
                           : 0;
  rq.sizes2 = (int64_t *)op->sizes2;
  rq.scalar = op->scalar;
  rq.flags = op->flags;
  f.body_case = SPCOLL__FRAME__BODY_OP;
  f.op = &rq;
  spc__gpu_opev ev;
  int rc = spc__gpu_op_events(c, in, stream, &rq, &ev);
  if (rc < 0)
    return rc;
  rc = spc__send(c, &f, -1, req_p);
  if (rc == SPC_OK)
    (*req_p)->group_id = g->id;
  spc__gpu_op_sent(c, &ev, rc == SPC_OK ? *req_p : NULL);
  return rc;
}

int spc_start(spc_group *g, const spc_op *op, const spc_tensor *in,
              const spc_tensor *out, spc_request **req_p) {
  return spc__start(g, op, in, out, NULL, req_p);
}

/* The op issued: its place in the group's sequence (client_sequence.c),
 * then through the group's segment (issue 18) or to the daemon. *unsent
 * set when the send found the daemon gone (SPC_ERESTARTED). */
static int issue(spc_group *g, const spc_op *op, const spc_tensor **in,
                 const spc_tensor **out, void *stream, int fast, spc__wrap *w,
                 spc_request **req_p, int *unsent) {
  spc_client *c = g->client;
  int rc;
  *unsent = 0;
  if ((rc = spc__group_issue(g)) < 0)
    return rc;
  if (fast > 0 && g->fast != NULL) {
    int handled;
    rc = spc__fast_run(g, op, *in, *out, &handled);
    if (rc < 0 && c->hangup) /* the daemon went: SPC_ERESTARTED */
      rc = spc__hangup_take(c);
    if (handled) {
      *req_p = NULL;
      return rc;
    }
  } else if ((rc = spc__fast_slow(g, op, *in, *out)) < 0) {
    return c->hangup ? spc__hangup_take(c) : rc;
  }
  /* Failed: see client_wrap.c. Staged once; not wrapped the next try. */
  if (w != NULL && spc__wrapped(*in, *out))
    (void)spc__wrap_begin(c, w, in, out);
  rc = op_send(g, op, *in, *out, stream, req_p);
  *unsent = rc == SPC_ERESTARTED && c->lost;
  return rc;
}

/* fast: -1 the op takes the daemon path (the other ranks hear so through
 * the group's segment), 1 it may run through the segment (spc_run, which
 * passes w: caller memory is staged in it for the daemon's path). */
static int start(spc_group *g, const spc_op *op, const spc_tensor *in,
                 const spc_tensor *out, void *stream, int fast, spc__wrap *w,
                 spc_request **req_p) {
  if (g == NULL || op == NULL || req_p == NULL)
    return SPC_EINVAL;
  spc_client *c = g->client;
  int rc = tensor_valid(c, in, "input");
  if (rc == SPC_OK)
    rc = tensor_valid(c, out, "output");
  if (rc < 0)
    return rc;
  /* Before the segment hears of the op: the others must not wait for it. */
  if (w == NULL && spc__wrapped(in, out))
    return spc__fail(c, SPC_EINVAL, "the %s tensor wraps caller memory "
                     "(spc_buffer_wrap): only spc_run takes it",
                     in->buf->wrapped ? "input" : "output");
  if (op->ndims < 0 || op->ndims > 2 || op->nsizes < 0 || op->nsizes2 < 0)
    return spc__fail(c, SPC_EINVAL, "op descriptor is not one made by an "
                     "spc_op_* constructor");
  /* For other ops nsizes 0 means "one entry per rank"; a packed op's list
   * is the caller's sequences and must say how many there are. */
  if ((op->kind == SPK_OP_PACKED_SPLIT || op->kind == SPK_OP_PACKED_GATHER) &&
      (op->sizes == NULL || op->nsizes < 1))
    return spc__fail(c, SPC_EINVAL, "packed ops need at least one sequence "
                     "length: seq_lens %s, nseq %d",
                     op->sizes ? "given" : "NULL", op->nsizes);
  /* Every rank takes the symmetric path for the same ops: in no group's
   * sequence, no segment's or daemon's. Before an earlier op's failure is
   * reported, which reaches the ranks at different times: a rank that
   * skipped its part would hold the others (spc_async_error reports it). */
  if (in->buf->gpu != NULL && spc__sym_try(g, op, in, out, stream, req_p, &rc))
    return rc;
  if ((rc = spc__async_take(c)) < 0) /* an earlier op on a stream failed */
    return rc;
  spc__ring_make(c); /* after a reconnect: before any frame is built */
  int unsent = 0;
  for (int tries = 0; tries < 3; tries++) {
    rc = issue(g, op, &in, &out, stream, fast, w, req_p, &unsent);
    if (!unsent)
      return rc;
    /* The daemon was gone before the op reached it (the send failed, or
     * found it gone): no daemon counts it, so neither does g; the next
     * try reconnects and rejoins first, and then issues it (or fails it,
     * when another rank's copy had reached the old daemon). */
    g->issued--;
  }
  return rc;
}

int spc__start(spc_group *g, const spc_op *op, const spc_tensor *in,
               const spc_tensor *out, void *stream, spc_request **req_p) {
  return start(g, op, in, out, stream, -1, NULL, req_p);
}

/* The answer of g's op. Where the caller handed the client's lock over
 * (spc_client_set_wait_lock) it is released while the answer is not
 * here; another thread may then read it off the socket, so each look is
 * bounded (a millisecond) rather than woken. */
static int wait_answer(spc_group *g, spc_request **reqp) {
  spc_client *c = g->client;
  spc_request *req = *reqp;
  while (c->wait_release != NULL && spc__pump(c, req, 0) == SPC_OK &&
         !req->done) {
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    spc__wait_release(g);
    (void)poll(&p, 1, 1); /* any outcome: the next pump looks */
    spc__wait_take(g);
  }
  return spc_wait(reqp);
}

static int run_once(spc_group *g, const spc_op *op, const spc_tensor *in,
                    const spc_tensor *out) {
  spc_request *req = NULL;
  spc__wrap w = {0};
  if (g != NULL)
    g->client->not_run = 0;
  int rc = start(g, op, in, out, NULL, 1, &w, &req);
  if (rc < 0 || req == NULL) /* failed, or done through the segment */
    return rc;
  if (!req->sym)
    spc__fast_await(g, req);
  return spc__wrap_end(g->client, &w, wait_answer(g, &req));
}

/* g's last op was refused as not run (c->not_run): it is no op of the
 * group's sequence after all, and the connection ends as if the daemon
 * had gone (it is going), so that the op goes again, to the new daemon
 * (client_restart.c). */
static int run_again(spc_group *g) {
  spc_client *c = g->client;
  c->not_run = 0;
  g->issued--;
  return c->lost ? SPC_ERESTARTED /* spc__conn_gone's status when lost */
                 : spc__conn_gone(c, "refused: it is being upgraded", 0);
}

int spc_run(spc_group *g, const spc_op *op, const spc_tensor *in,
            const spc_tensor *out) {
  int rc = run_once(g, op, in, out);
  for (int tries = 0; rc == SPC_ERESTARTED && g != NULL &&
                      g->client->not_run && tries < 3; tries++) {
    if (run_again(g) != SPC_ERESTARTED) /* reconnecting is off */
      break;
    rc = run_once(g, op, in, out);
  }
  return rc;
}

/* ---- constructors ---- */

static spc_op op_dim(spk_op_kind kind, int dim, const int64_t *sizes) {
  spc_op op = {.kind = kind, .ndims = 1, .dims = {dim, 0}, .sizes = sizes};
  return op;
}

spc_op spc_op_split(int dim, const int64_t *sizes) {
  return op_dim(SPK_OP_SPLIT, dim, sizes);
}

spc_op spc_op_all_gather(int dim, const int64_t *sizes) {
  return op_dim(SPK_OP_ALL_GATHER, dim, sizes);
}

spc_op spc_op_all_to_all(int scatter_dim, int gather_dim, int64_t gather_size) {
  spc_op op = {.kind = SPK_OP_ALL_TO_ALL, .ndims = 2,
               .dims = {scatter_dim, gather_dim}, .scalar = gather_size};
  return op;
}

spc_op spc_op_all_to_all_v(const int64_t *in_splits,
                           const int64_t *out_splits) {
  spc_op op = {.kind = SPK_OP_ALL_TO_ALL_V, .sizes = in_splits,
               .sizes2 = out_splits};
  return op;
}

spc_op spc_op_all_reduce(spc_reduce_op red) {
  spc_op op = {.kind = SPK_OP_ALL_REDUCE, .flags = (unsigned)red};
  return op;
}

spc_op spc_op_reduce_scatter(int dim, const int64_t *sizes) {
  return op_dim(SPK_OP_REDUCE_SCATTER, dim, sizes);
}

spc_op spc_op_zigzag_split(int dim) {
  return op_dim(SPK_OP_ZIGZAG_SPLIT, dim, NULL);
}

spc_op spc_op_zigzag_gather(int dim) {
  return op_dim(SPK_OP_ZIGZAG_GATHER, dim, NULL);
}

spc_op spc_op_packed_split(int dim, const int64_t *seq_lens, int nseq) {
  spc_op op = op_dim(SPK_OP_PACKED_SPLIT, dim, seq_lens);
  op.nsizes = nseq;
  return op;
}

spc_op spc_op_packed_gather(int dim, const int64_t *seq_lens, int nseq) {
  spc_op op = op_dim(SPK_OP_PACKED_GATHER, dim, seq_lens);
  op.nsizes = nseq;
  return op;
}

spc_op spc_op_scaled(spc_op op, spc_grad_scale scale) {
  op.flags = (op.flags & ~(unsigned)SPK_FLAG_SCALE_MASK) |
             ((unsigned)scale << SPK_FLAG_SCALE_SHIFT);
  return op;
}

int spc_out_shape(const spc_group *g, const spc_op *op, const spc_tensor *in,
                  int64_t *out_shape, int *ndim_p) {
  if (g == NULL || op == NULL || in == NULL || out_shape == NULL ||
      ndim_p == NULL)
    return SPC_EINVAL;
  spk_op_args a = {.op = (spk_op_kind)op->kind, .dtype = (spk_dtype)in->dtype,
                   .ndims = op->ndims, .scalar = op->scalar,
                   .flags = op->flags};
  a.in.ndim = in->ndim;
  memcpy(a.in.dim, in->shape, sizeof(in->shape));
  a.dims[0] = op->dims[0], a.dims[1] = op->dims[1];
  a.sizes = op->sizes;
  a.nsizes = op->sizes ? (op->nsizes ? op->nsizes : g->world) : 0;
  a.sizes2 = op->sizes2;
  a.nsizes2 = op->sizes2 ? (op->nsizes2 ? op->nsizes2 : g->world) : 0;
  spk_shape out;
  spk_err err;
  int rc = spk_out_shape(&a, g->world, g->rank, &out, &err);
  if (rc < 0)
    return spc__fail(g->client, rc, "%s", err.msg);
  memcpy(out_shape, out.dim, (size_t)out.ndim * sizeof(int64_t));
  *ndim_p = out.ndim;
  return SPC_OK;
}
