/* The op layer's side of the engine contract: the work item of an op,
 * handed to the engine the table picks, and the engine's report turned
 * back into the op's completion. */
#include "op_engine.h"

#include <stdio.h>
#include <stdlib.h>

#include "daemon.h"
#include "session.h"

/* The arrays behind an op's work item, in one allocation (op->work_mem). */
typedef struct {
  int *dev, *node_of;
  spd_work_rank *ranks;
  void **rank_state;
} work_arrays;

static int work_arrays_new(int world, work_arrays *a, void **mem_p,
                           spk_err *err) {
  size_t n = (size_t)world;
  char *m = malloc(n * (sizeof(spd_work_rank) + sizeof(void *) +
                        2 * sizeof(int)));
  if (m == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of the work item of %d "
                       "ranks failed", world);
  /* Most aligned first. */
  a->ranks = (spd_work_rank *)m;
  a->rank_state = (void **)(m + n * sizeof(spd_work_rank));
  a->dev = (int *)(m + n * (sizeof(spd_work_rank) + sizeof(void *)));
  a->node_of = a->dev + n;
  *mem_p = m;
  return SPK_OK;
}

/* The engine finished: its status becomes the op's (unless the op already
 * failed for a reason of its own), then the op layer's completion. */
static void work_done(void *arg, int status, const char *msg) {
  spd_op *op = arg;
  if (status < 0 && op->fail_status >= 0) {
    op->fail_status = status;
    snprintf(op->fail_msg, sizeof(op->fail_msg), "%s",
             msg != NULL ? msg : "the engine failed");
  }
  op->finish(op);
}

/* A cross-node engine failed: the other nodes hear it when this node will
 * post nothing, and the group breaks. */
static void work_broken(void *arg, int status, const char *msg, int tell) {
  spd_op *op = arg;
  if (tell)
    spd_op_peer_tell_failed(op, status, msg);
  spd_group_break(op->group, status, msg);
}

/* The work item of op, from its ranks; owned arrays in op->work_mem. */
static int work_fill(spd_op *op, spk_err *err) {
  spd_group *g = op->group;
  spd_ctx *ctx = g->ctx;
  int world = g->world, device = 0, self = ctx->cfg.node_index;
  work_arrays a = {0};
  int rc = work_arrays_new(world, &a, &op->work_mem, err);
  if (rc < 0)
    return rc;
  for (int i = 0; i < world; i++) {
    const spd_op_rank *r = &op->ranks[i];
    const spd_buffer *in = r->buf[SPK_T_IN];
    a.dev[i] = in != NULL && in->kind == SPD_BUF_DEVICE ? in->device : -1;
    /* From the op, not the group: a remote rank may have left the group
     * after it sent its part of this op. */
    a.node_of[i] = r->remote ? r->node : self;
    a.rank_state[i] = r->eng.p;
    a.ranks[i].args = &r->args;
    for (int t = 0; t < SPK_T_COUNT; t++) {
      spd_buffer *b = r->buf[t];
      spd_work_tensor *wt = &a.ranks[i].t[t];
      *wt = (spd_work_tensor){.dev = -1};
      if (b == NULL)
        continue;
      *wt = (spd_work_tensor){.here = 1, .off = r->off[t],
                              .dev = b->kind == SPD_BUF_DEVICE ? b->device
                                                               : -1,
                              .buf_base = b->base, .buf_size = b->size,
                              .buf_id = b->id, .state = b->engine_state};
      device |= b->kind == SPD_BUF_DEVICE;
    }
  }
  op->work = (spd_work){.plan = &op->plan, .bases = op->bases, .dev = a.dev,
                        .ranks = a.ranks, .rank_state = a.rank_state,
                        .node_of = a.node_of, .world = world,
                        .device = device, .multinode = g->multinode,
                        .name = g->name, .seq = op->seq, .key = g->rec,
                        .peer_key = g->peer_rec, .ctx = ctx,
                        .done = work_done, .arg = op,
                        .broken = g->multinode ? work_broken : NULL};
  return SPK_OK;
}

/* The latest op before op in its group's list that runs and has not
 * finished; NULL when none. Ops after it that finished were queued
 * behind it, so it is done on the GPU too: only its answer is to come. */
static spd_op *latest_unfinished(spd_op *op) {
  spd_op *prev = NULL;
  for (spd_op *o = TAILQ_FIRST(&op->group->ops); o != NULL && o != op;
       o = TAILQ_NEXT(o, link))
    if (o->running && !o->finished)
      prev = o;
  return prev;
}

int spd_op_may_start_behind(spd_op *op) {
  spd_group *g = op->group;
  spd_op *prev = latest_unfinished(op);
  if (prev == NULL) /* the earlier ones finished: only answers to come */
    return 1;
  /* Its plan on the loop, so it is submitted now, in the group's order;
   * prev submitted (not a plan still built off the loop). */
  if (g->multinode || g->world >= SPD_PLAN_OFF_LOOP_WORLD ||
      prev->work.arg != prev)
    return 0;
  const spd_engine *e = spd_engines[prev->engine];
  if (e->queues_behind == NULL)
    return 0;
  void *next[SPD_PLAN_OFF_LOOP_WORLD];
  for (int i = 0; i < g->world; i++) {
    const spd_rank_state *st = &op->ranks[i].eng;
    next[i] = st->kind == prev->ranks[i].eng.kind ? st->p : NULL;
  }
  if (!e->queues_behind(&prev->work, next, g->world))
    return 0;
  op->behind = prev;
  return 1;
}

