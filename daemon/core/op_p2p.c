/* Point-to-point ops: see op_p2p.h. A half is one rank's send or
 * receive; two halves that match make a pair, run as a one-move plan of a
 * two-rank work item (rank 0 the sender's input, rank 1 the receiver's
 * output) by whichever engine the table picks. Pairs across nodes are
 * matched on the receiver's node (op_p2p_peer.c) and run there and on the
 * sender's node as the two ends of one UCX stream. */
#include "op_p2p_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"
#include "quota.h"
#include "tensor_check.h"

static const char *dir_name(const spd_p2p_half *h) {
  return h->send ? "send" : "receive";
}

/* ---- halves ---- */

void spd_p2p_half_free(spd_p2p_half *h) {
  spd_ctx *ctx = h->g->ctx;
  if (h->session != NULL)
    h->session->pending--;
  if (h->charged) {
    spd_quota_give(&ctx->quotas, h->uid, SPD_Q_PENDING, 1);
    spd_quota_give(&ctx->quotas, h->uid, SPD_Q_REQUEST_BYTES,
                   (long long)sizeof(*h));
  }
  if (h->buf != NULL)
    spd_buffer_unref(ctx, h->buf);
  free(h);
}

void spd_p2p_half_answer(spd_p2p_half *h, int status, const char *msg,
                         int source) {
  if (h->node >= 0) {
    spd_p2p_peer_answer(h, status, msg);
    return;
  }
  if (h->session == NULL)
    return;
  if (status < 0) {
    spd_session_send_error(h->session, h->req, status, msg);
    return;
  }
  Spcoll__Done d = SPCOLL__DONE__INIT;
  d.daemon_ns = spd_now_ns() - h->arrived_ns;
  d.source = source;
  spd_session_send_done(h->session, h->req, &d);
}

/* Check what concerns this rank alone: its tensor (host memory). */
static int half_fill(spd_p2p_half *h, spd_session *s, const Spcoll__P2p *rq,
                     spk_err *err) {
  spk_shape shape;
  int rc = spd_op_tensor(s, rq->tensor, h->send ? "send" : "receive", &shape,
                         &h->buf, err);
  if (rc < 0)
    return rc;
  h->off = rq->tensor->offset;
  if (h->buf->kind == SPD_BUF_DEVICE)
    return spk_err_set(err, SPK_EUNSUPPORTED, "point-to-point %s of a device "
                       "tensor (buffer %llu): only host tensors so far",
                       dir_name(h), (unsigned long long)h->buf->id);
  h->args.dtype = (spk_dtype)rq->tensor->dtype;
  spk_shape none = {.ndim = 1};
  h->args.in = h->send ? shape : none;
  h->args.out = h->send ? none : shape;
  return spk_shape_numel(&shape, spk_dtype_size(h->args.dtype), &h->numel,
                         err);
}

/* Peer and tag are what matching needs: refused at once when wrong. */
static int half_args_ok(const spd_group *g, int rank, const Spcoll__P2p *rq,
                        char *msg, size_t len) {
  const char *dir = rq->send ? "send" : "receive";
  int lo = rq->send ? 0 : -1;
  if (rq->peer < lo || rq->peer >= g->world || rq->peer == rank) {
    snprintf(msg, len, "point-to-point %s of rank %d: peer %d is not another "
             "rank of group '%s' (0..%d%s)", dir, rank, rq->peer, g->name,
             g->world - 1, rq->send ? "" : ", or -1 for any");
    return 0;
  }
  if (rq->tag < 0) {
    snprintf(msg, len, "point-to-point %s of rank %d: tag %d is negative",
             dir, rank, rq->tag);
    return 0;
  }
  return 1;
}

/* A tensor outside its buffer (or no array of elements at all) is
 * refused at once, as the library refuses it (spc__tensor_check): held
 * for its other half, which may never come, it would meet the op timeout
 * and break the group. What only the daemon knows (a buffer this client
 * never registered, device memory) pairs, and both ranks hear it. */
