#include "group.h"
#include "op_p2p.h"

#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "op.h"
#include "op_engine.h"

/* The record a local join goes to: one still gathering ranks first, else
 * a complete one (whose checks then refuse the join). Detached records,
 * left by every local rank, are never joined again. */
spd_group *spd_group_find(spd_ctx *ctx, uid_t owner, const char *name) {
  spd_group *g, *found = NULL;
  TAILQ_FOREACH(g, &ctx->groups, link) {
    if (g->detached || g->owner != owner || strcmp(g->name, name) != 0)
      continue;
    if (!g->ready && !g->broken)
      return g;
    found = g;
  }
  return found;
}

spd_group *spd_group_create(spd_ctx *ctx, const char *name, int world,
                            uid_t owner) {
  spd_group *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return NULL;
  g->ranks = calloc((size_t)world, sizeof(*g->ranks));
  if (g->ranks == NULL) {
    free(g);
    return NULL;
  }
  g->ctx = ctx;
  g->world = world;
  g->owner = owner;
  g->rec = spd_next_id(ctx);
  g->created_ns = spd_now_ns();
  g->op_timeout_ns = (uint64_t)ctx->cfg.op_timeout * 1000000000u;
  snprintf(g->name, sizeof(g->name), "%s", name);
  TAILQ_INIT(&g->ops);
  TAILQ_INIT(&g->p2p_sends);
  TAILQ_INIT(&g->p2p_recvs);
  TAILQ_INIT(&g->p2p_run);
  TAILQ_INSERT_TAIL(&ctx->groups, g, link);
  return g;
}

int spd_group_may_use_uid(const spd_ctx *ctx, uid_t owner, uid_t uid) {
  if (uid == 0 || uid == owner)
    return 1;
  for (int i = 0; i < ctx->cfg.nallow_uid; i++)
    if (ctx->cfg.allow_uid[i] == uid)
      return 1;
  return 0;
}

int spd_group_may_use(const spd_ctx *ctx, const spd_group *g, uid_t uid) {
  return spd_group_may_use_uid(ctx, g->owner, uid);
}

int spd_group_name_parse(const char *full, uid_t self, uid_t *owner_p,
                         const char **name_p, spk_err *err) {
  if (full[0] != '@') {
    *owner_p = self, *name_p = full;
    return SPK_OK;
  }
  char *end;
  unsigned long uid = strtoul(full + 1, &end, 10);
  if (end == full + 1 || *end != '/' || end[1] == '\0' || uid > INT_MAX)
    return spk_err_set(err, SPK_EINVAL, "group name '%s': a name starting "
                       "with '@' is qualified as @UID/NAME (a numeric uid, "
                       "a slash, a name)", full);
  *owner_p = (uid_t)uid, *name_p = end + 1;
  return SPK_OK;
}

const char *spd_group_label(const spd_group *g, uid_t viewer, char *buf,
                            size_t len) {
  if (g->owner == viewer)
    return g->name;
  snprintf(buf, len, "@%u/%s", (unsigned)g->owner, g->name);
  return buf;
}

static int join_check(spd_group *g, const Spcoll__GroupJoin *j, char *msg,
                      size_t len) {
  if (g->world != j->world_size) {
    snprintf(msg, len, "group '%s' has world size %d, not %d", g->name,
             g->world, j->world_size);
    return SPK_ECONFLICT;
  }
  if (g->broken) {
    snprintf(msg, len, "group '%s' is broken (%s); it can be joined again "
             "once every member has left", g->name, g->broken_reason);
    return SPK_ECONFLICT;
  }
  spd_rank_slot *slot = &g->ranks[j->rank];
  if (slot->remote) {
    snprintf(msg, len, "rank %d of group '%s' is already joined on node %d",
             j->rank, g->name, slot->node);
    return SPK_ECONFLICT;
  }
  if (slot->session != NULL) {
    snprintf(msg, len, "rank %d of group '%s' is already joined by client "
             "%llu (pid %d)", j->rank, g->name,
             (unsigned long long)slot->session->id, (int)slot->session->pid);
    return SPK_ECONFLICT;
  }
  return SPK_OK;
}

