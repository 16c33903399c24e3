/* The cross-node engine: runs this node's cut of a plan (kernels/plan_cut.h)
 * — phase-0 streams, local reduce steps, phase-1 streams, local moves —
 * with one tagged UCX message per peer node and phase. The local steps are
 * work items of their own, run by whichever engine the table picks for
 * this node's tensors (composition: the UCX engine moves bytes between
 * nodes, never within one). It moves host memory only: device tensors
 * across nodes find no engine (issue 17). A failed work item still posts every stream of
 * its cut (skipping only its local steps), so every node's sends and
 * receives meet and nothing hangs; streams with a lost node fail at once.
 * Its failure breaks the group (work.broken). Loop thread only. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "peer.h"
#include "plan_cut.h"
typedef struct spd_xop spd_xop;

/* One stream of the op: its iov list lives until UCX is done with it. */
typedef struct {
  spd_xop *x;
  spd_iov *iov;
  size_t niov, cap;
  int posted, done;
} xstream;

struct spd_xop {
  spd_work *w;
  spk_cut cut;
  uint8_t **bases;            /* local tensors and proxies */
  uint8_t **proxies;          /* to free: [world * SPK_T_COUNT] */
  int phase;                  /* 0, 1, then 2: finished */
  int inflight;               /* streams and local plans not yet done */
  int failed;                 /* status and msg say why */
  int status;
  char msg[256];
  int stepping;               /* in xop_step: completions only count */
  uint64_t dead;              /* nodes that post no stream of this op */
  spd_work local;             /* the running local step's work item */
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
  int world = x->w->world;
  if (x->proxies != NULL)
    for (int i = 0; i < world * SPK_T_COUNT; i++)
      free(x->proxies[i]);
  free(x->proxies);
  free(x->bases);
  spk_cut_free(&x->cut);
  x->w->priv = NULL;
  free(x);
}

static void xop_fail(spd_xop *x, int status, const char *msg) {
  if (x->failed)
    return;
  x->failed = 1;
  x->status = status;
  snprintf(x->msg, sizeof(x->msg), "%s", msg);
  x->w->broken(x->w->arg, status, msg, 0);
}

static void xop_step(spd_xop *x);

static void on_local_done(void *arg, int status, const char *msg) {
  spd_xop *x = arg;
  x->inflight--;
  if (status < 0)
    xop_fail(x, status, msg);
  xop_step(x);
}

/* A local step: a node-local work item over this node's tensors and the
 * proxies, handed to the engine the table picks for it (the config's
 * `mover` when it can). */
static int local_submit(spd_xop *x, const spk_plan *l, spk_err *err) {
  spd_work *w = x->w;
  x->local = *w;
  x->local.plan = l;
  x->local.bases = x->bases;
  x->local.multinode = 0;
  x->local.done = on_local_done;
  x->local.arg = x;
  x->local.broken = NULL;
  x->local.priv = NULL;
  int kind = spd_engine_pick(&x->local, spd_engine_find(w->ctx->cfg.mover));
  if (kind < 0)
    return spk_err_set(err, SPK_EUNSUPPORTED, "no engine of this spcolld "
                       "runs the node-local part of group '%s' op %llu",
                       w->name, (unsigned long long)w->seq);
  return spd_engines[kind]->submit(&x->local, err);
}

static void on_stream_done(void *arg, int status, const char *msg) {
  xstream *s = arg;
  spd_xop *x = s->x;
  s->done = 1;
  x->inflight--;
  if (status < 0)
    xop_fail(x, status, msg);
  xop_step(x);
}

static void iov_add(void *arg, uint8_t *ptr, uint64_t len) {
  xstream *s = arg;
  if (s->niov == s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 16;
    spd_iov *n = realloc(s->iov, ncap * sizeof(*n));
    if (n == NULL) {
      s->cap = SIZE_MAX; /* marks the failure for stream_build */
      return;
    }
    s->iov = n, s->cap = ncap;
  }
  if (s->cap == SIZE_MAX)
    return;
  s->iov[s->niov++] = (spd_iov){ptr, len};
}

