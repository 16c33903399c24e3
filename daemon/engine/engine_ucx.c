/* The cross-node engine: runs this node's cut of a plan (kernels/plan_cut.h)
 * — phase-0 streams, local reduce steps, phase-1 streams, local moves —
 * with one stream of tagged UCX messages per peer node and phase. The
 * local steps are work items of their own, run by whichever engine the
 * table picks for this node's tensors (composition: the UCX engine moves
 * bytes between nodes, never within one). A stream goes as its wire chunks
 * (SPD_PEER_CHUNK): from and into host memory directly; device tensors
 * through pinned staging (xnode_stage.h) unless this node's UCX moves
 * CUDA memory (xnode_direct), with their proxies in device memory, so the
 * local steps run on the GPU engines. A failed work item still posts every stream of
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
#include "xnode_stage.h"
typedef struct spd_xop spd_xop;

/* One stream of the op: its iov list lives until UCX is done with it. */
typedef struct {
  spd_xop *x;
  spd_iov *iov;
  size_t niov, cap;
  int posted, done;
  int pending;                /* its messages (or staged run) not done */
  spd_xstage_stream *staged;  /* device memory: the staged run */
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
  spd_xstage *stage;          /* device tensors: their staging */
  int direct;                 /* device tensors, UCX moves them itself */
  spd_work_rank *lranks;      /* device: the local steps' view, other */
  int *ldev;                  /* nodes' ranks on the proxies' GPU */
  spd_iov *scratch;           /* one message's iov list */
  size_t nscratch;
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
  spd_xstage_close(x->stage);
  free(x->lranks);
  free(x->ldev);
  free(x->scratch);
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

/* A part of the op counted in inflight is over: the local work item, or
 * the stage's start (ready events passed, proxies made). */
static void on_part_done(void *arg, int status, const char *msg) {
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
  x->local.partial = 1;
  x->local.done = on_part_done;
  x->local.arg = x;
  x->local.broken = NULL;
  x->local.priv = NULL;
  if (x->stage != NULL) {
    x->local.ranks = x->lranks;
    x->local.dev = x->ldev;
  }
  int kind = spd_engine_pick(&x->local, spd_engine_find(w->ctx->cfg.mover));
  if (kind < 0)
    return spk_err_set(err, SPK_EUNSUPPORTED, "no engine of this spcolld "
                       "runs the node-local part of group '%s' op %llu",
                       w->name, (unsigned long long)w->seq);
  return spd_engines[kind]->submit(&x->local, err);
}

/* A message of the stream (or its staged run) is done. */
static void on_stream_done(void *arg, int status, const char *msg) {
  xstream *s = arg;
  spd_xop *x = s->x;
  if (status < 0)
    xop_fail(x, status, msg);
  if (--s->pending > 0)
    return;
  s->done = 1;
  x->inflight--;
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

/* The iov entries of bytes [at, at + len) of the stream, into x->scratch. */
static int chunk_iov(spd_xop *x, const xstream *s, size_t *i, uint64_t *off,
                     uint64_t len, size_t *n_out, spk_err *err) {
  size_t n = 0;
  while (len > 0 && *i < s->niov) {
    int rc = spk_grow((void **)&x->scratch, n, &x->nscratch,
                      sizeof(*x->scratch), "iov entries", err);
    if (rc < 0)
      return rc;
    const spd_iov *v = &s->iov[*i];
    uint64_t take = v->len - *off < len ? v->len - *off : len;
    x->scratch[n++] = (spd_iov){(uint8_t *)v->base + *off, take};
    len -= take;
    *off += take;
    if (*off == v->len)
      (*i)++, *off = 0;
  }
  *n_out = n;
  return SPK_OK;
}

/* Host memory: every message of the stream at once, straight from and
 * into the tensors. Each counts in s->pending before it is posted (its
 * end may come inside spd_peer_stream, which runs the worker). */
static int host_post(spd_xop *x, xstream *s, int node, int recv,
                     uint64_t tag, uint64_t bytes, spk_err *err) {
  size_t i = 0, n = 0;
  uint64_t off = 0;
  int rc = SPK_OK;
  for (uint64_t at = 0; rc == SPK_OK && at < bytes; at += SPD_PEER_CHUNK) {
    uint64_t len = bytes - at < SPD_PEER_CHUNK ? bytes - at : SPD_PEER_CHUNK;
    rc = chunk_iov(x, s, &i, &off, len, &n, err);
    if (rc == SPK_OK) {
      s->pending++;
      rc = spd_peer_stream(x->w->ctx, node, recv, tag, x->scratch, n, len,
                           on_stream_done, s, err);
      if (rc < 0)
        s->pending--;
    }
  }
  return rc;
}

/* One stream: staged (device memory) or its messages straight (host). */
static int stream_post(spd_xop *x, xstream *s, const spk_stream *st,
                       int node, int recv, uint64_t tag, spk_err *err) {
  /* Held while posting: whatever was posted counts, even if a later
   * message failed, and messages may end before the last is posted. */
  s->pending = 1;
  s->posted = 1;
  x->inflight++;
  int rc = stream_build(x, st, recv, s, err);
  if (rc == SPK_OK && x->stage != NULL && !x->direct) {
    s->pending++;
    rc = spd_xstage_post(x->stage, node, recv, tag, s->iov, s->niov,
                         st->bytes, on_stream_done, s, &s->staged, err);
    if (rc < 0)
      s->pending--;
  } else if (rc == SPK_OK) {
    rc = host_post(x, s, node, recv, tag, st->bytes, err);
  }
  if (--s->pending == 0) {
    s->done = 1;
    x->inflight--;
  }
  return rc;
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
      uint64_t tag = recv ? stream_tag(node, ph, w->key, w->seq)
                          : stream_tag(self, ph, w->peer_key[node], w->seq);
      int rc = stream_post(x, s, st, node, recv, tag, err);
      if (rc == SPK_ENODE_LOST) {
        /* Not connected: nothing to meet there; the others go on. */
        xop_fail(x, rc, err->msg);
        continue;
      }
      if (rc < 0)
        return rc;
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

/* Bytes of rank r's tensor t: a proxy holds all of it. */
static size_t tensor_bytes(const spd_work_rank *r, int t) {
  const spk_shape *sh = t == SPK_T_IN ? &r->args->in : &r->args->out;
  size_t bytes = spk_dtype_size(r->args->dtype);
  for (int d = 0; d < sh->ndim; d++)
    bytes *= (size_t)sh->dim[d];
  return bytes;
}

/* The most staging buffers one phase of the cut takes at once. */
static int most_buffers(const spk_cut *cut) {
  int most = 0;
  for (int ph = 0; ph < 2; ph++) {
    int n = 0;
    for (int node = 0; node < cut->nnodes; node++)
      n += spd_xstage_buffers(cut->send[ph][node].bytes) +
           spd_xstage_buffers(cut->recv[ph][node].bytes);
    most = n > most ? n : most;
  }
  return most;
}

/* Device tensors: staging on the lowest GPU of this node's ranks, where
 * the proxies go too; the local steps see other nodes' ranks on it. */
static int stage_prepare(spd_xop *x, spk_err *err) {
  spd_work *w = x->w;
  int world = w->world, at = -1;
  for (int i = 0; i < world; i++)
    if (w->dev[i] >= 0 && (at < 0 || w->dev[i] < at))
      at = w->dev[i];
  x->lranks = malloc((size_t)world * sizeof(*x->lranks));
  x->ldev = malloc((size_t)world * sizeof(*x->ldev));
  if (x->lranks == NULL || x->ldev == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "allocation of the local view "
                       "of %d ranks failed", world);
  for (int i = 0; i < world; i++) {
    x->lranks[i] = w->ranks[i];
    x->ldev[i] = w->dev[i] >= 0 ? w->dev[i] : at;
    for (int t = 0; t < SPK_T_COUNT; t++)
      if (!w->ranks[i].t[t].here)
        x->lranks[i].t[t].dev = at;
  }
  return spd_xstage_open(w, at, x->direct ? 0 : most_buffers(&x->cut),
                         &x->stage, err);
}

/* Another node's tensor that this node's steps read or write: a proxy. */
static int proxy_make(spd_xop *x, int i, spk_err *err) {
  size_t bytes = tensor_bytes(&x->w->ranks[i / SPK_T_COUNT], i % SPK_T_COUNT);
  if (x->stage != NULL)
    return spd_xstage_proxy(x->stage, bytes, &x->bases[i], err);
  x->proxies[i] = malloc(bytes ? bytes : 1);
  if (x->proxies[i] == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of a %zu-byte proxy of "
                       "rank %d's tensor failed", bytes, i / SPK_T_COUNT);
  x->bases[i] = x->proxies[i];
  return SPK_OK;
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
  int mode = (int)w->ctx->cfg.xnode_direct;
  x->direct = w->device && (mode == 2 ||
                            (mode == 0 && spd_peer_moves_cuda(w->ctx)));
  if (rc == SPK_OK && w->device)
    rc = stage_prepare(x, err);
  for (int i = 0; rc == SPK_OK && i < world * SPK_T_COUNT; i++) {
    const spd_work_tensor *t = &w->ranks[i / SPK_T_COUNT].t[i % SPK_T_COUNT];
    x->bases[i] = w->bases[i];
    if (t->here && (t->dev < 0 || x->direct))
      rc = spd_peer_map(w->ctx, t->buf_base, t->buf_size, t->buf_id,
                        &t->state[SPD_ENGINE_UCX], err);
    else if (!t->here && x->cut.proxy[i])
      rc = proxy_make(x, i, err);
  }
  /* The streams start once the staging has passed the ranks' ready
   * events and the proxies exist. */
  if (rc == SPK_OK && x->stage != NULL)
    rc = spd_xstage_start(x->stage, on_part_done, x, err);
  if (rc == SPK_OK && x->stage != NULL)
    x->inflight++;
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
  for (size_t i = 0; i < x->nstreams; i++) {
    xstream *s = &x->streams[i];
    if (s->iov == NULL || (int)(i / 2) != dead_node || s->done)
      continue;
    if (s->staged != NULL)
      spd_xstage_stream_cancel(s->staged);
    else
      spd_peer_stream_cancel(w->ctx, s);
  }
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

/* Every op of a group across nodes: device tensors are staged. */
static int ucx_wants(const spd_work *w) {
  return w->multinode && w->broken != NULL ? 2 : 0;
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
