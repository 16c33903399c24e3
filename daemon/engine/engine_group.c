/* The table's group hooks: a group's calls reach the one row that defines
 * them (spd_engines_start checks there is at most one) through the state
 * it made at group_open. Loop thread only. */
#include "engine.h"

#include <stddef.h>

#include "daemon.h"

/* The row of st, or NULL when it keeps nothing of the group. */
static const spd_engine *row(const spd_group_state *st) {
  return st->p != NULL ? spd_engines[st->kind] : NULL;
}

void spd_engines_group_open(const spd_group_view *g, spd_group_state *st) {
  st->kind = -1;
  st->p = NULL;
  for (int k = 0; k < SPD_ENGINE_COUNT; k++) {
    const spd_engine *e = spd_engines[k];
    if (!e->built || e->group_open == NULL)
      continue;
    st->kind = k;
    e->group_open(g, &g->ctx->engine_stats[k], &st->p);
    return;
  }
}

int spd_engines_group_fd(spd_group_state *st, int rank, uint64_t *size) {
  const spd_engine *e = row(st);
  return e != NULL && e->group_fd != NULL ? e->group_fd(st->p, rank, size)
                                          : -1;
}

void spd_engines_group_fd_lost(spd_group_state *st) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_fd_lost != NULL)
    e->group_fd_lost(st->p);
}

void spd_engines_group_answered(spd_group_state *st, int rank, uint64_t req) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_answered != NULL)
    e->group_answered(st->p, rank, req);
}

void spd_engines_group_break(spd_group_state *st, int status,
                             const char *msg) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_break != NULL)
    e->group_break(st->p, status, msg);
}

void spd_engines_group_tick(spd_group_state *st, uint64_t now) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_tick != NULL)
    e->group_tick(st->p, now);
}

int spd_engines_group_waiting(spd_group_state *st, uint64_t now,
                              spd_group_wait *w) {
  const spd_engine *e = row(st);
  return e != NULL && e->group_waiting != NULL &&
         e->group_waiting(st->p, now, w);
}

void spd_engines_group_harvest(spd_group_state *st) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_harvest != NULL)
    e->group_harvest(st->p);
}

void spd_engines_group_line(spd_group_state *st, const char *label,
                            FILE *out) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_line != NULL)
    e->group_line(st->p, label, out);
}

void spd_engines_group_drain(spd_group_state *st) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_drain != NULL)
    e->group_drain(st->p);
}

int spd_engines_group_busy(spd_group_state *st) {
  const spd_engine *e = row(st);
  return e != NULL && e->group_busy != NULL && e->group_busy(st->p);
}

void spd_engines_group_close(spd_group_state *st) {
  const spd_engine *e = row(st);
  if (e != NULL && e->group_close != NULL)
    e->group_close(st->p);
  st->p = NULL;
}
