/* The host engine: the host mover's threads (mover_host.c) run plans over
 * host memory on this node. */
#include "engine.h"

#include "daemon.h"
#include "mover_host.h"

static int host_start(spd_ctx *ctx, spk_err *err) {
  return spd_mover_start(ctx->loop, ctx->cfg.workers, &ctx->mover, err);
}

static int host_wants(const spd_work *w) {
  return !w->device && !w->multinode ? 2 : 0;
}

static void host_done(void *arg) {
  spd_work *w = arg;
  w->done(w->arg, SPK_OK, NULL);
}

static int host_submit(spd_work *w, spk_err *err) {
  return spd_mover_submit(w->ctx->mover, w->plan, w->bases, host_done, w,
                          err);
}

static void host_fini(spd_ctx *ctx) {
  if (ctx->mover != NULL)
    spd_mover_stop(ctx->mover);
  ctx->mover = NULL;
}

const spd_engine spd_engine_host = {
    .built = 1,
    .start = host_start,
    .wants = host_wants,
    .submit = host_submit,
    .fini = host_fini,
};
