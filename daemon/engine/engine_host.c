/* The host engine: the host mover's threads (mover_host.c) run plans over
 * host memory on this node. */
#include "engine.h"

#include "daemon.h"
#include "mover_host.h"

/* The row's state, in the daemon's context: the mover. */
static spd_mover *mover_of(spd_ctx *ctx) {
  return ctx->engine_state[SPD_ENGINE_HOST];
}

static int host_start(spd_ctx *ctx, spk_err *err) {
  spd_mover *m = NULL;
  int rc = spd_mover_start(ctx->loop, ctx->cfg.workers, &m, err);
  if (rc == SPK_OK)
    ctx->engine_state[SPD_ENGINE_HOST] = m;
  return rc;
}

static int host_wants(const spd_work *w) {
  return !w->device && !w->multinode ? 2 : 0;
}

static void host_done(void *arg) {
  spd_work *w = arg;
  w->done(w->arg, SPK_OK, NULL);
}

static int host_submit(spd_work *w, spk_err *err) {
  return spd_mover_submit(mover_of(w->ctx), w->plan, w->bases, host_done, w,
                          err);
}

static void host_fini(spd_ctx *ctx) {
  if (mover_of(ctx) != NULL)
    spd_mover_stop(mover_of(ctx));
  ctx->engine_state[SPD_ENGINE_HOST] = NULL;
}

const spd_engine spd_engine_host = {
    .built = 1,
    .start = host_start,
    .wants = host_wants,
    .submit = host_submit,
    .fini = host_fini,
};
