/* A group's sequence of ops across a daemon restart: each op counted as
 * it is issued, the ones other ranks had issued when the daemon went
 * failed without issuing them (client_restart.c says how the ranks
 * realign); the client reconnected first, through its revive hook. */
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

int spc__group_issue(spc_group *g) {
  spc_client *c = g->client;
  int rc;
  if (c->lost && (rc = c->revive(c)) < 0)
    return rc;
  if (g->lost)
    return spc__fail(c, SPC_ERESTARTED, "group '%s' cannot be rejoined "
                     "after a daemon restart (%s): leave it and make it "
                     "again", g->name[0] ? g->name : "(split)",
                     g->multinode ? "it spans nodes" : "made by "
                     "spc_group_split");
  g->issued++;
  if (g->skip == 0)
    return SPC_OK;
  g->skip--;
  return spc__fail(c, SPC_ERESTARTED, "op %llu of group '%s' failed on "
                   "every rank: spcolld went away while some rank had "
                   "issued it", (unsigned long long)g->issued, g->name);
}
