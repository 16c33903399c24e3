/* Operator commands: abort a group, drain the daemon. Who may send them is
 * checked by the caller (spd_session_is_operator). */
#include <stdio.h>
#include <string.h>

#include "lifecycle.h"
#include "group.h"
#include "op_p2p.h"

/* An operator names a group as its owner would, "@UID/NAME", or by NAME
 * alone when one uid has a group of that name. */
static int abort_find(spd_ctx *ctx, const char *full, uid_t uid,
                      spd_group **g_p, spk_err *err) {
  uid_t owner;
  const char *name;
  int rc = spd_group_name_parse(full, uid, &owner, &name, err);
  if (rc < 0)
    return rc;
  spd_group *g = spd_group_find(ctx, owner, name), *other;
  if (g == NULL && full[0] != '@')
    TAILQ_FOREACH(other, &ctx->groups, link) {
      if (other->detached || strcmp(other->name, name) != 0)
        continue;
      if (g != NULL && g->owner != other->owner)
        return spk_err_set(err, SPK_EINVAL, "groups named '%s' belong to "
                           "uids %d and %d: name one as @UID/%s", name,
                           (int)g->owner, (int)other->owner, name);
      g = other;
    }
  if (g == NULL)
    return spk_err_set(err, SPK_ENOT_FOUND, "no group named '%s'", full);
  *g_p = g;
  return SPK_OK;
}

int spd_abort_group(spd_ctx *ctx, const char *full, uid_t uid, spk_err *err) {
  spd_group *g = NULL;
  int rc = abort_find(ctx, full, uid, &g, err);
  if (rc < 0)
    return rc;
  char reason[256];
  snprintf(reason, sizeof(reason), "group '%s' aborted by operator",
           g->name);
  SPD_WARN(&ctx->log, "group '%s' of uid %d aborted by operator (uid %d)",
           g->name, (int)g->owner, (int)uid);
  if (!g->ready) {
    /* Its joined ranks wait for the others: they hear it now. */
    spd_group_fail_joins(g, SPK_EABORTED, reason);
    return SPK_OK;
  }
  /* Broken with "aborted": pending ops fail now, later ones on arrival. */
  g->broken = 1;
  g->broken_status = SPK_EABORTED;
  snprintf(g->broken_reason, sizeof(g->broken_reason), "%s", reason);
  spd_group_fail_pending(g, SPK_EABORTED, g->broken_reason);
  return SPK_OK;
}

/* Any client of the stats socket may send refused commands as fast as it
 * likes: at most SPD_REFUSED_BURST are logged a window, the others
 * counted and told in one line when the window is over. */
static void refused_summary(spd_ctx *ctx, uint64_t n) {
  spd_log_limit_told(&ctx->log, n, "refused operator commands",
                     "control_refused");
}

void spd_control_refused(spd_ctx *ctx, int pid, uid_t uid, gid_t gid,
                         const char *command, const char *group) {
  uint64_t ended;
  ctx->stats.control_refused++;
  int log = spd_log_limit_take(&ctx->control_refused_log, spd_now_ns(),
                               SPD_REFUSED_BURST, SPD_REFUSED_WINDOW_NS,
                               &ended);
  refused_summary(ctx, ended);
  if (!log)
    return;
  char cmd[SPD_LOG_STR_SIZE], grp[SPD_LOG_STR_SIZE];
  SPD_WARN(&ctx->log, "operator command '%s' '%s' of pid %d uid %d (gid %d) "
           "refused: not an operator",
           spd_log_str(cmd, sizeof(cmd), command),
           spd_log_str(grp, sizeof(grp), group), pid, (int)uid, (int)gid);
}

void spd_control_tick(spd_ctx *ctx, uint64_t now) {
  refused_summary(ctx, spd_log_limit_end(&ctx->control_refused_log, now,
                                         SPD_REFUSED_WINDOW_NS));
}

#define DRAIN_QUIET_NS 100000000u /* 100 ms: the watchdog ticks every 250 */

void spd_drain(spd_ctx *ctx) {
  if (ctx->draining || ctx->stopping)
    return;
  ctx->draining = 1;
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    spd_engines_group_drain(&g->shared); /* the fast path's ops too */
  ctx->drain_started_ns = spd_now_ns();
  SPD_INFO(&ctx->log, "draining: no new groups or ops; exiting when the "
           "ops in flight are done, at most %lld s from now (drain_timeout)",
           ctx->cfg.drain_timeout);
  spd_drain_check(ctx);
}

void spd_drain_check(spd_ctx *ctx) {
  if (!ctx->draining || ctx->stopping)
    return;
  uint64_t limit = (uint64_t)ctx->cfg.drain_timeout * 1000000000u;
  if (spd_now_ns() - ctx->drain_started_ns > limit) {
    /* The stop fails what is still pending with "daemon shutting down". */
    SPD_WARN(&ctx->log, "drain deadline of %lld s passed with ops pending; "
             "stopping", ctx->cfg.drain_timeout);
    spd_shutdown(ctx);
    return;
  }
  spd_group *g;
  int segs = 0;
  TAILQ_FOREACH(g, &ctx->groups, link) {
    if (!TAILQ_EMPTY(&g->ops) || spd_p2p_busy(g) ||
        spd_engines_group_busy(&g->shared)) {
      ctx->drain_quiet_ns = 0;
      return; /* the watchdog's tick looks again */
    }
    segs |= spd_engines_group_shares(&g->shared);
  }
  /* A rank that read `closed` unset just before the drain set it may not
   * show its op in the segment yet (its stores are on their way): with
   * segments, the daemon goes when they stayed idle for DRAIN_QUIET_NS. */
  uint64_t now = spd_now_ns();
  if (segs && ctx->drain_quiet_ns == 0)
    ctx->drain_quiet_ns = now;
  if (segs && now - ctx->drain_quiet_ns < DRAIN_QUIET_NS)
    return;
  SPD_INFO(&ctx->log, "drained");
  spd_shutdown(ctx);
}
