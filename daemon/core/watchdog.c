/* The daemon's clock: stuck ops are logged once, naming the ranks that
 * have not issued them (stats show them with their age all along), those
 * of a group's shared segment too (the fast row's group_tick, once a
 * stall); an op
 * waiting past its group's op timeout, or running in its engine past it,
 * fails on every rank and breaks the group; groups that never complete fail their joins at the join
 * deadline; connections past their hello or partial-frame deadline go;
 * a drain past its deadline stops the daemon. */
#include <stdio.h>

#include "lifecycle.h"
#include "group.h"
#include "op.h"
#include "op_engine.h"
#include "session.h"
#include "op_p2p.h"

/* Deadlines are in seconds (or the client's milliseconds): a quarter of a
 * second is fine enough. */
#define TICK_MS 250

static void report(spd_ctx *ctx, spd_op *op, uint64_t now) {
  char miss[256];
  op->stuck_reported = 1;
  SPD_WARN(&ctx->log, "stuck op: group '%s' op %llu (%s) pending %.1f s, "
           "waiting for rank(s) %s", op->group->name,
           (unsigned long long)op->seq,
           spd_op_slot_name(spd_op_slot_of(op)),
           (double)(now - op->created_ns) * 1e-9,
           spd_op_missing(op, miss, sizeof(miss)));
}

/* The op some rank never issued: every rank that did hears which ones did
 * not, and the group breaks, so the late rank's op fails at once too. */
static void op_timed_out(spd_group *g, spd_op *op, uint64_t now) {
  spd_ctx *ctx = g->ctx;
  char miss[200], msg[400];
  snprintf(msg, sizeof(msg), "op %llu (%s) of group '%s' timed out after "
           "%.1f s: rank(s) %s never issued it", (unsigned long long)op->seq,
           spd_op_slot_name(spd_op_slot_of(op)), g->name,
           (double)(now - op->created_ns) * 1e-9,
           spd_op_missing(op, miss, sizeof(miss)));
  SPD_WARN(&ctx->log, "%s", msg);
  ctx->stats.ops_timed_out++;
  spd_group_break(g, SPK_ETIMEDOUT, msg);
  spd_group_fail_pending(g, SPK_ETIMEDOUT, msg);
}

/* An op running in its engine past the op timeout, which no engine ends
 * by itself (a GPU stream waiting on an event its dead client never
 * recorded, a peer frozen mid-stream with its peer timeout far away): its
 * ranks hear it now and the group breaks. The op stays until its engine
 * lets go of it (a stop waits for that at most drain_timeout). first: the
 * op that timed out (op itself, or the one op was queued behind); msg
 * gets what the ranks hear. */
static void running_timed_out(spd_group *g, spd_op *op, uint64_t now,
                              const spd_op *first, char *msg, size_t len) {
  spd_ctx *ctx = g->ctx;
  if (first == op)
    snprintf(msg, len, "op %llu (%s) of group '%s' timed out after %.1f s "
             "running in the %s engine; its outputs are undefined",
             (unsigned long long)op->seq,
             spd_op_slot_name(spd_op_slot_of(op)), g->name,
             (double)(now - op->submitted_ns) * 1e-9,
             spd_engine_name(op->engine));
  else
    snprintf(msg, len, "op %llu (%s) of group '%s' was queued behind op "
             "%llu, which timed out: given up with it; its outputs are "
             "undefined", (unsigned long long)op->seq,
             spd_op_slot_name(spd_op_slot_of(op)), g->name,
             (unsigned long long)first->seq);
  SPD_WARN(&ctx->log, "%s", msg);
  ctx->stats.ops_timed_out++;
  op->abandoned = 1;
  spd_group_break(g, SPK_ETIMEDOUT, msg);
  for (int i = 0; i < g->world; i++) {
    spd_op_rank *r = &op->ranks[i];
    if (r->session != NULL)
      spd_session_send_error(r->session, r->req, SPK_ETIMEDOUT, msg);
    spd_engines_rank_release(&r->eng); /* its stream goes on */
    spd_op_forget_session(op, i);
  }
  spd_engine_abort(op, SPK_ETIMEDOUT, msg, -1);
}

