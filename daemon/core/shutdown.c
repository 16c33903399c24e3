/* Orderly stop of the daemon (SIGTERM/SIGINT). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "lifecycle.h"
#include "daemon.h"
#include "gpu_ipc.h"
#include "group.h"
#include "engine.h"
#include "op.h"
#include "peer.h"
#include "sd.h"
#include "session.h"

/* An op that never ends in its mover (a GPU stream waiting on an event
 * its dead client never recorded, a peer stopped mid-stream) would hold
 * the stop for ever: past drain_timeout the daemon says which and exits
 * without the orderly teardown, which could touch what that op still
 * uses. Its clients see the connection close. */
static void on_stop_limit(uv_timer_t *t) {
  spd_ctx *ctx = t->data;
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link) {
    spd_op *op;
    TAILQ_FOREACH(op, &g->ops, link)
      if (op->running)
        SPD_ERROR(&ctx->log, "stop: op %llu of group '%s' still running "
                  "in its engine%s", (unsigned long long)op->seq, g->name,
                  op->abandoned ? " (timed out before)" : " past "
                  "drain_timeout");
  }
  SPD_ERROR(&ctx->log, "exiting with %d op(s) still running",
            ctx->running_ops);
  _exit(3);
}

/* 1 when every running op already timed out in its engine (its ranks
 * were answered): nothing is left to wait for. */
static int only_abandoned(spd_ctx *ctx) {
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link) {
    spd_op *op;
    TAILQ_FOREACH(op, &g->ops, link)
      if (op->running && !op->abandoned)
        return 0;
  }
  return 1;
}

static void stop_limit_arm(spd_ctx *ctx) {
  uint64_t ms = only_abandoned(ctx) ? 0 : (uint64_t)ctx->cfg.drain_timeout *
                                              1000;
  int rc = uv_timer_init(ctx->loop, &ctx->stop_limit);
  if (rc == 0)
    rc = uv_timer_start(&ctx->stop_limit, on_stop_limit, ms, 0);
  if (rc < 0) {
    SPD_WARN(&ctx->log, "stop deadline timer: %s; the stop waits for the "
             "running ops", uv_strerror(rc));
    return;
  }
  ctx->stop_limit.data = ctx;
}

void spd_shutdown(spd_ctx *ctx) {
  if (ctx->stopping)
    return;
  ctx->stopping = 1;
  SPD_INFO(&ctx->log, "shutting down");
  spd_sd_stopping(ctx);
  spd_server_close(ctx);
  spd_peers_quiesce(ctx);
  spd_group *g;
  const char *moving = "daemon upgrading: the client reconnects to the "
                       "new one";
  TAILQ_FOREACH(g, &ctx->groups, link) {
    /* Upgrading, the groups move: broken here first, so that every op
     * that cannot finish (fast path ones too) fails in those words, not
     * in those of the ranks' departures that follow. */
    if (ctx->upgrading)
      spd_group_break(g, SPK_ERESTARTED, moving);
    spd_group_fail_pending(g, ctx->upgrading ? SPK_ERESTARTED : SPK_ESHUTDOWN,
                           ctx->upgrading ? moving : "daemon shutting down");
  }
  if (ctx->running_ops == 0)
    spd_shutdown_continue(ctx);
  else
    stop_limit_arm(ctx);
}

static void on_grace(uv_timer_t *t) {
  spd_ctx *ctx = t->data;
  SPD_WARN(&ctx->log, "clients did not take their last replies in time; "
           "exiting without them");
  uv_stop(ctx->loop);
}

/* Closing the signal handles gives SIGTERM, SIGINT and SIGHUP back their
 * default action, and one that came now would kill a daemon that is
 * already stopping, with a signal for its exit status: systemd's stop racing a
 * drain's own exit, or a second Ctrl-C. The stop goes on instead. */
static void ignore_stop_signals(spd_ctx *ctx) {
  if (signal(SIGTERM, SIG_IGN) == SIG_ERR || signal(SIGINT, SIG_IGN) == SIG_ERR ||
      signal(SIGHUP, SIG_IGN) == SIG_ERR)
    SPD_WARN(&ctx->log, "signal(SIGTERM/SIGINT/SIGHUP, SIG_IGN) while "
             "stopping failed: %s", strerror(errno));
}

/* Every running op has finished: close the clients (their queued replies
 * are flushed first), the mover and the signal handles; the loop ends.
 * A client that does not read could hold the flush forever: a grace
 * timer, which does not itself keep the loop alive, ends the wait. */
void spd_shutdown_continue(spd_ctx *ctx) {
  if (uv_timer_init(ctx->loop, &ctx->grace) == 0) {
    ctx->grace.data = ctx;
    uv_timer_start(&ctx->grace, on_grace, 2000, 0);
    uv_unref((uv_handle_t *)&ctx->grace);
  }
  if (ctx->stop_limit.data != NULL)
    uv_close((uv_handle_t *)&ctx->stop_limit, NULL);
  ctx->stop_limit.data = NULL;
  spd_session *s;
  while ((s = TAILQ_FIRST(&ctx->sessions)) != NULL)
    spd_session_close(s);
  spd_engines_fini(ctx); /* before the GPU state they may hold */
  spd_gpu_free(ctx);
  spd_watchdog_stop(ctx);
  spd_peers_stop(ctx);
  if (ctx->hooks.metrics_stop != NULL)
    ctx->hooks.metrics_stop(ctx);
  if (ctx->reaper.data != NULL)
    uv_close((uv_handle_t *)&ctx->reaper, NULL);
  ctx->reaper.data = NULL;
  spd_session_rings_stop(ctx);
  uv_close((uv_handle_t *)&ctx->sig_term, NULL);
  uv_close((uv_handle_t *)&ctx->sig_int, NULL);
  spd_reload_stop(ctx);
  ignore_stop_signals(ctx);
}
