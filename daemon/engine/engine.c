/* The engine table: rows from SPD_ENGINES, each defined in its engine's
 * file; the choice of an engine for a work item; start and stop of all. */
#include "engine.h"

#include <stddef.h>
#include <string.h>

#include "daemon.h"

/* The context keeps each engine's counters (daemon.h). */
_Static_assert(SPD_ENGINE_COUNT <= SPD_MAX_ENGINES,
               "more engines than the context has counters for");

const spd_engine *const spd_engines[SPD_ENGINE_COUNT] = {
#define SPD_ENGINE_ROW(kind, name, ops_help, bytes_help)                     \
  [SPD_ENGINE_##kind] = &spd_engine_##name,
    SPD_ENGINES(SPD_ENGINE_ROW)
#undef SPD_ENGINE_ROW
};

static const char *const names[SPD_ENGINE_COUNT] = {
#define SPD_ENGINE_NAME(kind, name, ops_help, bytes_help)                    \
  [SPD_ENGINE_##kind] = #name,
    SPD_ENGINES(SPD_ENGINE_NAME)
#undef SPD_ENGINE_NAME
};

const char *spd_engine_name(int kind) {
  return kind >= 0 && kind < SPD_ENGINE_COUNT ? names[kind] : "?";
}

int spd_engine_find(const char *name) {
  for (int k = 0; k < SPD_ENGINE_COUNT; k++)
    if (strcmp(names[k], name) == 0)
      return k;
  return -1;
}

int spd_engine_runs(int kind) {
  return kind >= 0 && kind < SPD_ENGINE_COUNT && spd_engines[kind]->built &&
         spd_engines[kind]->wants != NULL && spd_engines[kind]->submit != NULL;
}

int spd_engine_pick(const spd_work *w, int prefer) {
  if (prefer >= 0 && prefer < SPD_ENGINE_COUNT && spd_engine_runs(prefer) &&
      spd_engines[prefer]->wants(w) > 0)
    return prefer;
  int best = -1, score = 0;
  for (int k = 0; k < SPD_ENGINE_COUNT; k++) {
    int s = spd_engine_runs(k) ? spd_engines[k]->wants(w) : 0;
    if (s > score)
      best = k, score = s;
  }
  return best;
}

/* The per-rank hooks keep state every row that runs device work reads
 * (w->rank_state), and a group's shared memory goes out in its one
 * GroupJoined descriptor: one row may define each set. A second would be
 * called never, so the table is refused instead. */
static int rank_hooks(const spd_engine *e) {
  return e->rank_open != NULL || e->flags_open != NULL;
}

static int group_hooks(const spd_engine *e) {
  return e->group_open != NULL;
}

static int hooks_unique(int (*has)(const spd_engine *), const char *what,
                        spk_err *err) {
  int first = -1;
  for (int k = 0; k < SPD_ENGINE_COUNT; k++) {
    const spd_engine *e = spd_engines[k];
    if (!e->built || !has(e))
      continue;
    if (first >= 0)
      return spk_err_set(err, SPK_EINVAL, "engine rows %s and %s both "
                         "define the %s; one row may", spd_engine_name(first),
                         spd_engine_name(k), what);
    first = k;
  }
  return SPK_OK;
}

int spd_engines_start(struct spd_ctx *ctx, spk_err *err) {
  int rc = hooks_unique(rank_hooks, "per-rank hooks (rank_open, "
                        "flags_open)", err);
  if (rc == SPK_OK)
    rc = hooks_unique(group_hooks, "group hooks (group_open)", err);
  if (rc < 0)
    return rc;
  for (int k = 0; k < SPD_ENGINE_COUNT; k++) {
    const spd_engine *e = spd_engines[k];
    if (!e->built || e->start == NULL)
      continue;
    int rc = e->start(ctx, err);
    if (rc < 0)
      return rc; /* the daemon exits; spd_engines_fini stops the rest */
  }
  return SPK_OK;
}

/* Reverse order: an engine may lean on one listed before it. */
void spd_engines_fini(struct spd_ctx *ctx) {
  for (int k = SPD_ENGINE_COUNT - 1; k >= 0; k--)
    if (spd_engines[k]->built && spd_engines[k]->fini != NULL)
      spd_engines[k]->fini(ctx);
}

void spd_engines_forget_buffer(struct spd_ctx *ctx, void **state) {
  for (int k = 0; k < SPD_ENGINE_COUNT; k++)
    if (state[k] != NULL && spd_engines[k]->built &&
        spd_engines[k]->forget_buffer != NULL)
      spd_engines[k]->forget_buffer(ctx, &state[k]);
}

const char *spd_engine_help(int kind, int bytes) {
  static const char *const help[SPD_ENGINE_COUNT][2] = {
#define SPD_ENGINE_HELP(kind, name, ops_help, bytes_help)                    \
  [SPD_ENGINE_##kind] = {ops_help, bytes_help},
      SPD_ENGINES(SPD_ENGINE_HELP)
#undef SPD_ENGINE_HELP
  };
  return kind >= 0 && kind < SPD_ENGINE_COUNT ? help[kind][bytes != 0] : "";
}

int spd_engines_rank_open(const spd_rank_req *rq, spd_rank_state *st,
                          spk_err *err) {
  st->kind = -1;
  st->p = NULL;
  for (int k = 0; k < SPD_ENGINE_COUNT; k++) {
    const spd_engine *e = spd_engines[k];
    if (!e->built || e->rank_open == NULL)
      continue;
    st->kind = k;
    return e->rank_open(rq, &st->p, err);
  }
  return SPK_OK;
}

void spd_engines_rank_close(spd_rank_state *st) {
  if (st->p != NULL && spd_engines[st->kind]->rank_close != NULL)
    spd_engines[st->kind]->rank_close(st->p);
  st->p = NULL;
}

void spd_engines_rank_release(spd_rank_state *st) {
  if (st->p != NULL && spd_engines[st->kind]->rank_release != NULL)
    spd_engines[st->kind]->rank_release(st->p);
}

int spd_engines_rank_recorded(const spd_rank_state *st) {
  return st->p != NULL && spd_engines[st->kind]->rank_recorded != NULL &&
         spd_engines[st->kind]->rank_recorded(st->p);
}

int spd_engines_flags_open(struct spd_ctx *ctx, uint8_t *base, size_t size,
                           void **state, spk_err *err) {
  for (int k = 0; k < SPD_ENGINE_COUNT; k++) {
    const spd_engine *e = spd_engines[k];
    if (e->built && e->flags_open != NULL)
      return e->flags_open(ctx, base, size, &state[k], err);
  }
  return spk_err_set(err, SPK_EUNSUPPORTED, "stream flags need a GPU "
                     "engine: spcolld was built without CUDA");
}