static int half_tensor_ok(spd_session *s, int rank, const Spcoll__P2p *rq,
                          char *msg, size_t len) {
  const Spcoll__Tensor *t = rq->tensor;
  const char *dir = rq->send ? "send" : "receive";
  spd_buffer *buf = t != NULL ? spd_session_buffer(s, t->buffer_id) : NULL;
  if (buf == NULL)
    return 1;
  if (t->n_shape < 1 || t->n_shape > SPK_MAX_DIMS) {
    snprintf(msg, len, "point-to-point %s of rank %d: tensor has %zu dims, "
             "not 1..%d", dir, rank, t->n_shape, SPK_MAX_DIMS);
    return 0;
  }
  spk_shape shape = {.ndim = (int)t->n_shape};
  memcpy(shape.dim, t->shape, t->n_shape * sizeof(int64_t));
  spk_err err;
  if (spk_tensor_align_check(dir, t->offset,
                             (uint64_t)(uintptr_t)buf->base + t->offset,
                             (spk_dtype)t->dtype, &err) == SPK_OK &&
      spk_tensor_extent_check(dir, &shape, (spk_dtype)t->dtype, t->offset,
                              buf->size, NULL, &err) == SPK_OK)
    return 1;
  snprintf(msg, len, "point-to-point %s of rank %d: %s", dir, rank, err.msg);
  return 0;
}

/* ---- matching ---- */

/* The earliest unmatched half that pairs with h: a send from s to d with
 * tag t and a receive at d from s (or any) with tag t. */
spd_p2p_half *spd_p2p_match(spd_group *g, const spd_p2p_half *h) {
  spd_p2p_half *o;
  if (h->send) {
    TAILQ_FOREACH(o, &g->p2p_recvs, link)
      if (o->rank == h->peer && o->tag == h->tag &&
          (o->peer == h->rank || o->peer == -1))
        return o;
  } else {
    TAILQ_FOREACH(o, &g->p2p_sends, link)
      if (o->peer == h->rank && o->tag == h->tag &&
          (h->peer == -1 || h->peer == o->rank))
        return o;
  }
  return NULL;
}

/* What the two halves must agree on; a rank's own error fails both. */
static int pair_check(const spd_p2p_half *snd, const spd_p2p_half *rcv,
                      spk_err *err) {
  char who[96];
  snprintf(who, sizeof(who), "point-to-point op from rank %d to rank %d "
           "(tag %d)", snd->rank, rcv->rank, snd->tag);
  for (int i = 0; i < 2; i++) {
    const spd_p2p_half *h = i ? rcv : snd;
    if (h->status < 0)
      return spk_err_set(err, h->status, "%s: rank %d's %s: %s", who,
                         h->rank, dir_name(h), h->err.msg);
  }
  if (snd->args.dtype != rcv->args.dtype)
    return spk_err_set(err, SPK_EMISMATCH, "%s: dtype %s sent, %s expected "
                       "by the receive", who, spk_dtype_name(snd->args.dtype),
                       spk_dtype_name(rcv->args.dtype));
  if (snd->numel != rcv->numel)
    return spk_err_set(err, SPK_EMISMATCH, "%s: %lld elements sent, %lld "
                       "expected by the receive", who,
                       (long long)snd->numel, (long long)rcv->numel);
  return SPK_OK;
}

/* ---- running a pair ---- */

static void run_free(spd_p2p_run *run) {
  for (int i = 0; i < 2; i++) {
    spd_p2p_half *h = run->h[i];
    if (h == NULL)
      continue;
    TAILQ_REMOVE(&h->g->p2p_run, h, link);
    spd_p2p_half_free(h);
  }
  spk_plan_free(&run->plan);
  free(run);
}

void spd_p2p_run_end(spd_p2p_run *run, int status, const char *msg) {
  spd_ctx *ctx = run->h[run->h[0] == NULL]->g->ctx;
  if (status == SPK_OK) {
    ctx->stats.ops_completed++;
    ctx->stats.bytes_moved += run->plan.bytes;
    spd_engine_counters *c = &ctx->engine_stats[run->engine];
    c->ops++;
    if (!spd_engines[run->engine]->counts_own_bytes)
      c->bytes += run->plan.bytes;
  } else {
    ctx->stats.ops_failed++;
  }
  for (int i = 0; i < 2; i++)
    if (run->h[i] != NULL)
      spd_p2p_half_answer(run->h[i], status,
                          msg ? msg : "the engine failed", run->src);
  run_free(run);
}

/* The engine finished the run (this node's end of it, across nodes). */
static void run_done(void *arg, int status, const char *msg) {
  spd_p2p_run *run = arg;
  spd_group *g = run->h[run->h[0] == NULL]->g;
  spd_ctx *ctx = g->ctx;
  run->engine_done = 1;
  if (run->remote >= 0 && spd_p2p_peer_ended(run, status, msg))
    return; /* a send waits for its receiver's word */
  spd_p2p_run_end(run, status, msg);
  spd_group_maybe_free(g);
  spd_up_drain_check(ctx);
}

/* Rank i of the work item: this node's half's tensor t, or (h NULL) the
 * remote half, known by its arguments only. */
