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
  spd_group *g = spd_group_create(parent->ctx, name, n);
  if (g == NULL)
    return SPK_ENO_MEMORY;
  g->owner = parent->owner;
  for (int i = 0; i < n; i++) {
    spd_op_rank *r = &op->ranks[e[i].rank];
    if (spd_group_add(g, r->session, i, r->req) < 0)
      return SPK_ENO_MEMORY;
  }
  return SPK_OK;
}

void spd_group_split_run(spd_op *op) {
  int world = op->group->world;
  for (int i = 0; i < world; i++)
    if (op->ranks[i].session == NULL) {
      spd_op_fail(op, SPK_EPEER_LOST, "a rank left during group split");
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
  int rc = SPK_OK;
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
