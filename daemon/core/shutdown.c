/* Orderly stop of the daemon (SIGTERM/SIGINT). */
#include "daemon.h"
#include "gpu_ipc.h"
#include "group.h"
#include "engine.h"
#include "peer.h"
#include "sd.h"
#include "session.h"

void spd_shutdown(spd_ctx *ctx) {
  if (ctx->stopping)
    return;
  ctx->stopping = 1;
  SPD_INFO(&ctx->log, "shutting down");
  spd_sd_stopping(ctx);
  spd_server_close(ctx);
  spd_peers_quiesce(ctx);
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    spd_group_fail_pending(g, SPK_ESHUTDOWN, "daemon shutting down");
  if (ctx->running_ops == 0)
    spd_shutdown_continue(ctx);
}

static void on_grace(uv_timer_t *t) {
  spd_ctx *ctx = t->data;
  SPD_WARN(&ctx->log, "clients did not take their last replies in time; "
           "exiting without them");
  uv_stop(ctx->loop);
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
  uv_close((uv_handle_t *)&ctx->sig_term, NULL);
  uv_close((uv_handle_t *)&ctx->sig_int, NULL);
}