static void run_rank(spd_p2p_run *run, spd_ctx *ctx, int i, int t) {
  const spd_p2p_half *h = run->h[i];
  spd_work_rank *wr = &run->ranks[i];
  wr->args = h != NULL ? &h->args : &run->rargs;
  for (int k = 0; k < SPK_T_COUNT; k++)
    wr->t[k] = (spd_work_tensor){.dev = -1};
  run->dev[i] = -1;
  if (h == NULL) {
    run->node_of[i] = run->remote;
    return;
  }
  wr->t[t] = (spd_work_tensor){.here = 1, .dev = -1, .off = h->off,
                               .buf_base = h->buf->base,
                               .buf_size = h->buf->size,
                               .buf_id = h->buf->id,
                               .state = h->buf->engine_state};
  run->bases[i * SPK_T_COUNT + t] = h->buf->base + h->off;
  run->node_of[i] = ctx->cfg.node_index;
}

/* The copy as a plan: sender's input, whole, into the receiver's output. */
static int run_plan(spd_p2p_run *run, uint64_t stream_bytes, spk_err *err) {
  spk_plan_init(&run->plan, 2);
  run->plan.stream_bytes = stream_bytes;
  run->plan.in_bytes = (uint64_t)run->numel * spk_dtype_size(run->dtype);
  run->plan.dtype = run->dtype;
  spk_shape flat = {.ndim = 1, .dim = {run->numel}};
  int64_t origin[1] = {0}, extent[1] = {run->numel};
  spk_block_end src = {.rank = 0, .t = SPK_T_IN, .shape = &flat,
                       .origin = origin};
  spk_block_end dst = {.rank = 1, .t = SPK_T_OUT, .shape = &flat,
                       .origin = origin};
  return spk_plan_add_block(&run->plan, &src, &dst, extent,
                            spk_dtype_size(run->dtype), err);
}

static int run_submit(spd_group *g, spd_p2p_run *run, spk_err *err) {
  spd_ctx *ctx = g->ctx;
  int rc = run_plan(run, (uint64_t)ctx->cfg.stream_bytes, err);
  if (rc < 0)
    return rc;
  run_rank(run, ctx, 0, SPK_T_IN);
  run_rank(run, ctx, 1, SPK_T_OUT);
  int cross = run->remote >= 0;
  /* Across nodes the UCX engine moves it: one stream, tagged by the
   * sender's node, the receiver's record of the group and seq. */
  run->work = (spd_work){.plan = &run->plan, .bases = run->bases,
                         .dev = run->dev, .ranks = run->ranks,
                         .rank_state = run->rank_state,
                         .node_of = run->node_of, .world = 2,
                         .multinode = cross, .name = g->name,
                         .seq = run->seq, .key = g->rec,
                         .peer_key = g->peer_rec, .ctx = ctx,
                         .done = run_done, .arg = run,
                         .broken = cross ? spd_p2p_peer_broken : NULL};
  run->engine = spd_engine_pick(&run->work, spd_engine_find(ctx->cfg.mover));
  if (run->engine < 0)
    return spk_err_set(err, SPK_EUNSUPPORTED, "no engine of this spcolld "
                       "runs a point-to-point op of group '%s' (mover %s)",
                       g->name, ctx->cfg.mover);
  return spd_engines[run->engine]->submit(&run->work, err);
}

int spd_p2p_run_start(spd_group *g, spd_p2p_run *run, spk_err *err) {
  for (int i = 0; i < 2; i++)
    if (run->h[i] != NULL) {
      run->h[i]->run = run;
      TAILQ_INSERT_TAIL(&g->p2p_run, run->h[i], link);
    }
  int rc = run_submit(g, run, err);
  if (rc == SPK_OK)
    return rc;
  for (int i = 0; i < 2; i++)
    if (run->h[i] != NULL)
      TAILQ_REMOVE(&g->p2p_run, run->h[i], link);
  spk_plan_free(&run->plan);
  free(run);
  return rc;
}

/* Both halves here: run them, or answer both with the error. */
void spd_p2p_pair_start(spd_group *g, spd_p2p_half *snd, spd_p2p_half *rcv) {
  spk_err err;
  int rc = pair_check(snd, rcv, &err);
  if (rc == SPK_OK && snd->node >= 0) {
    spd_p2p_peer_start(g, snd, rcv);
    return;
  }
  spd_p2p_run *run = NULL;
  if (rc == SPK_OK && (run = calloc(1, sizeof(*run))) == NULL)
    rc = spk_err_set(&err, SPK_ENO_MEMORY, "calloc of a point-to-point run "
                     "failed");
  if (rc == SPK_OK) {
    run->h[0] = snd, run->h[1] = rcv;
    run->remote = -1;
    run->src = snd->rank, run->dst = rcv->rank;
    run->dtype = snd->args.dtype, run->numel = snd->numel;
    rc = spd_p2p_run_start(g, run, &err);
    if (rc == SPK_OK)
      return; /* run_done answers both */
  }
  g->ctx->stats.ops_failed++;
  spd_p2p_half_answer(snd, rc, err.msg, snd->rank);
  spd_p2p_half_answer(rcv, rc, err.msg, snd->rank);
  spd_p2p_half_free(snd);
  spd_p2p_half_free(rcv);
}

