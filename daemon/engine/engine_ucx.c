#include "engine_ucx.h"

#include "op_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"
#include "plan_cut.h"

typedef struct spd_xop spd_xop;

/* One stream of the op: its iov list lives until UCX is done with it. */
typedef struct {
  spd_xop *x;
  ucp_dt_iov_t *iov;
  size_t niov, cap;
} xstream;

struct spd_xop {
  spd_op *op;
  spd_mover_done_cb done;
  spk_cut cut;
  int *node_of;
  uint8_t **bases;            /* local tensors and proxies */
  uint8_t **proxies;          /* to free: [world * SPK_T_COUNT] */
  int phase;                  /* 0, 1, then 2: finished */
  int inflight;               /* streams and local plans not yet done */
  int failed;
  int stepping;               /* in xop_step: completions only count */
  uint64_t dead;              /* nodes that post no stream of this op */
  xstream *streams;           /* of the current phase */
  size_t nstreams;
  uint64_t sent;
};

/* Tag of a stream: sender node, phase, receiver's record id and the op's
 * sequence number, so streams of different ops and groups never match. */
static uint64_t stream_tag(int sender, int phase, uint64_t rec, uint64_t seq) {
  return ((uint64_t)sender << 58) | ((uint64_t)phase << 57) |
         ((rec & 0x1ffffffu) << 32) | (seq & 0xffffffffu);
}

static void xop_free(spd_xop *x) {
  for (size_t i = 0; i < x->nstreams; i++)
    free(x->streams[i].iov);
  free(x->streams);
  int world = x->op->group->world;
  if (x->proxies != NULL)
    for (int i = 0; i < world * SPK_T_COUNT; i++)
      free(x->proxies[i]);
  free(x->proxies);
  free(x->bases);
  free(x->node_of);
  spk_cut_free(&x->cut);
  x->op->xop = NULL;
  free(x);
}

static void xop_fail(spd_xop *x, int status, const char *msg) {
  if (x->failed)
    return;
  x->failed = 1;
  spd_op *op = x->op;
  op->fail_status = status;
  snprintf(op->fail_msg, sizeof(op->fail_msg), "%s", msg);
  spd_group_break(op->group, status, msg);
}

static void xop_step(spd_xop *x);

static void on_local_done(void *arg) {
  spd_xop *x = arg;
  x->inflight--;
  xop_step(x);
}

static void on_stream_done(void *arg, int status, const char *msg) {
  xstream *s = arg;
  spd_xop *x = s->x;
  x->inflight--;
  if (status < 0)
    xop_fail(x, status, msg);
  xop_step(x);
}

static void iov_add(void *arg, uint8_t *ptr, uint64_t len) {
  xstream *s = arg;
  if (s->niov == s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 16;
    ucp_dt_iov_t *n = realloc(s->iov, ncap * sizeof(*n));
    if (n == NULL) {
      s->cap = SIZE_MAX; /* marks the failure for stream_build */
      return;
    }
    s->iov = n, s->cap = ncap;
  }
  if (s->cap == SIZE_MAX)
    return;
  s->iov[s->niov++] = (ucp_dt_iov_t){ptr, len};
}

static int stream_build(spd_xop *x, const spk_stream *st, int recv,
                        xstream *s, spk_err *err) {
  s->x = x;
  for (size_t i = 0; i < st->npieces; i++) {
    spk_span span;
    spk_piece_span(&x->op->plan, &x->cut, &st->pieces[i], recv, &span);
    uint8_t *base = x->bases[span.rank * SPK_T_COUNT + span.t];
    spk_span_walk(&span, base, iov_add, s);
    if (s->cap == SIZE_MAX)
      return spk_err_set(err, SPK_ENO_MEMORY, "realloc of a stream's iov "
                         "list failed at %zu entries", s->niov);
  }
  return SPK_OK;
}