static int join_args_check(const spd_config *cfg, const spd_session *s,
                           const Spcoll__GroupJoin *j, char *msg,
                           size_t len) {
  if (s->ngroups >= cfg->client_max_groups) {
    snprintf(msg, len, "client limit: %d groups joined (client_max_groups)",
             s->ngroups);
    return SPK_ENO_MEMORY;
  }
  if (j->world_size > cfg->max_world) {
    snprintf(msg, len, "world_size %d is above this daemon's max_world %d",
             j->world_size, cfg->max_world);
    return SPK_EINVAL;
  }
  /* The name's characters were checked on arrival (spk_name_check). */
  if (j->world_size < 1 || j->world_size > 65536) {
    snprintf(msg, len, "world_size %d outside 1..65536", j->world_size);
    return SPK_EINVAL;
  }
  if (j->rank < 0 || j->rank >= j->world_size) {
    snprintf(msg, len, "rank %d outside 0..%d of world_size %d", j->rank,
             j->world_size - 1, j->world_size);
    return SPK_EINVAL;
  }
  return SPK_OK;
}

/* A row's own op of g past the op timeout (the fast path's): g breaks
 * and its pending ops fail, as the daemon path's timeouts do. */
static void fail_from_row(void *group, int status, const char *msg) {
  spd_group_break(group, status, msg);
  spd_group_fail_pending(group, status, msg);
}

/* Memory shared with the ranks (the fast path's segment), for a group
 * whose ranks are all here: the row with group hooks makes it. */
static void shared_open(spd_group *g) {
  if (g->multinode || g->nlocal != g->world)
    return;
  g->view = (spd_group_view){.ctx = g->ctx, .name = g->name,
                             .world = g->world, .owner = g->owner,
                             .op_timeout_ns = g->op_timeout_ns,
                             .broken = &g->broken, .ops_done = &g->ops_done,
                             .op_stats = g->op_stats, .fail = fail_from_row,
                             .group = g};
  spd_engines_group_open(&g->view, &g->shared);
}

/* GroupJoined f to s, with the shared memory's descriptor where g has
 * one (f's fast_seg_size set). A descriptor that cannot be sent closes
 * the shared memory for every rank (group_fd_lost). */
static void send_joined(spd_group *g, spd_session *s, Spcoll__Frame *f) {
  uint64_t size = 0;
  int fd = spd_engines_group_fd(&g->shared, (int)f->group_joined->rank,
                                &size);
  if (fd >= 0) {
    f->group_joined->fast_seg_size = size;
    if (spd_session_send_fd(s, f, fd) == SPK_OK)
      return;
    spd_engines_group_fd_lost(&g->shared);
    f->group_joined->fast_seg_size = 0;
  }
  spd_session_send(s, f);
}

/* The most ops any rank, here or on another node (Join.issued), issued
 * before it joined: a rejoin after a restart, where each rank fails the
 * ops it is behind by, so that the group's sequence starts at the same op
 * on every rank. Every node computes the same number. */
static uint64_t issued_most(const spd_group *g) {
  uint64_t most = 0;
  for (int r = 0; r < g->world; r++)
    if ((g->ranks[r].session != NULL || g->ranks[r].remote) &&
        g->ranks[r].issued > most)
      most = g->ranks[r].issued;
  return most;
}

void spd_group_announce_ready(spd_group *g) {
  uint64_t most = issued_most(g);
  g->ready = 1;
  SPD_INFO(&g->ctx->log, "group '%s' ready: %d ranks (%d here)%s", g->name,
           g->world, g->nlocal, most ? ", rejoined after a restart" : "");
  if (g->nlocal == 0)
    g->detached = 1; /* none of it is ours: kept only to hear it leave */
  shared_open(g);
  for (int r = 0; r < g->world; r++) {
    spd_rank_slot *slot = &g->ranks[r];
    if (slot->session == NULL)
      continue; /* on another node: its daemon answers it */
    Spcoll__GroupJoined joined = SPCOLL__GROUP_JOINED__INIT;
    Spcoll__Frame f = SPCOLL__FRAME__INIT;
    joined.group_id = slot->member->id;
    joined.rank = r;
    joined.world_size = g->world;
    joined.multinode = g->multinode;
    joined.skip = most - slot->issued;
    f.id = slot->join_req;
    f.body_case = SPCOLL__FRAME__BODY_GROUP_JOINED;
    f.group_joined = &joined;
    send_joined(g, slot->session, &f);
  }
  spd_group_kick(g); /* ops of other nodes' ranks may be waiting */
}

/* A rejoin's count of ops issued, and how long it waits for the rest:
 * the group's deadline is the earliest any rank asked for. */
static void join_wait(spd_group *g, const Spcoll__GroupJoin *j) {
  g->ranks[j->rank].issued = j->issued;
  if (j->wait_ms == 0)
    return;
  uint64_t by = spd_now_ns() + j->wait_ms * 1000000u;
  if (g->join_by_ns == 0 || by < g->join_by_ns)
    g->join_by_ns = by;
}

