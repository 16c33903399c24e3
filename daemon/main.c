/* spcolld: the per-node collective daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lifecycle.h"
#include "daemon.h"
#include "gpu_probe.h"
#include "engine.h"
#include "group.h"
#include "peer.h"
#include "sd.h"
#include "stats.h"

static void on_signal(uv_signal_t *h, int signum) {
  spd_ctx *ctx = h->data;
  SPD_INFO(&ctx->log, "signal %d (%s)", signum, strsignal(signum));
  spd_shutdown(ctx);
}

static int ctx_start(spd_ctx *ctx, int argc, char **argv, spk_err *err) {
  int rc = uv_signal_init(ctx->loop, &ctx->sig_term);
  if (rc == 0)
    rc = uv_signal_init(ctx->loop, &ctx->sig_int);
  if (rc == 0)
    rc = uv_signal_start(&ctx->sig_term, on_signal, SIGTERM);
  if (rc == 0)
    rc = uv_signal_start(&ctx->sig_int, on_signal, SIGINT);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "signal setup: %s", uv_strerror(rc));
  ctx->sig_term.data = ctx->sig_int.data = ctx;
  /* A client that vanishes mid-write must not kill the daemon. */
  signal(SIGPIPE, SIG_IGN);
  /* The layers above core, reached from it only through these. */
  ctx->hooks = (spd_hooks){.stats_render = spd_stats_render,
                           .metrics_stop = spd_metrics_http_stop};
  /* core's lower layers reach its lifecycle only through these. */
  ctx->up = (spd_core_up){.drain_check = spd_drain_check,
                          .stop_continue = spd_shutdown_continue,
                          .split_run = spd_group_split_run,
                          .restart = spd_reload_self};
  rc = spd_reload_start(ctx, argc, argv, err);
  /* --upgrade: the running daemon's sockets, before the peers listen on
   * their bootstrap's. */
  if (rc == SPK_OK && ctx->cfg.upgrade)
    rc = spd_upgrade_take(ctx, err);
  if (rc == SPK_OK)
    rc = spd_engines_start(ctx, err);
  if (rc == SPK_OK)
    rc = spd_watchdog_start(ctx, err);
  if (rc == SPK_OK)
    rc = spd_metrics_http_start(ctx, err);
  if (rc == SPK_OK)
    rc = spd_peers_start(ctx, &spd_group_peer_hooks, err);
  if (rc < 0)
    return rc;
  return spd_server_listen(ctx, err);
}

int main(int argc, char **argv) {
  static spd_ctx ctx_storage; /* lives for the whole process */
  spd_ctx *ctx = &ctx_storage;
  spk_err err;
  spd_config_defaults(&ctx->cfg);
  int rc = spd_config_parse_args(&ctx->cfg, argc, argv, &err);
  if (rc == 1)
    return 0;
  if (rc < 0) {
    fprintf(stderr, "spcolld: %s (try --help)\n", err.msg);
    return 2;
  }
  ctx->log.level = ctx->cfg.log_level;
  ctx->loop = uv_default_loop();
  ctx->started_ns = spd_now_ns();
  ctx->self_uid = geteuid();
  TAILQ_INIT(&ctx->sessions);
  TAILQ_INIT(&ctx->groups);
  ctx->taken[0] = ctx->taken[1] = ctx->taken[2] = -1;
  if (ctx_start(ctx, argc, argv, &err) < 0) {
    SPD_ERROR(&ctx->log, "%s", err.msg);
    spd_shutdown(ctx);
    uv_run(ctx->loop, UV_RUN_DEFAULT);
    return 1;
  }
  char gpu[160];
  spd_gpu_probe(gpu, sizeof(gpu));
  SPD_INFO(&ctx->log, "spcolld %s ready: %d host mover threads; %s",
           SPD_VERSION, ctx->cfg.workers, gpu);
  spd_sd_ready(ctx);
  uv_run(ctx->loop, UV_RUN_DEFAULT);
  if (ctx->grace.data != NULL) { /* the unreferenced grace timer */
    uv_close((uv_handle_t *)&ctx->grace, NULL);
    uv_run(ctx->loop, UV_RUN_NOWAIT);
  }
  rc = uv_loop_close(ctx->loop);
  if (rc < 0)
    SPD_WARN(&ctx->log, "uv_loop_close: %s", uv_strerror(rc));
  spd_quotas_free(&ctx->quotas);
  SPD_INFO(&ctx->log, "stopped");
  return 0;
}