/* Post every non-empty stream of the phase, both directions. */
static int phase_post(spd_xop *x, int ph, spk_err *err) {
  spd_group *g = x->op->group;
  int self = spd_peer_self(g->ctx), n = x->cut.nnodes;
  x->streams = calloc((size_t)n * 2, sizeof(*x->streams));
  if (x->streams == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of %d streams failed",
                       n * 2);
  x->nstreams = (size_t)n * 2;
  for (int node = 0; node < n; node++)
    for (int recv = 0; recv < 2; recv++) {
      const spk_stream *st = recv ? &x->cut.recv[ph][node]
                                  : &x->cut.send[ph][node];
      if (st->bytes == 0 || (x->dead & (1ull << node)))
        continue;
      xstream *s = &x->streams[node * 2 + recv];
      int rc = stream_build(x, st, recv, s, err);
      uint64_t tag = recv ? stream_tag(node, ph, g->rec, x->op->seq)
                          : stream_tag(self, ph, g->peer_rec[node], x->op->seq);
      if (rc == SPK_OK)
        rc = spd_peer_stream(g->ctx, node, recv, tag, s->iov, s->niov,
                             st->bytes, on_stream_done, s, err);
      if (rc == SPK_ENODE_LOST) {
        /* Not connected: nothing to meet there; the others go on. */
        xop_fail(x, rc, err->msg);
        continue;
      }
      if (rc < 0)
        return rc;
      x->inflight++;
      if (!recv)
        x->sent += st->bytes;
    }
  return SPK_OK;
}

static void phase_end(spd_xop *x) {
  for (size_t i = 0; i < x->nstreams; i++)
    free(x->streams[i].iov);
  free(x->streams);
  x->streams = NULL;
  x->nstreams = 0;
}

/* Advance once nothing is in flight: phase-0 streams, local reduce steps,
 * phase-1 streams, local moves, done. */
static void xop_step(spd_xop *x) {
  /* Posting a stream runs the worker, which may finish another stream of
   * this op: that completion only counts down, the loop here goes on. */
  if (x->inflight > 0 || x->stepping)
    return;
  x->stepping = 1;
  spd_op *op = x->op;
  spd_ctx *ctx = op->group->ctx;
  spk_err err;
  /* A failed op skips its local steps but still posts its streams. */
  while (x->inflight == 0 && x->phase < 4) {
    int rc = SPK_OK, step = x->phase++;
    if (step == 0 || step == 2) {
      phase_end(x);
      rc = phase_post(x, step / 2, &err);
    } else if (!x->failed) {
      spk_plan *l = &x->cut.local[step / 2];
      if (l->nmoves + l->nreduces > 0) {
        rc = spd_mover_submit(ctx->mover, l, x->bases, on_local_done, x, &err);
        if (rc == SPK_OK)
          x->inflight++;
      }
    }
    if (rc < 0)
      xop_fail(x, rc, err.msg);
  }
  x->stepping = 0;
  if (x->inflight > 0)
    return;
  ctx->engine_stats[SPD_ENGINE_UCX].bytes += x->sent;
  phase_end(x);
  spd_mover_done_cb done = x->done;
  xop_free(x);
  done(op);
}

