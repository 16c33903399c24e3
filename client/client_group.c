/* Group membership: join (blocks until every rank joined) and leave. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_fast.h"
#include "client_gpu.h"
#include "tensor_check.h"

int spc_set_op_timeout(spc_client *c, int64_t timeout_ms) {
  if (c == NULL)
    return SPC_EINVAL;
  if (timeout_ms < 0)
    return spc__fail(c, SPC_EINVAL, "op timeout %lld ms is negative",
                     (long long)timeout_ms);
  c->op_timeout_ms = timeout_ms;
  return SPC_OK;
}

/* After a daemon restart the group is rejoined first (with every other
 * group of the client), so that its other ranks hear this one leave. */
static int leave_send(spc_group *g) {
  Spcoll__GroupLeave l = SPCOLL__GROUP_LEAVE__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  int rc;
  if (g->client->lost && (rc = g->client->revive(g->client)) < 0)
    return rc;
  if (g->lost || g->reform == SPC__REFORM_GONE)
    return SPC_OK; /* no daemon knows it any more */
  l.group_id = g->id;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_LEAVE;
  f.group_leave = &l;
  return spc__call(g->client, &f, -1, NULL);
}

int spc_group_join(spc_client *c, const char *name, int world_size, int rank,
                   spc_group **group_p) {
  if (c == NULL || group_p == NULL)
    return SPC_EINVAL;
  if (name == NULL)
    return spc__fail(c, SPC_EINVAL, "group name is NULL");
  spk_err err;
  if (spk_name_check(name, strlen(name), &err) < 0)
    return spc__fail(c, SPC_EINVAL, "%s", err.msg);
  spc__ring_make(c); /* where no op is on its way (client_ring.c) */
  spc_group *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return spc__fail(c, SPC_ENOMEM, "calloc of a group failed");
  Spcoll__GroupJoin j = SPCOLL__GROUP_JOIN__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  j.name = (char *)name;
  j.world_size = world_size;
  j.rank = rank;
  j.op_timeout_ms = (uint64_t)c->op_timeout_ms;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_JOIN;
  f.group_join = &j;
  Spcoll__Frame *reply;
  int rc = spc__call(c, &f, -1, &reply);
  if (spc__again(c, &rc))
    rc = spc__call(c, &f, -1, &reply);
  if (rc < 0) {
    free(g);
    return rc;
  }
  if (reply->body_case != SPCOLL__FRAME__BODY_GROUP_JOINED) {
    rc = spc__fail(c, SPC_EPROTOCOL, "spcolld answered group_join with %s",
                   spf_body_name(reply->body_case));
    spcoll__frame__free_unpacked(reply, NULL);
    free(g);
    return rc;
  }
  g->client = c;
  snprintf(g->name, sizeof(g->name), "%s", name);
  g->id = reply->group_joined->group_id;
  g->rank = rank;
  g->world = world_size;
  g->multinode = reply->group_joined->multinode;
  spcoll__frame__free_unpacked(reply, NULL);
  /* Issue 18: a group of this node's ranks comes with a shared segment.
   * A rank that cannot map it cannot take part: the join fails. */
  if ((rc = spc__seg_claim(g)) < 0) {
    char why[sizeof(c->last_error)];
    snprintf(why, sizeof(why), "%s", c->last_error);
    leave_send(g); /* the others hear this rank go */
    free(g);
    return spc__fail(c, rc, "%s", why);
  }
  g->next = c->groups;
  c->groups = g;
  *group_p = g;
  return SPC_OK;
}

static void group_unlink(spc_client *c, spc_group *g) {
  for (spc_group **p = &c->groups; *p != NULL; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      return;
    }
}

int spc_group_leave(spc_group *g) {
  if (g == NULL)
    return SPC_EINVAL;
  int rc = leave_send(g);
  spc__sym_group_gone(g->client, g);
  group_unlink(g->client, g);
  if (g->client->lost) /* nobody else tells the ranks still in an op */
    spc__fast_leave(g);
  spc__fast_detach(g);
  free(g);
  return rc;
}

int spc_group_rank(const spc_group *g) {
  return g ? g->rank : SPC_EINVAL;
}

int spc_group_spans_nodes(const spc_group *g) {
  return g != NULL && g->multinode;
}

int spc_group_size(const spc_group *g) {
  return g ? g->world : SPC_EINVAL;
}

int spc_group_split(spc_group *g, int color, int key, spc_group **sub_p) {
  if (g == NULL || sub_p == NULL)
    return SPC_EINVAL;
  spc_client *c = g->client;
  spc_group *sub = calloc(1, sizeof(*sub));
  if (sub == NULL)
    return spc__fail(c, SPC_ENOMEM, "calloc of a group failed");
  Spcoll__GroupSplit rq = SPCOLL__GROUP_SPLIT__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  rq.color = color;
  rq.key = key;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_SPLIT;
  f.group_split = &rq;
  Spcoll__Frame *reply;
  /* A split is one of the group's ops on the daemon path, in sequence with
   * them: the ranks that wait in the shared segment must hear it (issue
   * 18). It has no op kind and no tensors. */
  int rc = spc__group_issue(g);
  rq.group_id = g->id; /* after a rejoin (spc__group_issue), the new id */
  if (rc == SPC_OK && (rc = spc__fast_slow(g, NULL, NULL, NULL)) < 0 &&
      c->hangup)
    rc = spc__hangup_take(c);
  if (rc == SPC_OK)
    rc = spc__call(c, &f, -1, &reply);
  if (rc == SPC_OK && reply->body_case != SPCOLL__FRAME__BODY_GROUP_JOINED) {
    rc = spc__fail(c, SPC_EPROTOCOL, "spcolld answered group split with %s",
                   spf_body_name(reply->body_case));
    spcoll__frame__free_unpacked(reply, NULL);
  }
  if (rc < 0) {
    free(sub);
    return rc;
  }
  Spcoll__GroupJoined *j = reply->group_joined;
  if (j->group_id == 0) { /* color < 0: in no group */
    free(sub);
    sub = NULL;
  } else {
    sub->client = c;
    sub->id = j->group_id;
    sub->multinode = j->multinode;
    sub->multinode = j->multinode;
    sub->rank = j->rank;
    sub->world = j->world_size;
    sub->next = c->groups;
    c->groups = sub;
  }
  spcoll__frame__free_unpacked(reply, NULL);
  /* A sub-group of this node's ranks has its own shared segment; a rank
   * that cannot map it leaves (the others hear it) rather than take the
   * daemon's path alone. */
  if (sub != NULL && (rc = spc__seg_claim(sub)) < 0) {
    char why[sizeof(c->last_error)];
    snprintf(why, sizeof(why), "%s", c->last_error);
    leave_send(sub);
    group_unlink(c, sub);
    free(sub);
    return spc__fail(c, rc, "%s", why);
  }
  *sub_p = sub;
  return SPC_OK;
}
