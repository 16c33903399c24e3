/* A group's sequence of ops across a restart, of this node's daemon or of
 * another node's: each op counted as it is issued, and the ops other
 * ranks had issued when the daemon went failed without issuing them
 * (client_restart.c says how the ranks realign). The client reconnected
 * and the group rejoined first, through the revive and reform hooks. */
#include <stdio.h>

#include "client_internal.h"

int spc__again(spc_client *c, int *rc) {
  if (*rc != SPC_ERESTARTED || !c->lost || c->reviving)
    return 0;
  int r = c->revive(c);
  if (r < 0)
    *rc = r; /* why the client could not come back */
  return r == SPC_OK;
}

int spc__group_ready(spc_group *g) {
  spc_client *c = g->client;
  int rc;
  if (c->lost && (rc = c->revive(c)) < 0)
    return rc;
  if (g->reform && !g->lost && (rc = c->reform(g)) < 0)
    return rc;
  if (g->lost)
    return spc__fail(c, g->lost_status, "%s", g->why);
  return SPC_OK;
}

int spc__group_issue(spc_group *g) {
  spc_client *c = g->client;
  int rc = spc__group_ready(g);
  if (rc < 0)
    return rc;
  g->issued++;
  if (g->skip == 0)
    return SPC_OK;
  g->skip--;
  return spc__fail(c, SPC_ERESTARTED, "op %llu of group '%s' failed on "
                   "every rank: a daemon went away while some rank had "
                   "issued it", (unsigned long long)g->issued, g->name);
}