static int xop_prepare(spd_xop *x, spk_err *err) {
  spd_op *op = x->op;
  spd_group *g = op->group;
  int world = g->world, self = spd_peer_self(g->ctx);
  x->node_of = malloc((size_t)world * sizeof(int));
  x->bases = calloc((size_t)world * SPK_T_COUNT, sizeof(*x->bases));
  x->proxies = calloc((size_t)world * SPK_T_COUNT, sizeof(*x->proxies));
  if (x->node_of == NULL || x->bases == NULL || x->proxies == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "allocation for a cross-node op "
                       "of %d ranks failed", world);
  /* From the op, not the group: a remote rank may have left the group
   * after it sent its part of this op. */
  for (int r = 0; r < world; r++)
    x->node_of[r] = op->ranks[r].remote ? op->ranks[r].node : self;
  int rc = spk_plan_cut(&op->plan, x->node_of, spd_peer_count(g->ctx), self,
                        &x->cut, err);
  for (int i = 0; rc == SPK_OK && i < world * SPK_T_COUNT; i++) {
    spd_op_rank *r = &op->ranks[i / SPK_T_COUNT];
    spd_buffer *buf = r->buf[i % SPK_T_COUNT];
    x->bases[i] = op->bases[i];
    if (buf != NULL)
      rc = spd_peer_map(g->ctx, buf, err);
    else if (x->cut.proxy[i]) {
      const spk_shape *sh = i % SPK_T_COUNT == SPK_T_IN ? &r->args.in
                                                         : &r->args.out;
      size_t bytes = spk_dtype_size(r->args.dtype);
      for (int d = 0; d < sh->ndim; d++)
        bytes *= (size_t)sh->dim[d];
      x->proxies[i] = malloc(bytes ? bytes : 1);
      if (x->proxies[i] == NULL)
        rc = spk_err_set(err, SPK_ENO_MEMORY, "malloc of a %zu-byte proxy of "
                         "rank %d's tensor failed", bytes, i / SPK_T_COUNT);
      x->bases[i] = x->proxies[i];
    }
  }
  return rc;
}

int spd_engine_ucx_submit(spd_op *op, spd_mover_done_cb done, spk_err *err) {
  spd_xop *x = calloc(1, sizeof(*x));
  if (x == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a cross-node op "
                       "failed");
  x->op = op;
  x->done = done;
  op->xop = x;
  int rc = xop_prepare(x, err);
  if (rc < 0) {
    /* The others would wait on our streams: they hear we will not run. */
    spd_engine_ucx_tell_failed(op, rc, err->msg);
    spd_group_break(op->group, rc, err->msg);
    xop_free(x);
    return rc;
  }
  SPD_DEBUG(&op->group->ctx->log, "group '%s' op %llu: cross-node run",
            op->group->name, (unsigned long long)op->seq);
  /* From here on failures are reported through done(). */
  xop_step(x);
  return SPK_OK;
}

void spd_engine_ucx_abort(spd_op *op, int status, const char *msg,
                          int dead_node) {
  spd_xop *x = op->xop;
  if (x == NULL)
    return;
  xop_fail(x, status, msg);
  if (dead_node < 0)
    return;
  x->dead |= 1ull << dead_node;
  for (size_t i = 0; i < x->nstreams; i++)
    if (x->streams[i].iov != NULL && (int)(i / 2) == dead_node)
      spd_peer_stream_cancel(op->group->ctx, &x->streams[i]);
}

void spd_engine_ucx_tell_failed(spd_op *op, int status, const char *msg) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__OpFail f = SPCOLL__PEER__OP_FAIL__INIT;
  spd_group *g = op->group;
  f.rec = g->rec;
  f.seq = op->seq;
  f.status = status;
  f.reason = (char *)msg;
  m.body_case = SPCOLL__PEER__MSG__BODY_OP_FAIL;
  m.op_fail = &f;
  int nodes[SPD_MAX_NODES], n = spd_group_other_nodes(g, nodes);
  for (int i = 0; i < n; i++)
    spd_peer_send(g->ctx, nodes[i], &m);
}

static int ucx_wants(const spd_work *w) {
  return w->multinode ? 2 : 0;
}

static int ucx_submit(spd_work *w, spk_err *err) {
  return spd_engine_ucx_submit(w->op, spd_work_op_done, err);
}

static void ucx_abort(spd_work *w, int status, const char *msg,
                      int dead_node) {
  spd_engine_ucx_abort(w->op, status, msg, dead_node);
}

/* The buffer's UCX registration (made for its first cross-node op). */
static void ucx_forget_buffer(spd_ctx *ctx, spd_buffer *buf) {
  if (buf->peer_memh != NULL)
    spd_peer_buffer_release(ctx, buf);
}

const spd_engine spd_engine_ucx = {
    .built = 1,
    .counts_own_bytes = 1, /* bytes as sent to peers */
    .wants = ucx_wants,
    .submit = ucx_submit,
    .abort = ucx_abort,
    .forget_buffer = ucx_forget_buffer,
};