static int stream_build(spd_xop *x, const spk_stream *st, int recv,
                        xstream *s, spk_err *err) {
  s->x = x;
  for (size_t i = 0; i < st->npieces; i++) {
    spk_span span;
    spk_piece_span(x->w->plan, &x->cut, &st->pieces[i], recv, &span);
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
  spd_work *w = x->w;
  int self = spd_peer_self(w->ctx), n = x->cut.nnodes;
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
      uint64_t tag = recv ? stream_tag(node, ph, w->key, w->seq)
                          : stream_tag(self, ph, w->peer_key[node], w->seq);
      if (rc == SPK_OK)
        rc = spd_peer_stream(w->ctx, node, recv, tag, s->iov, s->niov,
                             st->bytes, on_stream_done, s, err);
      if (rc == SPK_ENODE_LOST) {
        /* Not connected: nothing to meet there; the others go on. */
        xop_fail(x, rc, err->msg);
        continue;
      }
      if (rc < 0)
        return rc;
      x->inflight++;
      s->posted = 1;
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
  spd_work *w = x->w;
  spd_ctx *ctx = w->ctx;
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
        rc = local_submit(x, l, &err);
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
  int status = x->failed ? x->status : SPK_OK;
  char msg[sizeof(x->msg)];
  snprintf(msg, sizeof(msg), "%s", x->msg);
  xop_free(x);
  w->done(w->arg, status, msg);
}

static int xop_prepare(spd_xop *x, spk_err *err) {
  spd_work *w = x->w;
  int world = w->world;
  x->bases = calloc((size_t)world * SPK_T_COUNT, sizeof(*x->bases));
  x->proxies = calloc((size_t)world * SPK_T_COUNT, sizeof(*x->proxies));
  if (x->bases == NULL || x->proxies == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "allocation for a cross-node op "
                       "of %d ranks failed", world);
  int rc = spk_plan_cut(w->plan, w->node_of, spd_peer_count(w->ctx),
                        spd_peer_self(w->ctx), &x->cut, err);
  for (int i = 0; rc == SPK_OK && i < world * SPK_T_COUNT; i++) {
    const spd_work_rank *r = &w->ranks[i / SPK_T_COUNT];
    const spd_work_tensor *t = &r->t[i % SPK_T_COUNT];
    x->bases[i] = w->bases[i];
    if (t->here)
      rc = spd_peer_map(w->ctx, t->buf_base, t->buf_size, t->buf_id,
                        &t->state[SPD_ENGINE_UCX], err);
    else if (x->cut.proxy[i]) {
      const spk_shape *sh = i % SPK_T_COUNT == SPK_T_IN ? &r->args->in
                                                         : &r->args->out;
      size_t bytes = spk_dtype_size(r->args->dtype);
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

static int ucx_submit(spd_work *w, spk_err *err) {
  spd_xop *x = calloc(1, sizeof(*x));
  if (x == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a cross-node op "
                       "failed");
  x->w = w;
  w->priv = x;
  int rc = xop_prepare(x, err);
  if (rc < 0) {
    /* The others would wait on our streams: they hear we will not run. */
    w->broken(w->arg, rc, err->msg, 1);
    xop_free(x);
    return rc;
  }
  SPD_DEBUG(&w->ctx->log, "group '%s' op %llu: cross-node run", w->name,
            (unsigned long long)w->seq);
  /* From here on failures are reported through done(). */
  xop_step(x);
  return SPK_OK;
}

/* dead_node >= 0: that node will post no stream of this work (it failed
 * before running it): receives from it are cancelled, nothing more is
 * posted with it. */
static void ucx_abort(spd_work *w, int status, const char *msg,
                      int dead_node) {
  spd_xop *x = w->priv;
  if (x == NULL)
    return;
  xop_fail(x, status, msg);
  if (dead_node < 0)
    return;
  x->dead |= 1ull << dead_node;
  for (size_t i = 0; i < x->nstreams; i++)
    if (x->streams[i].iov != NULL && (int)(i / 2) == dead_node)
      spd_peer_stream_cancel(w->ctx, &x->streams[i]);
}

/* What a running op waits for, for stats: its step, the streams not yet
 * done (node numbers), the dead nodes' mask. */
static int ucx_describe(const spd_work *w, char *buf, size_t len) {
  const spd_xop *x = w->priv;
  if (x == NULL)
    return snprintf(buf, len, "not started");
  int n = snprintf(buf, len, "step=%d inflight=%d failed=%d dead=%#llx "
                   "waiting=", x->phase, x->inflight, x->failed,
                   (unsigned long long)x->dead);
  for (size_t i = 0; i < x->nstreams && n > 0 && (size_t)n < len; i++) {
    const xstream *st = &x->streams[i];
    if (st->posted && !st->done)
      n += snprintf(buf + n, len - (size_t)n, "%s%zu,", i % 2 ? "recv<-" :
                    "send->", i / 2);
  }
  return n;
}

/* Across nodes, host memory only: UCX here sends from host addresses. */
static int ucx_wants(const spd_work *w) {
  return w->multinode && !w->device && w->broken != NULL ? 2 : 0;
}

/* The buffer's UCX registration (made for its first cross-node op). */
static void ucx_forget_buffer(spd_ctx *ctx, void **state) {
  spd_peer_unmap(ctx, state);
}

const spd_engine spd_engine_ucx = {
    .built = 1,
    .counts_own_bytes = 1, /* bytes as sent to peers */
    .wants = ucx_wants,
    .submit = ucx_submit,
    .abort = ucx_abort,
    .forget_buffer = ucx_forget_buffer,
    .describe = ucx_describe,
};