/* The engine for op: the table's pick (the config's mover when it can),
 * which must be the engine of the op it was queued behind; -1 with err
 * set when none. */
static int engine_for(spd_op *op, spk_err *err) {
  spd_ctx *ctx = op->group->ctx;
  int kind = spd_engine_pick(&op->work, spd_engine_find(ctx->cfg.mover));
  spd_op *prev = op->behind;
  op->behind = NULL;
  if (kind < 0)
    return spk_err_set(err, SPK_EUNSUPPORTED, "no engine of this spcolld "
                       "runs an op of group '%s' on %s tensors (mover %s)",
                       op->group->name, op->work.device ? "device" : "host",
                       ctx->cfg.mover), -1;
  if (prev == NULL)
    return kind;
  /* queues_behind promised its own row: a bug otherwise, said as such. */
  if (kind != prev->engine)
    return spk_err_set(err, SPK_EUNSUPPORTED, "group '%s' op %llu was "
                       "queued behind an op of the %s engine but goes to "
                       "%s (a daemon bug)", op->group->name,
                       (unsigned long long)op->seq,
                       spd_engine_name(prev->engine), spd_engine_name(kind)),
           -1;
  op->work.behind = &prev->work;
  ctx->stats.ops_queued_behind++;
  return kind;
}

int spd_engine_submit(spd_op *op, spd_mover_done_cb done, spk_err *err) {
  int rc = work_fill(op, err);
  if (rc < 0)
    return rc;
  op->finish = done;
  int kind = engine_for(op, err);
  if (kind < 0)
    rc = SPK_EUNSUPPORTED;
  else {
    op->engine = kind;
    rc = spd_engines[kind]->submit(&op->work, err);
  }
  /* Across nodes the others would wait on this node's streams: they hear
   * it will not run (an engine that failed to submit told them itself). */
  if (kind < 0 && op->work.broken != NULL)
    op->work.broken(op, rc, err->msg, 1);
  if (rc < 0) {
    op->work.arg = NULL; /* not submitted: nothing to abort */
    free(op->work_mem);
    op->work_mem = NULL;
  }
  return rc; /* SPK_OK: op may be gone already (done inside submit) */
}

void spd_engine_abort(spd_op *op, int status, const char *msg,
                      int dead_node) {
  const spd_engine *e = spd_engines[op->engine];
  /* Running but not yet submitted (a plan built off the loop): kept, and
   * the op layer fails it once the plan is back (op_plan.c). */
  if (op->work.arg != op) {
    if (op->fail_status >= 0) {
      op->fail_status = status;
      snprintf(op->fail_msg, sizeof(op->fail_msg), "%s", msg);
    }
    return;
  }
  if (e->abort != NULL)
    e->abort(&op->work, status, msg, dead_node);
}

const char *spd_engine_describe(const spd_op *op, char *buf, size_t len) {
  buf[0] = '\0';
  const spd_engine *e = op->running ? spd_engines[op->engine] : NULL;
  if (e != NULL && e->describe != NULL && op->work.arg == op)
    e->describe(&op->work, buf, len);
  return buf;
}

void spd_engine_account(spd_op *op) {
  spd_engine_counters *c = &op->group->ctx->engine_stats[op->engine];
  c->ops++;
  if (!spd_engines[op->engine]->counts_own_bytes)
    c->bytes += op->plan.bytes;
}

/* The request's stream flags slot, checked: a stream flags buffer of this
 * client, the slot inside it, a seq above 0. The rank holds the buffer. */
static int flags_resolve(spd_op_rank *r, const Spcoll__StreamFlags *sf,
                         spd_rank_req *q, spk_err *err) {
  spd_buffer *b = spd_session_buffer(r->session, sf->buffer_id);
  if (b == NULL || !b->stream_flags)
    return spk_err_set(err, SPK_EINVAL, "stream flags in buffer %llu: not a "
                       "stream flags buffer of this client",
                       (unsigned long long)sf->buffer_id);
  uint64_t off = (uint64_t)sf->slot * 16;
  if (off + 16 > b->size || sf->seq == 0)
    return spk_err_set(err, SPK_EINVAL, "stream flags slot %u, seq %llu: the "
                       "buffer has %zu slots and seq starts at 1", sf->slot,
                       (unsigned long long)sf->seq, b->size / 16);
  spd_buffer_ref(b);
  r->flags_buf = b;
  q->flags_state = b->engine_state;
  q->flags_off = off;
  q->flags_seq = sf->seq;
  return SPK_OK;
}

int spd_op_rank_engine_open(spd_op_rank *r, const Spcoll__OpRequest *rq,
                            spk_err *err) {
  const spd_buffer *in = r->buf[SPK_T_IN];
  int dev = in != NULL && in->kind == SPD_BUF_DEVICE ? in->device : -1;
  spd_rank_req q = {.ctx = r->session->ctx, .session = r->session->id,
                    .in_dev = dev,
                    .in_gpu_mem = dev >= 0 ? in->gpu_mem : NULL,
                    .ready = rq->ready_event.data,
                    .nready = rq->ready_event.len,
                    .done = rq->done_event.data,
                    .ndone = rq->done_event.len};
  if (rq->stream_flags != NULL) {
    int rc = flags_resolve(r, rq->stream_flags, &q, err);
    if (rc < 0)
      return rc;
  }
  return spd_engines_rank_open(&q, &r->eng, err);
}
