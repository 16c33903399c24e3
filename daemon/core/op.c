#include "op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "op_engine.h"
#include "op_overlap.h"
#include "planner.h"
#include "tensor_check.h"

static spd_op *op_find(spd_group *g, uint64_t seq) {
  spd_op *op;
  TAILQ_FOREACH(op, &g->ops, link)
    if (op->seq == seq)
      return op;
  return NULL;
}

spd_op *spd_op_get(spd_group *g, uint64_t seq) {
  spd_op *op = op_find(g, seq);
  if (op != NULL)
    return op;
  /* A rank's sequence numbers only grow, and an op is freed only after
   * every rank reached it, so a new op is always the newest. */
  op = calloc(1, sizeof(*op) + (size_t)g->world * sizeof(op->ranks[0]));
  if (op == NULL)
    return NULL;
  op->group = g;
  op->seq = seq;
  op->created_ns = spd_now_ns();
  spk_plan_init(&op->plan, g->world);
  op->plan.stream_bytes = (uint64_t)g->ctx->cfg.stream_bytes;
  TAILQ_INSERT_TAIL(&g->ops, op, link);
  return op;
}

int spd_op_tensor(spd_session *s, const Spcoll__Tensor *t, const char *what,
                  spk_shape *shape, spd_buffer **buf_p, spk_err *err) {
  if (t == NULL)
    return spk_err_set(err, SPK_EINVAL, "op request has no %s tensor", what);
  spd_buffer *buf = spd_session_buffer(s, t->buffer_id);
  if (buf == NULL)
    return spk_err_set(err, SPK_ENOT_FOUND,
                       "%s tensor names buffer %llu, which is not registered "
                       "by this client", what,
                       (unsigned long long)t->buffer_id);
  size_t esize = spk_dtype_size((spk_dtype)t->dtype);
  if (esize == 0)
    return spk_err_set(err, SPK_EINVAL, "%s tensor has unknown dtype %u", what,
                       t->dtype);
  if (t->n_shape < 1 || t->n_shape > SPK_MAX_DIMS)
    return spk_err_set(err, SPK_EINVAL, "%s tensor has %zu dims, not 1..%d",
                       what, t->n_shape, SPK_MAX_DIMS);
  shape->ndim = (int)t->n_shape;
  memcpy(shape->dim, t->shape, t->n_shape * sizeof(int64_t));
  int64_t numel;
  int rc = spk_shape_numel(shape, esize, &numel, err);
  if (rc == SPK_OK)
    rc = spk_tensor_align_check(what, t->offset,
                                (uint64_t)(uintptr_t)buf->base + t->offset,
                                (spk_dtype)t->dtype, err);
  if (rc == SPK_OK)
    rc = spd_buffer_check_range(buf, t->offset, (uint64_t)numel * esize, what,
                                err);
  if (rc < 0)
    return rc;
  spd_buffer_ref(buf);
  *buf_p = buf;
  return SPK_OK;
}

static int tensor_resolve(spd_session *s, const Spcoll__Tensor *t,
                          const char *what, spd_op_rank *r, int ti,
                          spk_shape *shape, spk_err *err) {
  int rc = spd_op_tensor(s, t, what, shape, &r->buf[ti], err);
  if (rc == SPK_OK)
    r->off[ti] = t->offset;
  return rc;
}