void spd_group_join(spd_ctx *ctx, spd_session *s, uint64_t req,
                    const Spcoll__GroupJoin *j) {
  char msg[256];
  uid_t owner = s->uid;
  const char *name = j->name;
  spk_err err;
  int rc = join_args_check(&ctx->cfg, s, j, msg, sizeof(msg));
  if (rc == SPK_OK &&
      (rc = spd_group_name_parse(j->name, s->uid, &owner, &name, &err)) < 0)
    snprintf(msg, sizeof(msg), "%s", err.msg);
  if (rc == SPK_OK && owner != s->uid && !spd_group_may_use_uid(ctx, owner,
                                                                s->uid)) {
    rc = SPK_EPERM;
    snprintf(msg, sizeof(msg), "group '%s' belongs to uid %d; uid %d may "
             "not join it (root and allow_uid may)", name, (int)owner,
             (int)s->uid);
  }
  spd_group *g = rc < 0 ? NULL : spd_group_find(ctx, owner, name);
  /* A rejoin (wait_ms) leaves a broken record to the ranks that have not
   * noticed yet: they leave it when they rejoin too. */
  if (g != NULL && g->broken && j->wait_ms != 0)
    g = NULL;
  if (rc == SPK_OK && g != NULL)
    rc = join_check(g, j, msg, sizeof(msg));
  if (rc == SPK_OK && g == NULL && ctx->draining) {
    spd_session_refuse(s, req, "groups");
    return;
  }
  if (rc == SPK_OK && g == NULL) {
    g = spd_group_create(ctx, name, j->world_size, owner);
    if (g == NULL) {
      rc = SPK_ENO_MEMORY;
      snprintf(msg, sizeof(msg), "out of memory creating group '%s'", name);
    }
  }
  /* The shortest timeout any rank asked for: each rank's wish holds. */
  if (rc == SPK_OK && j->op_timeout_ms != 0 &&
      j->op_timeout_ms < g->op_timeout_ns / 1000000u)
    g->op_timeout_ns = j->op_timeout_ms * 1000000u;
  if (rc == SPK_OK) /* before the add, which may complete the group */
    join_wait(g, j);
  if (rc == SPK_OK && spd_group_add(g, s, j->rank, req) < 0) {
    rc = SPK_ENO_MEMORY;
    snprintf(msg, sizeof(msg), "out of memory joining group '%s'", j->name);
    g->ranks[j->rank].issued = 0;
    spd_group_maybe_free(g);
  }
  if (rc < 0)
    spd_session_send_error(s, req, rc, msg);
}

int spd_group_add(spd_group *g, spd_session *s, int rank, uint64_t req) {
  spd_member *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return SPK_ENO_MEMORY;
  m->id = spd_next_id(g->ctx);
  m->group = g;
  m->rank = rank;
  TAILQ_INSERT_TAIL(&s->members, m, link);
  s->ngroups++;
  spd_rank_slot *slot = &g->ranks[rank];
  slot->session = s, slot->member = m, slot->join_req = req;
  slot->node = g->ctx->cfg.node_index;
  g->joined++;
  g->nlocal++;
  spd_group_peer_joined(g, rank, s->uid);
  SPD_DEBUG(&g->ctx->log, "client %llu joined '%s' as rank %d (%d/%d)",
            (unsigned long long)s->id, g->name, rank, g->joined, g->world);
  /* After ready, any departure breaks the group and joins are refused, so
   * a full house can only happen once. */
  if (g->joined == g->world)
    spd_group_announce_ready(g);
  return SPK_OK;
}

/* The collectives not yet running fail (point-to-point is the caller's). */
static void fail_pending_ops(spd_group *g, int status, const char *msg) {
  /* Fast-path ops fail with the same error (issue 18). */
  if (g->broken)
    spd_engines_group_break(&g->shared, g->broken_status, g->broken_reason);
  else if (status == SPK_ESHUTDOWN)
    spd_engines_group_break(&g->shared, status, msg);
  spd_op *op = TAILQ_FIRST(&g->ops), *next;
  for (; op != NULL; op = next) {
    next = TAILQ_NEXT(op, link);
    if (op->running)
      continue;
    spd_group_peer_op_failed(g, op, status, msg);
    spd_op_fail(op, status, msg);
  }
}

void spd_group_fail_pending(spd_group *g, int status, const char *msg) {
  fail_pending_ops(g, status, msg);
  spd_p2p_fail_pending(g, status, msg);
}

