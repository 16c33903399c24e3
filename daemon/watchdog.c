/* Stuck ops: an op still waiting for ranks past the configured age is
 * logged once, naming the ranks that have not issued it (stats show it
 * with its age all along). Groups that never complete fail their joins at
 * the join deadline. */
#include "group.h"
#include "op.h"
#include "stats.h"

static void report(spd_ctx *ctx, spd_op *op, uint64_t now) {
  char miss[256];
  op->stuck_reported = 1;
  SPD_WARN(&ctx->log, "stuck op: group '%s' op %llu (%s) pending %.1f s, "
           "waiting for rank(s) %s", op->group->name,
           (unsigned long long)op->seq,
           spd_op_slot_name(spd_op_slot(op->ranks[0].args.op)),
           (double)(now - op->created_ns) * 1e-9,
           spd_stats_missing(op, miss, sizeof(miss)));
}

static void on_tick(uv_timer_t *t) {
  spd_ctx *ctx = t->data;
  uint64_t now = spd_now_ns();
  uint64_t limit = (uint64_t)ctx->cfg.stuck_seconds * 1000000000u;
  uint64_t join_limit = (uint64_t)ctx->cfg.join_timeout * 1000000000u;
  spd_group *g, *next;
  for (g = TAILQ_FIRST(&ctx->groups); g != NULL; g = next) {
    next = TAILQ_NEXT(g, link);
    if (!g->ready && now - g->created_ns > join_limit) {
      spd_group_expire(g); /* frees g */
      continue;
    }
    spd_op *op;
    TAILQ_FOREACH(op, &g->ops, link)
      if (!op->running && !op->stuck_reported && now - op->created_ns > limit)
        report(ctx, op, now);
  }
  spd_drain_check(ctx); /* an expired group may have been the last */
}

int spd_watchdog_start(spd_ctx *ctx, spk_err *err) {
  int rc = uv_timer_init(ctx->loop, &ctx->watchdog);
  if (rc == 0) {
    ctx->watchdog.data = ctx; /* from here on, stop must close it */
    rc = uv_timer_start(&ctx->watchdog, on_tick, 1000, 1000);
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
