/* A group's own record, below the op layer that marks it (tests/layers.py
 * rule 11): an op that fails breaks its group here, and the group layer
 * acts on the mark (pending ops fail, joins are refused). Loop thread
 * only. */
#include <stdio.h>

#include "group.h"

void spd_group_break(spd_group *g, int status, const char *reason) {
  if (!g->ready || g->broken)
    return;
  g->broken = 1;
  g->broken_status = status;
  snprintf(g->broken_reason, sizeof(g->broken_reason), "%s", reason);
  SPD_WARN(&g->ctx->log, "group '%s' broken: %s", g->name, reason);
}