void spd_group_depart(spd_group *g, spd_member *m, int lost) {
  spd_rank_slot *slot = &g->ranks[m->rank];
  spd_session *s = slot->session;
  char msg[256];
  snprintf(msg, sizeof(msg), "rank %d of group '%s' %s (client %llu, pid %d, "
           "node %d)", m->rank, g->name,
           lost ? "was lost: its client disconnected" : "left the group",
           (unsigned long long)s->id, (int)s->pid, g->ctx->cfg.node_index);
  /* Upgrading, ranks leave for the new daemon (upgrade.c): what cannot
   * finish here fails as the daemon's going, not as a lost rank. */
  int status = g->ctx->upgrading ? SPK_ERESTARTED : SPK_EPEER_LOST;
  spd_group_break(g, status, msg);
  spd_group_peer_left(g, m->rank, lost, msg);
  /* Pending ops fail on every rank, the departing one included (a client
   * that merely left is still there to hear it; a lost one drops it);
   * point-to-point only where it involves the departing rank. */
  fail_pending_ops(g, status, msg);
  spd_p2p_fail_rank(g, m->rank, status, msg);
  /* An op already in the mover finishes for the others; the departing
   * rank is answered now, since its session may not outlive the op. */
  spd_op *op;
  TAILQ_FOREACH(op, &g->ops, link) {
    spd_op_rank *r = &op->ranks[m->rank];
    if (r->arrived && r->session != NULL && !lost)
      spd_session_send_error(r->session, r->req, SPK_EPEER_LOST,
                             "this rank left the group while the op was "
                             "running; its output is undefined");
    spd_op_forget_session(op, m->rank);
  }
  spd_p2p_forget_rank(g, m->rank, lost);
  s->ngroups--;
  slot->session = NULL;
  slot->member = NULL;
  g->joined--;
  if (--g->nlocal == 0 && (g->ready || g->broken))
    g->detached = 1;
  spd_ctx *ctx = g->ctx;
  if (g->split && !g->ready)
    spd_group_split_abandon(g, SPK_EPEER_LOST, msg); /* nobody can take
                                                     * its place */
  else
    spd_group_maybe_free(g);
  spd_up_drain_check(ctx);
}

void spd_group_kick(spd_group *g) {
  if (!g->ready)
    return; /* a remote rank's first op may come before its Join is done */
  /* An op that fails at start is freed at once, so look again. While ops
   * run, the next starts only queued behind them (op_engine.c). */
  for (;;) {
    spd_op *op = TAILQ_FIRST(&g->ops);
    while (op != NULL && op->running)
      op = TAILQ_NEXT(op, link);
    if (op == NULL || op->arrived < g->world ||
        (g->running > 0 && !spd_op_may_start_behind(op)))
      return;
    spd_op_start(op);
  }
}

void spd_group_maybe_free(spd_group *g) {
  if (g->joined > 0 || g->running || !TAILQ_EMPTY(&g->p2p_run))
    return;
  spd_group_fail_pending(g, SPK_EPEER_LOST, "every rank left the group");
  TAILQ_REMOVE(&g->ctx->groups, g, link);
  SPD_DEBUG(&g->ctx->log, "group '%s' freed", g->name);
  spd_engines_group_close(&g->shared);
  free(g->ranks);
  free(g);
}

void spd_group_fail_joins(spd_group *g, int status, const char *msg) {
  for (int r = 0; r < g->world; r++) {
    spd_rank_slot *slot = &g->ranks[r];
    spd_session *s = slot->session;
    if (s == NULL)
      continue;
    spd_session_send_error(s, slot->join_req, status, msg);
    TAILQ_REMOVE(&s->members, slot->member, link);
    s->ngroups--;
    free(slot->member);
    slot->session = NULL;
    slot->member = NULL;
    g->joined--;
    g->nlocal--;
    spd_group_peer_left(g, r, 1, msg);
  }
  spd_group_maybe_free(g);
}

void spd_group_expire(spd_group *g) {
  char missing[200] = "", msg[320];
  size_t used = 0;
  for (int r = 0; r < g->world && used + 12 < sizeof(missing); r++)
    if (!spd_group_has_rank(g, r))
      used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d",
                               used ? "," : "", r);
  double waited = (double)(spd_now_ns() - g->created_ns) / 1e9;
  snprintf(msg, sizeof(msg), "group '%s' was not complete after %.1f s "
           "(%s): rank(s) %s never joined", g->name, waited,
           g->join_by_ns ? "the wait a rejoin asked for" : "join_timeout",
           missing);
  SPD_WARN(&g->ctx->log, "%s", msg);
  spd_group_fail_joins(g, SPK_ETIMEDOUT, msg);
}