/* ---- arrival ---- */

static spd_p2p_half *half_new(spd_group *g, int rank, spd_session *s,
                              uint64_t req, const Spcoll__P2p *rq, char *msg,
                              size_t len) {
  spd_ctx *ctx = g->ctx;
  if (spd_quota_take(&ctx->quotas, &ctx->cfg, s->uid, SPD_Q_PENDING, 1, msg,
                     len) < 0)
    return NULL;
  if (spd_quota_take(&ctx->quotas, &ctx->cfg, s->uid, SPD_Q_REQUEST_BYTES,
                     (long long)sizeof(spd_p2p_half), msg, len) < 0) {
    spd_quota_give(&ctx->quotas, s->uid, SPD_Q_PENDING, 1);
    return NULL;
  }
  spd_p2p_half *h = calloc(1, sizeof(*h));
  if (h == NULL) {
    spd_quota_give(&ctx->quotas, s->uid, SPD_Q_PENDING, 1);
    spd_quota_give(&ctx->quotas, s->uid, SPD_Q_REQUEST_BYTES,
                   (long long)sizeof(*h));
    snprintf(msg, len, "out of memory for a point-to-point op");
    return NULL;
  }
  *h = (spd_p2p_half){.g = g, .send = rq->send != 0, .rank = rank,
                      .peer = rq->peer, .tag = rq->tag, .session = s,
                      .req = req, .arrived_ns = spd_now_ns(), .uid = s->uid,
                      .charged = 1, .node = -1};
  s->pending++;
  return h;
}

/* Why g takes no point-to-point op from s now, or NULL. */
static int rank_present(const spd_group *g, int r) {
  return g->ranks[r].session != NULL || g->ranks[r].remote;
}

/* A group broken only by ranks leaving (SPK_EPEER_LOST) still carries
 * point-to-point between the ranks that stayed, as torch's backends do
 * after a peer's destroy_process_group; collectives fail. */
const char *spd_p2p_closed(const spd_group *g, int a, int b, char *msg,
                           size_t len) {
  if (!g->broken)
    return NULL;
  if (g->broken_status != SPK_EPEER_LOST)
    return g->broken_reason;
  for (int i = 0; i < 2; i++) {
    int r = i ? b : a;
    if (r >= 0 && r < g->world && !rank_present(g, r)) {
      snprintf(msg, len, "rank %d left group '%s': %s", r, g->name,
               g->broken_reason);
      return msg;
    }
  }
  return NULL;
}

static const char *refusal(spd_group *g, int rank, spd_session *s,
                           const Spcoll__P2p *rq, char *msg, size_t len) {
  const char *why = spd_p2p_closed(g, rank, rq->peer, msg, len);
  if (why != NULL)
    return why;
  if (s->pending >= g->ctx->cfg.client_max_pending) {
    snprintf(msg, len, "client limit: %d ops pending (client_max_pending)",
             s->pending);
    return msg;
  }
  return NULL;
}

void spd_p2p_arrive(spd_group *g, int rank, spd_session *s, uint64_t req,
                    const Spcoll__P2p *rq) {
  char msg[640];
  const char *why = refusal(g, rank, s, rq, msg, sizeof(msg));
  if (why != NULL) {
    int st = g->broken ? g->broken_status : SPK_ENO_MEMORY;
    spd_session_send_error(s, req, st, why);
    return;
  }
  if (!half_args_ok(g, rank, rq, msg, sizeof(msg)) ||
      !half_tensor_ok(s, rank, rq, msg, sizeof(msg))) {
    spd_session_send_error(s, req, SPK_EINVAL, msg);
    return;
  }
  spd_p2p_half *h = half_new(g, rank, s, req, rq, msg, sizeof(msg));
  if (h == NULL) {
    spd_session_send_error(s, req, SPK_ENO_MEMORY, msg);
    return;
  }
  /* A rank's own error still pairs: both ranks then hear it. */
  h->status = half_fill(h, s, rq, &h->err);
  if (h->send && g->ranks[h->peer].remote) {
    spd_p2p_peer_post(g, h); /* its receiver's node matches it */
    return;
  }
  spd_p2p_half *o = spd_p2p_match(g, h);
  /* Draining: a half another rank already posted may complete. */
  if (o == NULL && g->ctx->draining) {
    spd_session_refuse(s, req, "ops");
    spd_p2p_half_free(h);
    return;
  }
  if (o == NULL) {
    TAILQ_INSERT_TAIL(h->send ? &g->p2p_sends : &g->p2p_recvs, h, link);
    return;
  }
  TAILQ_REMOVE(o->send ? &g->p2p_sends : &g->p2p_recvs, o, link);
  spd_p2p_pair_start(g, h->send ? h : o, h->send ? o : h);
}

