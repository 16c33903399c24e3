/* Rejoining a group under its name and rank (client_restart.c says how
 * its ranks realign): after this node's daemon restarted (spc__revive
 * rejoins the groups of this node's ranks in one go), and when a node the
 * group spans restarted, which broke its record here with SPC_ERESTARTED
 * (client_conn.c marks it; its next call rejoins it, through the reform
 * hook, waiting for the ranks of that node to come back). */
#include <stdio.h>

#include "client_fast.h"

int64_t spc__reconnect_limit_ms(const spc_client *c) {
  return c->reconnect_ms >= 0 ? c->reconnect_ms : spc__op_limit_ms(c);
}

int spc__rejoin_send(spc_group *g, spc_request **req_p) {
  Spcoll__GroupJoin j = SPCOLL__GROUP_JOIN__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  j.name = g->name;
  j.world_size = g->world;
  j.rank = g->rank;
  j.op_timeout_ms = (uint64_t)g->client->op_timeout_ms;
  j.issued = g->issued;
  int64_t wait = spc__reconnect_limit_ms(g->client);
  j.wait_ms = wait > 0 ? (uint64_t)wait : 1;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_JOIN;
  f.group_join = &j;
  return spc__send(g->client, &f, -1, req_p);
}

int spc__rejoin_finish(spc_group *g, spc_request *req) {
  spc_client *c = g->client;
  Spcoll__Frame *reply;
  int rc = spc__finish(c, req, &reply);
  if (rc < 0)
    return rc;
  if (reply->body_case != SPCOLL__FRAME__BODY_GROUP_JOINED) {
    rc = spc__fail(c, SPC_EPROTOCOL, "spcolld answered a rejoin of group "
                   "'%s' with %s", g->name, spf_body_name(reply->body_case));
    spcoll__frame__free_unpacked(reply, NULL);
    return rc;
  }
  g->id = reply->group_joined->group_id;
  g->multinode = reply->group_joined->multinode;
  g->skip = reply->group_joined->skip;
  spcoll__frame__free_unpacked(reply, NULL);
  return spc__seg_claim(g);
}

/* The broken record left (its answer does not matter: the daemon may
 * have dropped it already); SPC_ERESTARTED when this daemon went too. */
static int leave_broken(spc_group *g) {
  Spcoll__GroupLeave l = SPCOLL__GROUP_LEAVE__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  l.group_id = g->id;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_LEAVE;
  f.group_leave = &l;
  int rc = spc__call(g->client, &f, -1, NULL);
  return rc == SPC_ERESTARTED && g->client->lost ? rc : SPC_OK;
}

/* One try at g's rejoin: SPC_OK, or SPC_ERESTARTED with c->lost when
 * this daemon went (a daemon being upgraded refuses the join as not run:
 * the connection then ends as if it had gone), or the rejoin's failure. */
static int reform_once(spc_group *g) {
  spc_client *c = g->client;
  spc_request *req = NULL;
  spc__fast_detach(g);
  int rc = g->reform == SPC__REFORM_LEAVE ? leave_broken(g) : SPC_OK;
  g->reform = SPC__REFORM_GONE;
  if (rc == SPC_OK && (rc = spc__rejoin_send(g, &req)) == SPC_OK)
    rc = spc__rejoin_finish(g, req);
  if (rc == SPC_OK)
    g->reform = 0;
  else if (rc == SPC_ERESTARTED && c->not_run && !c->lost)
    rc = spc__conn_gone(c, "refused a rejoin: it is being upgraded", 0);
  return rc;
}

/* g rejoined under its name, waiting for its other ranks (those of the
 * restarted node too) for the reconnect timeout. If they do not come,
 * g is lost, SPC_ENODELOST naming the first cause (which names the
 * node). If this daemon goes meanwhile, the client revives (which
 * rejoins the groups of this node alone, and leaves g to this). */
int spc__reform(spc_group *g) {
  spc_client *c = g->client;
  int rc = SPC_ERESTARTED;
  for (int tries = 0; tries < 3 && g->reform && rc == SPC_ERESTARTED;
       tries++) {
    if ((rc = reform_once(g)) == SPC_ERESTARTED && c->lost &&
        (rc = c->revive(c)) == SPC_OK)
      rc = SPC_ERESTARTED; /* revived: g's turn again */
  }
  if (rc == SPC_OK || !g->reform || (rc == SPC_ERESTARTED && c->lost))
    return g->reform ? rc : SPC_OK;
  g->reform = 0, g->lost = 1;
  g->lost_status = rc == SPC_ETIMEDOUT ? SPC_ENODELOST : rc;
  char first[sizeof(g->why)];
  snprintf(first, sizeof(first), "%s", g->why);
  snprintf(g->why, sizeof(g->why), "group '%s' did not form again after "
           "%s: %s", g->name, first, c->last_error);
  return spc__fail(c, g->lost_status, "%s", g->why);
}