int spd_op_copy_list(const int64_t *src, size_t n, int64_t **dst_p,
                     const char *what, spk_err *err) {
  if (n > 65536)
    return spk_err_set(err, SPK_EINVAL, "%s has %zu entries, more than 65536",
                       what, n);
  if (n == 0)
    return SPK_OK;
  int64_t *dst = malloc(n * sizeof(*dst));
  if (dst == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %s failed", what);
  memcpy(dst, src, n * sizeof(*dst));
  *dst_p = dst;
  return SPK_OK;
}

/* Turn rank's request into planner arguments, checking everything that
 * concerns this rank alone: its buffers, their bounds, list lengths. */
static int rank_fill(spd_op_rank *r, spd_session *s,
                     const Spcoll__OpRequest *rq, spk_err *err) {
  spk_op_args *a = &r->args;
  a->op = (spk_op_kind)rq->op;
  a->scalar = rq->scalar;
  a->flags = rq->flags;
  if (rq->n_dims > 4)
    return spk_err_set(err, SPK_EINVAL, "op has %zu dims, at most 4",
                       rq->n_dims);
  a->ndims = (int)rq->n_dims;
  for (size_t i = 0; i < rq->n_dims; i++)
    a->dims[i] = rq->dims[i];
  int rc = spd_op_copy_list(rq->sizes, rq->n_sizes, &r->sizes, "sizes", err);
  if (rc == SPK_OK)
    rc = spd_op_copy_list(rq->sizes2, rq->n_sizes2, &r->sizes2, "sizes2", err);
  if (rc < 0)
    return rc;
  a->sizes = r->sizes, a->nsizes = (int)rq->n_sizes;
  a->sizes2 = r->sizes2, a->nsizes2 = (int)rq->n_sizes2;
  rc = tensor_resolve(s, rq->input, "input", r, SPK_T_IN, &a->in, err);
  if (rc == SPK_OK)
    rc = tensor_resolve(s, rq->output, "output", r, SPK_T_OUT, &a->out, err);
  if (rc < 0)
    return rc;
  a->dtype = (spk_dtype)rq->input->dtype;
  if (rq->output->dtype != rq->input->dtype)
    return spk_err_set(err, SPK_EINVAL,
                       "output dtype %s differs from input dtype %s",
                       spk_dtype_name((spk_dtype)rq->output->dtype),
                       spk_dtype_name(a->dtype));
  return spd_op_rank_engine_open(r, rq, err);
}

/* What a rank's request makes the daemon hold: its size lists (`lists`
 * bytes) and, for the first rank of an op, the op with a slot for every
 * rank. */
static long long op_request_bytes(const spd_group *g, long long lists,
                                  int fresh) {
  long long n = lists;
  if (fresh)
    n += (long long)sizeof(spd_op) + (long long)g->world * sizeof(spd_op_rank);
  return n;
}

static int op_charge(spd_ctx *ctx, uid_t uid, long long bytes, char *msg,
                     size_t len) {
  int rc = spd_quota_take(&ctx->quotas, &ctx->cfg, uid, SPD_Q_PENDING, 1,
                          msg, len);
  if (rc == SPK_OK &&
      (rc = spd_quota_take(&ctx->quotas, &ctx->cfg, uid, SPD_Q_REQUEST_BYTES,
                           bytes, msg, len)) < 0)
    spd_quota_give(&ctx->quotas, uid, SPD_Q_PENDING, 1);
  return rc;
}

static void op_uncharge(spd_ctx *ctx, uid_t uid, long long bytes) {
  spd_quota_give(&ctx->quotas, uid, SPD_Q_PENDING, 1);
  spd_quota_give(&ctx->quotas, uid, SPD_Q_REQUEST_BYTES, bytes);
}

spd_op *spd_op_get_charged(spd_group *g, uint64_t seq, int rank, uid_t uid,
                           long long lists, char *msg, size_t len) {
  long long charge = op_request_bytes(g, lists, op_find(g, seq) == NULL);
  if (op_charge(g->ctx, uid, charge, msg, len) < 0)
    return NULL;
  spd_op *op = spd_op_get(g, seq);
  if (op == NULL) {
    op_uncharge(g->ctx, uid, charge);
    snprintf(msg, len, "out of memory for an op");
    return NULL;
  }
  spd_op_rank *r = &op->ranks[rank];
  r->charged = 1, r->uid = uid, r->charge = charge;
  return op;
}

/* Take rank's request as its arrival at the group's next op: refused
 * (an Error to req, NULL) when the group is broken, the client has too
 * many ops pending, the daemon drains or a quota is spent; else the op,
 * with the rank's slot marked arrived and charged `lists` bytes more. */
spd_op *spd_op_take(spd_group *g, int rank, spd_session *s, uint64_t req,
                    long long lists) {
  /* Upgrading, a group breaks as its ranks move to the new daemon: an op
   * none of them started goes there too (spd_session_refuse). */
  if (g->broken && g->ctx->upgrading &&
      op_find(g, g->ranks[rank].next_seq) == NULL) {
    spd_session_refuse(s, req, "ops");
    return NULL;
  }
  if (g->broken) {
    spd_session_send_error(s, req, g->broken_status, g->broken_reason);
    return NULL;
  }
  spd_rank_slot *slot = &g->ranks[rank];
  if (s->pending >= g->ctx->cfg.client_max_pending) {
    char msg[128];
    snprintf(msg, sizeof(msg), "client limit: %d ops pending "
             "(client_max_pending)", s->pending);
    spd_session_send_error(s, req, SPK_ENO_MEMORY, msg);
    return NULL;
  }
  /* Draining: ops other ranks already started may complete, no new one. */
  int fresh = op_find(g, slot->next_seq) == NULL;
  if (g->ctx->draining && fresh) {
    spd_session_refuse(s, req, "ops");
    return NULL;
  }
  char msg[200];
  spd_op *op = spd_op_get_charged(g, slot->next_seq, rank, s->uid, lists, msg,
                                  sizeof(msg));
  if (op == NULL) {
    spd_session_send_error(s, req, SPK_ENO_MEMORY, msg);
    return NULL;
  }
  slot->next_seq++;
  spd_op_rank *r = &op->ranks[rank];
  r->arrived = 1;
  r->req = req;
  r->arrived_ns = spd_now_ns();
  r->session = s;
  s->pending++;
  return op;
}

/* The rank's request is recorded: tell the other nodes, count it. */
void spd_op_rank_in(spd_op *op, int rank) {
  if (op->group->multinode)
    spd_op_peer_send_args(op, rank);
  spd_op_rank_arrived(op);
}

void spd_op_arrive(spd_group *g, int rank, spd_session *s, uint64_t req,
                   const Spcoll__OpRequest *rq) {
  long long lists = (long long)(rq->n_sizes + rq->n_sizes2) * sizeof(int64_t);
  spd_op *op = spd_op_take(g, rank, s, req, lists);
  if (op == NULL)
    return;
  spd_op_rank *r = &op->ranks[rank];
  /* A rank's own error still counts as its arrival: the op then fails on
   * every rank together, so no rank waits for one that gave up. */
  r->status = rank_fill(r, s, rq, &r->err);
  spd_op_rank_in(op, rank);
}

void spd_op_rank_unreserve(spd_op_rank *r) {
  if (r->group_reserved && r->session != NULL)
    r->session->ngroups--;
  r->group_reserved = 0;
}

int spd_op_slot_of(const spd_op *op) {
  /* Any rank that arrived says what the op is (rank 0 may not have yet:
   * the stats of a pending op name it too). */
  const spd_op_rank *r = &op->ranks[0];
  for (int i = 1; i < op->group->world && !r->arrived; i++)
    r = &op->ranks[i];
  return r->group_split ? SPD_OP_SLOT_GROUP_SPLIT : spd_op_slot(r->args.op);
}

void spd_op_rank_arrived(spd_op *op) {
  spd_group *g = op->group;
  if (++op->arrived == g->world)
    op->started_ns = spd_now_ns(); /* latency counts from the last arrival */
  spd_group_kick(g);
  spd_up_drain_check(g->ctx);
}

void spd_op_free(spd_op *op) {
  spd_ctx *ctx = op->group->ctx;
  TAILQ_REMOVE(&op->group->ops, op, link);
  for (int i = 0; i < op->group->world; i++) {
    spd_op_rank *r = &op->ranks[i];
    if (r->session != NULL)
      r->session->pending--;
    if (r->charged)
      op_uncharge(ctx, r->uid, r->charge);
    for (int t = 0; t < SPK_T_COUNT; t++)
      if (r->buf[t] != NULL)
        spd_buffer_unref(ctx, r->buf[t]);
    free(r->sizes);
    free(r->sizes2);
    spd_op_rank_unreserve(r);
    spd_engines_rank_close(&r->eng); /* may set the done flag: */
    if (r->flags_buf != NULL)        /* the buffer goes after */
      spd_buffer_unref(ctx, r->flags_buf);
  }
  spk_plan_free(&op->plan);
  free(op->work_mem);
  free(op->bases);
  free(op);
}

void spd_op_fail(spd_op *op, int status, const char *msg) {
  spd_ctx *ctx = op->group->ctx;
  SPD_DEBUG(&ctx->log, "group '%s' op %llu failed: %s", op->group->name,
            (unsigned long long)op->seq, msg);
  for (int i = 0; i < op->group->world; i++) {
    spd_op_rank *r = &op->ranks[i];
    if (r->arrived && r->session != NULL) {
      spd_engines_group_answered(&op->group->shared, i, r->req);
      spd_session_send_error(r->session, r->req, status, msg);
    }
  }
  ctx->stats.ops_failed++;
  int slot = spd_op_slot_of(op);
  spd_op_stats_failed(&ctx->op_stats[slot]);
  spd_op_stats_failed(&op->group->op_stats[slot]);
  spd_op_free(op);
}

void spd_op_forget_session(spd_op *op, int rank) {
  spd_op_rank *r = &op->ranks[rank];
  if (r->session != NULL)
    r->session->pending--;
  spd_op_rank_unreserve(r); /* a client that left goes on */
  r->session = NULL;
}

void spd_op_after(spd_group *g) {
  spd_ctx *ctx = g->ctx;
  if (ctx->stopping) {
    spd_group_fail_pending(g, SPK_ESHUTDOWN, "daemon shutting down");
    spd_group_maybe_free(g);
    if (ctx->running_ops == 0)
      spd_up_stop_continue(ctx);
    return;
  }
  spd_group_kick(g);
  spd_group_maybe_free(g);
  spd_up_drain_check(ctx);
}

/* A finished op's answers to its ranks; the op is freed. */
static void op_answer(spd_op *op) {
  spd_group *g = op->group;
  spd_ctx *ctx = g->ctx;
  g->running--;
  ctx->running_ops--;
  if (op->fail_status < 0) {
    /* The engine failed: every local rank hears why. A node lost under a
     * cross-node op breaks the group with that cause, so the departures
     * it leads to tell the other nodes the cause, not themselves. */
    if (g->multinode && op->fail_status == SPK_ENODE_LOST)
      spd_group_break(g, op->fail_status, op->fail_msg);
    spd_op_fail(op, op->fail_status, op->fail_msg);
    return;
  }
  g->ops_done++;
  ctx->stats.ops_completed++;
  ctx->stats.bytes_moved += op->plan.bytes;
  spd_engine_account(op);
  int slot = spd_op_slot_of(op);
  uint64_t now = spd_now_ns(), ns = now - op->started_ns;
  spd_op_stats_done(&ctx->op_stats[slot], op->plan.bytes, ns);
  spd_op_stats_done(&g->op_stats[slot], op->plan.bytes, ns);
  for (int i = 0; i < g->world; i++) {
    spd_op_rank *r = &op->ranks[i];
    if (r->session == NULL)
      continue;
    Spcoll__Done t = SPCOLL__DONE__INIT;
    t.daemon_ns = now - r->arrived_ns;
    t.wait_ns = op->started_ns - r->arrived_ns;
    t.plan_ns = op->submitted_ns - op->started_ns;
    t.move_ns = now - op->submitted_ns;
    t.done_event_recorded = spd_engines_rank_recorded(&r->eng);
    spd_engines_group_answered(&g->shared, i, r->req);
    spd_session_send_done(r->session, r->req, &t);
  }
  spd_op_free(op);
}

/* Whether an op before op in its group still runs unfinished. */
static int earlier_unfinished(const spd_op *op) {
  for (const spd_op *o = TAILQ_FIRST(&op->group->ops); o != op;
       o = TAILQ_NEXT(o, link))
    if (o->running && !o->finished)
      return 1;
  return 0;
}

/* The engine finished op. A group's running ops answer in their order
 * (what the fast path's answered word tells the ranks follows them): one
 * that finished behind an earlier op still running waits for it, and
 * goes with it. */
static void op_done(void *arg) {
  spd_op *op = arg;
  spd_group *g = op->group;
  op->finished = 1;
  /* The ops queued behind it may run from now: their op timeout counts
   * from here, not from when they were queued. */
  uint64_t now = spd_now_ns();
  for (spd_op *o = TAILQ_NEXT(op, link); o != NULL && o->running;
       o = TAILQ_NEXT(o, link))
    if (!o->finished && o->submitted_ns != 0)
      o->submitted_ns = now;
  if (!earlier_unfinished(op)) {
    spd_op *next = TAILQ_NEXT(op, link);
    op_answer(op);
    while (next != NULL && next->running && next->finished) {
      op = next;
      next = TAILQ_NEXT(op, link);
      op_answer(op);
    }
  }
  spd_op_after(g);
}

static int op_rank_error(spd_op *op, spk_err *err) {
  for (int i = 0; i < op->group->world; i++)
    if (op->ranks[i].status < 0)
      return spk_err_set(err, op->ranks[i].status, "rank %d: %s", i,
                         op->ranks[i].err.msg);
  return SPK_OK;
}

static int op_bases(spd_op *op, spk_err *err) {
  int world = op->group->world;
  op->bases = calloc((size_t)world * SPK_T_COUNT, sizeof(*op->bases));
  if (op->bases == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of op bases failed");
  for (int i = 0; i < world; i++)
    for (int t = 0; t < SPK_T_COUNT; t++)
      if (op->ranks[i].buf[t] != NULL)
        op->bases[i * SPK_T_COUNT + t] =
            op->ranks[i].buf[t]->base + op->ranks[i].off[t];
  return SPK_OK;
}

/* Across nodes this daemon plans only what reads or writes its own
 * ranks' tensors (and sends its peers): O(local ranks x world) steps. */
static int op_plan_part(spd_op *op, spk_err *err) {
  int world = op->group->world;
  uint8_t *mine = malloc((size_t)world);
  if (mine == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %d rank places "
                       "failed", world);
  for (int i = 0; i < world; i++)
    mine[i] = !op->ranks[i].remote;
  int rc = spk_plan_part(&op->plan, mine, err);
  free(mine);
  return rc;
}

int spd_op_plan(spd_op *op, spk_err *err) {
  int world = op->group->world;
  const spk_op_args **args = malloc((size_t)world * sizeof(*args));
  if (args == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %d op args failed",
                       world);
  for (int i = 0; i < world; i++)
    args[i] = &op->ranks[i].args;
  int rc = op->group->multinode ? op_plan_part(op, err) : SPK_OK;
  if (rc == SPK_OK)
    rc = spk_plan_build(args, world, &op->plan, err);
  free(args);
  return rc;
}

/* 1 when every rank asked for a group split; a mix of a split and data
 * ops is a disagreement reported through *rc_p. */
static int op_is_group_split(spd_op *op, int *rc_p, spk_err *err) {
  int n = 0, world = op->group->world, other = -1, split = -1;
  for (int i = 0; i < world; i++) {
    if (op->ranks[i].group_split)
      n++, split = i;
    else
      other = i;
  }
  if (n != 0 && n != world)
    *rc_p = spk_err_set(err, SPK_EMISMATCH,
                        "ranks disagree on op: rank %d has group_split, rank "
                        "%d has %s", split, other,
                        spk_op_name(op->ranks[other].args.op));
  return n == world;
}

void spd_op_start(spd_op *op) {
  spd_group *g = op->group;
  spk_err err;
  int rc = op_rank_error(op, &err);
  if (rc == SPK_OK && op_is_group_split(op, &rc, &err)) {
    if (g->ctx->up.split_run != NULL) {
      g->ctx->up.split_run(op); /* on every node alike: group_split.c */
      return;
    }
    rc = spk_err_set(&err, SPK_EUNSUPPORTED, "group split: no group layer "
                     "runs it here");
  }
  if (rc == SPK_OK && g->world >= SPD_PLAN_OFF_LOOP_WORLD &&
      spd_op_plan_off_loop(op) == SPK_OK)
    return; /* spd_op_launch follows from the loop once it is built */
  if (rc == SPK_OK)
    rc = spd_op_plan(op, &err);
  spd_op_launch(op, rc, &err);
}

/* op fails before its engine has it. Behind an earlier op still running
 * it is answered after that one (op_done), as every op of a group is:
 * it counts as running and finished until then. */
static void op_fail_at_start(spd_op *op, int rc, const char *msg) {
  spd_group *g = op->group;
  if (!earlier_unfinished(op)) {
    spd_op_fail(op, rc, msg);
    return;
  }
  if (!op->running) {
    op->running = 1;
    g->running++;
    g->ctx->running_ops++;
  }
  op->finished = 1;
  op->fail_status = rc;
  snprintf(op->fail_msg, sizeof(op->fail_msg), "%s", msg);
}

int spd_op_launch(spd_op *op, int rc, spk_err *err) {
  spd_group *g = op->group;
  spd_ctx *ctx = g->ctx;
  if (rc == SPK_OK)
    rc = spd_op_overlap_check(op, err);
  if (rc == SPK_OK)
    rc = op_bases(op, err);
  if (rc < 0) {
    op_fail_at_start(op, rc, err->msg);
    return rc;
  }
  /* Running before the engine has it: an engine with nothing to do here
   * (a node with no part in the op) completes it inside the call. */
  op->submitted_ns = spd_now_ns();
  op->running = 1;
  g->running++;
  ctx->running_ops++;
  rc = spd_engine_submit(op, op_done, err);
  if (rc < 0) {
    op->running = 0;
    g->running--;
    ctx->running_ops--;
    op_fail_at_start(op, rc, err->msg);
  }
  return rc;
}

const char *spd_op_missing(const spd_op *op, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int r = 0; r < op->group->world && used < len; r++)
    if (!op->ranks[r].arrived) {
      int n = snprintf(buf + used, len - used, "%s%d", used ? "," : "", r);
      used += n > 0 ? (size_t)n : 0;
    }
  return buf;
}