/* ---- failures ---- */

static void fail_list(struct spd_p2p_list *l, int status, const char *msg) {
  spd_p2p_half *h;
  while ((h = TAILQ_FIRST(l)) != NULL) {
    TAILQ_REMOVE(l, h, link);
    if (h->node < 0) /* a proxy's failure counts on its own node */
      h->g->ctx->stats.ops_failed++;
    if (h->posted)
      spd_p2p_peer_drop(h, status, msg);
    spd_p2p_half_answer(h, status, msg, -1);
    spd_p2p_half_free(h);
  }
}

void spd_p2p_fail_pending(spd_group *g, int status, const char *msg) {
  fail_list(&g->p2p_sends, status, msg);
  fail_list(&g->p2p_recvs, status, msg);
}

/* The halves of rank, and those naming it as their peer, fail; the other
 * pairs go on. */
static void fail_rank_list(struct spd_p2p_list *l, int rank, int status,
                           const char *msg) {
  struct spd_p2p_list gone = TAILQ_HEAD_INITIALIZER(gone);
  spd_p2p_half *h = TAILQ_FIRST(l), *next;
  for (; h != NULL; h = next) {
    next = TAILQ_NEXT(h, link);
    if (h->rank == rank || h->peer == rank) {
      TAILQ_REMOVE(l, h, link);
      TAILQ_INSERT_TAIL(&gone, h, link);
    }
  }
  fail_list(&gone, status, msg);
}

void spd_p2p_fail_rank(spd_group *g, int rank, int status, const char *msg) {
  fail_rank_list(&g->p2p_sends, rank, status, msg);
  fail_rank_list(&g->p2p_recvs, rank, status, msg);
}

void spd_p2p_forget_rank(spd_group *g, int rank, int lost) {
  spd_p2p_half *h;
  TAILQ_FOREACH(h, &g->p2p_run, link) {
    if (h->rank != rank || h->session == NULL)
      continue;
    if (!lost)
      spd_session_send_error(h->session, h->req, SPK_EPEER_LOST,
                             "this rank left the group while its "
                             "point-to-point op was running; its output is "
                             "undefined");
    h->session->pending--;
    h->session = NULL;
  }
}

static void timed_out(spd_group *g, const spd_p2p_half *h, uint64_t now) {
  char msg[400], peer[32], late[32];
  if (h->peer >= 0) {
    snprintf(peer, sizeof(peer), "rank %d", h->peer);
    snprintf(late, sizeof(late), "rank %d never", h->peer);
  } else {
    snprintf(peer, sizeof(peer), "any rank");
    snprintf(late, sizeof(late), "no rank");
  }
  snprintf(msg, sizeof(msg), "point-to-point %s of rank %d %s %s (tag %d) "
           "of group '%s' timed out after %.1f s: %s posted the matching %s",
           dir_name(h), h->rank, h->send ? "to" : "from", peer, h->tag,
           g->name, (double)(now - h->arrived_ns) * 1e-9, late,
           h->send ? "receive" : "send");
  SPD_WARN(&g->ctx->log, "%s", msg);
  g->ctx->stats.ops_timed_out++;
  spd_group_break(g, SPK_ETIMEDOUT, msg);
  spd_group_fail_pending(g, SPK_ETIMEDOUT, msg);
}

void spd_p2p_tick(spd_group *g, uint64_t now) {
  struct spd_p2p_list *lists[2] = {&g->p2p_sends, &g->p2p_recvs};
  for (int i = 0; i < 2; i++) {
    spd_p2p_half *h = TAILQ_FIRST(lists[i]); /* the oldest of its list */
    if (h != NULL && now - h->arrived_ns > g->op_timeout_ns) {
      timed_out(g, h, now);
      return;
    }
  }
}

int spd_p2p_busy(const spd_group *g) {
  return !TAILQ_EMPTY(&g->p2p_sends) || !TAILQ_EMPTY(&g->p2p_recvs) ||
         !TAILQ_EMPTY(&g->p2p_run);
}