/* An op that failed before its engine had it, its answer held for an
 * earlier op that has now timed out (op.c, op_fail_at_start): answered
 * now, in its place, its ranks let go. */
static void failed_early(spd_op *op) {
  for (int i = 0; i < op->group->world; i++) {
    spd_op_rank *r = &op->ranks[i];
    if (r->session != NULL)
      spd_session_send_error(r->session, r->req, op->fail_status,
                             op->fail_msg);
    spd_engines_rank_release(&r->eng);
    spd_op_forget_session(op, i);
  }
  op->abandoned = 1;
}

/* Op timed out in its engine: it and the ops queued behind it (which run
 * only after it) are given up, then the pending ones fail, all answered
 * in their order. */
static void running_ops_timed_out(spd_group *g, spd_op *op, uint64_t now) {
  char msg[400], later[400];
  for (spd_op *o = op; o != NULL; o = TAILQ_NEXT(o, link)) {
    if (!o->running || o->abandoned)
      continue;
    if (o->finished && o->fail_status < 0)
      failed_early(o);
    else if (!o->finished && o->submitted_ns != 0)
      running_timed_out(g, o, now, op, o == op ? msg : later, sizeof(msg));
  }
  spd_group_fail_pending(g, SPK_ETIMEDOUT, msg);
}

static void group_tick(spd_group *g, uint64_t now) {
  spd_ctx *ctx = g->ctx;
  spd_engines_group_tick(&g->shared, now); /* the fast path's ops: stuck,
                                          * or past the op timeout */
  if (!g->broken)
    spd_p2p_tick(g, now);
  uint64_t stuck = (uint64_t)ctx->cfg.stuck_seconds * 1000000000u;
  spd_op *op;
  TAILQ_FOREACH(op, &g->ops, link) {
    if (op->running && !op->abandoned && !op->finished &&
        op->submitted_ns != 0 && now - op->submitted_ns > g->op_timeout_ns) {
      running_ops_timed_out(g, op, now);
      return;
    }
    if (op->running)
      continue;
    if (op->arrived < g->world && now - op->created_ns > g->op_timeout_ns) {
      op_timed_out(g, op, now); /* fails every op not running */
      return;
    }
    if (!op->stuck_reported && now - op->created_ns > stuck)
      report(ctx, op, now);
  }
}

static void on_tick(uv_timer_t *t) {
  spd_ctx *ctx = t->data;
  uint64_t now = spd_now_ns();
  uint64_t join_limit = (uint64_t)ctx->cfg.join_timeout * 1000000000u;
  spd_group *g, *next;
  for (g = TAILQ_FIRST(&ctx->groups); g != NULL; g = next) {
    next = TAILQ_NEXT(g, link);
    if (!g->ready && (now - g->created_ns > join_limit ||
                      (g->join_by_ns != 0 && now > g->join_by_ns)))
      spd_group_expire(g); /* frees g */
    else
      group_tick(g, now);
  }
  spd_session_deadlines(ctx, now);
  spd_control_tick(ctx, now);
  spd_group_peer_refused_tick(ctx, now);
  spd_drain_check(ctx); /* an expired group may have been the last */
}

int spd_watchdog_start(spd_ctx *ctx, spk_err *err) {
  int rc = uv_timer_init(ctx->loop, &ctx->watchdog);
  if (rc == 0) {
    ctx->watchdog.data = ctx; /* from here on, stop must close it */
    rc = uv_timer_start(&ctx->watchdog, on_tick, TICK_MS, TICK_MS);
  }
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "watchdog timer: %s",
                       uv_strerror(rc));
  return SPK_OK;
}

void spd_watchdog_stop(spd_ctx *ctx) {
  if (ctx->watchdog.data != NULL)
    uv_close((uv_handle_t *)&ctx->watchdog, NULL);
  ctx->watchdog.data = NULL;
}
