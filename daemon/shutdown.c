/* Orderly stop of the daemon (SIGTERM/SIGINT). */
#include "daemon.h"
#include "group.h"
#include "mover_host.h"
#include "session.h"

void spd_shutdown(spd_ctx *ctx) {
  if (ctx->stopping)
    return;
  ctx->stopping = 1;
  SPD_INFO(&ctx->log, "shutting down");
  spd_server_close(ctx);
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    spd_group_fail_pending(g, SPK_ESHUTDOWN, "daemon shutting down");
  if (ctx->running_ops == 0)
    spd_shutdown_continue(ctx);
}

/* Every running op has finished: close the clients (their queued replies
 * are flushed first), the mover and the signal handles; the loop ends. */
void spd_shutdown_continue(spd_ctx *ctx) {
  spd_session *s;
  while ((s = TAILQ_FIRST(&ctx->sessions)) != NULL)
    spd_session_close(s);
  if (ctx->mover != NULL) {
    spd_mover_stop(ctx->mover);
    ctx->mover = NULL;
  }
  spd_watchdog_stop(ctx);
  uv_close((uv_handle_t *)&ctx->sig_term, NULL);
  uv_close((uv_handle_t *)&ctx->sig_int, NULL);
}
