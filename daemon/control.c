/* Operator commands: abort a group, drain the daemon. */
#include <string.h>

#include "group.h"

int spd_abort_group(spd_ctx *ctx, const char *name, uid_t uid, spk_err *err) {
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    if (strcmp(g->name, name) == 0)
      break;
  if (g == NULL)
    return spk_err_set(err, SPK_ENOT_FOUND, "no group named '%s'", name);
  if (!spd_group_may_use(ctx, g, uid))
    return spk_err_set(err, SPK_EPERM, "group '%s' belongs to uid %d; uid %d "
                       "may not abort it", name, (int)g->owner, (int)uid);
  /* Broken with "aborted": pending ops fail now, later ones on arrival. */
  g->broken = 1;
  g->broken_status = SPK_EABORTED;
  snprintf(g->broken_reason, sizeof(g->broken_reason),
           "group '%s' aborted by operator", g->name);
  SPD_WARN(&ctx->log, "group '%s' aborted by operator", g->name);
  spd_group_fail_pending(g, SPK_EABORTED, g->broken_reason);
  return SPK_OK;
}

void spd_drain(spd_ctx *ctx) {
  if (ctx->draining || ctx->stopping)
    return;
  ctx->draining = 1;
  SPD_INFO(&ctx->log, "draining: no new groups or ops; exiting when the "
           "ops in flight are done");
  spd_drain_check(ctx);
}

void spd_drain_check(spd_ctx *ctx) {
  if (!ctx->draining || ctx->stopping)
    return;
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    if (!TAILQ_EMPTY(&g->ops))
      return;
  SPD_INFO(&ctx->log, "drained");
  spd_shutdown(ctx);
}
