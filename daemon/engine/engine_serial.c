/* The serial engine: host plans executed one at a time on the loop
 * thread, one plan per loop iteration. It exists to show the engine
 * contract: this file and one row of SPD_ENGINES are all it took. It is
 * chosen only when the config says `mover = serial`: deterministic
 * single-threaded execution, for tests and for telling a mover bug from a
 * plan bug. */
#include "engine.h"

#include <stdlib.h>
#include <sys/queue.h>

#include "daemon.h"

typedef struct serial_item {
  TAILQ_ENTRY(serial_item) link;
  spd_work *w;
} serial_item;

typedef struct {
  uv_idle_t idle;             /* active while work waits */
  TAILQ_HEAD(, serial_item) todo;
} serial_state;

/* The row's state, in the daemon's context. */
static serial_state *state_of(spd_ctx *ctx) {
  return ctx->engine_state[SPD_ENGINE_SERIAL];
}

/* One plan per iteration: the loop keeps serving clients in between. */
static void on_idle(uv_idle_t *idle) {
  serial_state *st = idle->data;
  serial_item *it = TAILQ_FIRST(&st->todo);
  if (it == NULL) {
    uv_idle_stop(idle);
    return;
  }
  TAILQ_REMOVE(&st->todo, it, link);
  spd_work *w = it->w;
  free(it);
  spk_plan_exec(w->plan, w->bases);
  w->done(w->arg, SPK_OK, NULL);
}

static int serial_start(spd_ctx *ctx, spk_err *err) {
  serial_state *st = calloc(1, sizeof(*st));
  if (st == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of the serial engine "
                       "failed");
  TAILQ_INIT(&st->todo);
  int rc = uv_idle_init(ctx->loop, &st->idle);
  if (rc < 0) {
    free(st);
    return spk_err_set(err, SPK_ESYSTEM, "serial engine: uv_idle_init "
                       "failed: %s", uv_strerror(rc));
  }
  st->idle.data = st;
  ctx->engine_state[SPD_ENGINE_SERIAL] = st;
  return SPK_OK;
}

/* Can run any host plan on this node, but is never the first choice. */
static int serial_wants(const spd_work *w) {
  return !w->device && !w->multinode ? 1 : 0;
}

static int serial_submit(spd_work *w, spk_err *err) {
  serial_item *it = calloc(1, sizeof(*it));
  if (it == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a serial engine item "
                       "failed");
  it->w = w;
  serial_state *state = state_of(w->ctx);
  int rc = uv_idle_start(&state->idle, on_idle);
  if (rc < 0) { /* cannot fail for a live handle; said if it ever does */
    free(it);
    return spk_err_set(err, SPK_ESYSTEM, "serial engine: uv_idle_start "
                       "failed: %s", uv_strerror(rc));
  }
  TAILQ_INSERT_TAIL(&state->todo, it, link);
  return SPK_OK;
}

static void on_closed(uv_handle_t *h) {
  serial_state *st = h->data;
  serial_item *it;
  while ((it = TAILQ_FIRST(&st->todo)) != NULL) { /* none: no op runs */
    TAILQ_REMOVE(&st->todo, it, link);
    free(it);
  }
  free(st);
}

static void serial_fini(spd_ctx *ctx) {
  serial_state *state = state_of(ctx);
  if (state == NULL)
    return;
  uv_close((uv_handle_t *)&state->idle, on_closed);
  ctx->engine_state[SPD_ENGINE_SERIAL] = NULL;
}

const spd_engine spd_engine_serial = {
    .built = 1,
    .start = serial_start,
    .wants = serial_wants,
    .submit = serial_submit,
    .fini = serial_fini,
};
