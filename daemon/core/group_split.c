/* Group split by (color, key), as ncclCommSplit / MPI_Comm_split: ranks of
 * one color form a new group ordered by (key, parent rank). */
#include <stdio.h>
#include <stdlib.h>

#include "op.h"

typedef struct {
  int color, key, rank;
} split_entry;

static int entry_cmp(const void *a, const void *b) {
  const split_entry *x = a, *y = b;
  if (x->color != y->color)
    return x->color < y->color ? -1 : 1;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : (x->rank > y->rank);
}

static void reply_no_group(spd_op_rank *r) {
  Spcoll__GroupJoined joined = SPCOLL__GROUP_JOINED__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.id = r->req;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_JOINED;
  f.group_joined = &joined;
  spd_session_send(r->session, &f);
}

/* Create the group of entries e[0..n) (one color) and add its members;
 * the group announces itself ready once the last one is in. */
static int split_make(spd_op *op, const split_entry *e, int n, uint64_t tag) {
  spd_group *parent = op->group;
  char name[128];
  snprintf(name, sizeof(name), "%.80s/split%llu/%d", parent->name,
           (unsigned long long)tag, e[0].color);
  spd_group *g = spd_group_create(parent->ctx, name, n, parent->owner);
  if (g == NULL)
    return SPK_ENO_MEMORY;
  g->op_timeout_ns = parent->op_timeout_ns;
  for (int i = 0; i < n; i++) {
    spd_op_rank *r = &op->ranks[e[i].rank];
    if (spd_group_add(g, r->session, i, r->req) < 0)
      return SPK_ENO_MEMORY;
  }
  return SPK_OK;
}

/* A split makes each rank with a color a member of one more group: it
 * counts against client_max_groups like a join, checked for every rank
 * before any group is made so the split happens on all ranks or none. */
static int split_check_limits(spd_op *op, char *msg, size_t len) {
  const spd_config *cfg = &op->group->ctx->cfg;
  for (int i = 0; i < op->group->world; i++) {
    const spd_op_rank *r = &op->ranks[i];
    if (r->session == NULL) {
      snprintf(msg, len, "rank %d left during group split", i);
      return SPK_EPEER_LOST;
    }
    if (r->args.dims[0] >= 0 &&
        r->session->ngroups >= cfg->client_max_groups) {
      snprintf(msg, len, "group split: rank %d (pid %d) is in %d groups, "
               "the client limit (client_max_groups)", i,
               (int)r->session->pid, r->session->ngroups);
      return SPK_ENO_MEMORY;
    }
  }
  return SPK_OK;
}

void spd_group_split_run(spd_op *op) {
  int world = op->group->world;
  char msg[200];
  int rc = split_check_limits(op, msg, sizeof(msg));
  if (rc < 0) {
    spd_op_fail(op, rc, msg);
    return;
  }
  split_entry *e = malloc((size_t)world * sizeof(*e));
  if (e == NULL) {
    spd_op_fail(op, SPK_ENO_MEMORY, "out of memory for group split");
    return;
  }
  for (int i = 0; i < world; i++)
    e[i] = (split_entry){op->ranks[i].args.dims[0], op->ranks[i].args.dims[1],
                         i};
  qsort(e, (size_t)world, sizeof(*e), entry_cmp);
  uint64_t tag = spd_next_id(op->group->ctx);
  for (int i = 0, j; i < world && rc == SPK_OK; i = j) {
    for (j = i; j < world && e[j].color == e[i].color; j++)
      ;
    if (e[i].color < 0)
      for (int k = i; k < j; k++)
        reply_no_group(&op->ranks[e[k].rank]);
    else
      rc = split_make(op, e + i, j - i, tag);
  }
  free(e);
  if (rc < 0)
    SPD_ERROR(&op->group->ctx->log, "group split of '%s': out of memory",
              op->group->name);
  spd_ctx *ctx = op->group->ctx;
  uint64_t ns = spd_now_ns() - op->started_ns;
  ctx->stats.ops_completed++;
  spd_op_stats_done(&ctx->op_stats[SPD_OP_SLOT_GROUP_SPLIT], 0, ns);
  spd_op_stats_done(&op->group->op_stats[SPD_OP_SLOT_GROUP_SPLIT], 0, ns);
  spd_op_free(op);
}
