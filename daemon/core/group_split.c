/* Group split by (color, key), as ncclCommSplit / MPI_Comm_split: ranks of
 * one color form a new group ordered by (key, parent rank); a negative
 * color is in no group.
 *
 * Across nodes every daemon of the parent holds every rank's color and key
 * (they travel in the ranks' Args like an op's arguments), so each derives
 * the same sub-groups and makes those that hold a rank of its own. One of
 * this node's ranks only is a local group: no peers, so the shared-memory
 * fast path and the GPU engines may take it. One across nodes is joined
 * through the peers as a group joined across nodes is, under the same name
 * on every node ("<parent>/split<seq>/<color>": the parent's name and the
 * split's sequence number are the same everywhere); its ranks get the
 * split's answer once every node's ranks have joined it. Until then the
 * record knows which node each missing rank must come from, so a node lost
 * or a member gone fails the split on every rank instead of leaving the
 * others waiting for the join deadline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

typedef struct {
  int color, key, rank, node;
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

/* A rank's request holds a place in its client's client_max_groups from
 * arrival (reserve, below) so every node knows, from the Args, that
 * the split fits on every rank before any sub-group is made; the place
 * turns into the membership here. */
static void reserve(spd_op_rank *r, int rank, spd_session *s, int color) {
  if (color < 0)
    return;
  if (s->ngroups >= s->ctx->cfg.client_max_groups) {
    r->status = spk_err_set(&r->err, SPK_ENO_MEMORY, "group split: rank %d "
                            "(pid %d) is in %d groups, the client limit "
                            "(client_max_groups)", rank, (int)s->pid,
                            s->ngroups);
    return;
  }
  s->ngroups++;
  r->group_reserved = 1;
}

void spd_group_split_arrive(spd_group *g, int rank, spd_session *s,
                            uint64_t req, const Spcoll__GroupSplit *gs) {
  spd_op *op = spd_op_take(g, rank, s, req, 0);
  if (op == NULL)
    return;
  spd_op_rank *r = &op->ranks[rank];
  r->group_split = 1;
  r->args.ndims = 2;
  r->args.dims[0] = gs->color;
  r->args.dims[1] = gs->key;
  reserve(r, rank, s, gs->color);
  spd_op_rank_in(op, rank);
}

/* The record that this node's ranks of sub-group `name` join: for one
 * across nodes, the one another node's Join made before this node ran the
 * split (still gathering ranks, same owner and size), else a new one. */
static spd_group *split_record(spd_group *parent, const char *name, int n,
                               int spans) {
  spd_group *g;
  if (spans)
    TAILQ_FOREACH(g, &parent->ctx->groups, link)
      if (!g->ready && !g->broken && !g->detached && !g->split &&
          g->nlocal == 0 && g->owner == parent->owner && g->world == n &&
          strcmp(g->name, name) == 0)
        return g;
  return spd_group_create(parent->ctx, name, n, parent->owner);
}

/* Make (or complete) the sub-group of entries e[0..n) (one color) and add
 * this node's members; the group announces itself ready once its last
 * rank is in, here or on another node. */
static int split_make(spd_op *op, const split_entry *e, int n, int self) {
  spd_group *parent = op->group;
  int spans = 0;
  for (int i = 0; i < n; i++)
    spans |= e[i].node != e[0].node;
  char name[128];
  snprintf(name, sizeof(name), "%.80s/split%llu/%d", parent->name,
           (unsigned long long)op->seq, e[0].color);
  spd_group *g = split_record(parent, name, n, spans);
  if (g == NULL)
    return SPK_ENO_MEMORY;
  g->split = 1;
  g->split_parent = parent->rec;
  g->split_seq = op->seq;
  g->op_timeout_ns = parent->op_timeout_ns;
  for (int i = 0; i < n; i++)
    if (!spd_group_has_rank(g, i))
      g->ranks[i].node = e[i].node; /* where its join must come from */
  for (int i = 0; i < n; i++) {
    if (e[i].node != self)
      continue;
    spd_op_rank *r = &op->ranks[e[i].rank];
    if (spd_group_add(g, r->session, i, r->req) < 0)
      return SPK_ENO_MEMORY; /* still reserved: split_undo answers it */
    spd_op_rank_unreserve(r);
  }
  /* A rank of another node that left the parent before its join came
   * here never joins: its node's Join would have come before its Leave. */
  for (int i = 0; i < n && !g->ready; i++)
    if (!spd_group_has_rank(g, i) && !spd_group_has_rank(parent, e[i].rank)) {
      char msg[200];
      snprintf(msg, sizeof(msg), "rank %d of group '%s' left during group "
               "split", e[i].rank, parent->name);
      spd_group_split_abandon(g, SPK_EPEER_LOST, msg); /* may free g */
      break;
    }
  return SPK_OK;
}

/* This node's ranks are all still here (a client that went away failed
 * the op before it could run, but a split must never add a rank without a
 * session). */
static int split_check(spd_op *op, int self, const split_entry *e, char *msg,
                       size_t len) {
  for (int i = 0; i < op->group->world; i++)
    if (e[i].node == self && op->ranks[e[i].rank].session == NULL) {
      snprintf(msg, len, "rank %d left during group split", e[i].rank);
      return SPK_EPEER_LOST;
    }
  return SPK_OK;
}

/* Sorted (color, key, rank) entries of op's ranks with the node of each,
 * or NULL when out of memory. */
static split_entry *split_entries(spd_op *op, int self) {
  int world = op->group->world;
  split_entry *e = malloc((size_t)world * sizeof(*e));
  if (e == NULL)
    return NULL;
  for (int i = 0; i < world; i++) {
    const spd_op_rank *r = &op->ranks[i];
    e[i] = (split_entry){r->args.dims[0], r->args.dims[1], i,
                         r->remote ? r->node : self};
  }
  qsort(e, (size_t)world, sizeof(*e), entry_cmp);
  return e;
}

/* Making the sub-groups failed here (out of memory): the sub-groups of
 * this split not yet complete fail on this node (their other nodes hear
 * the ranks leave), the other nodes hear the split failed, and this
 * node's ranks not yet answered get the error. A local sub-group already
 * complete stays: its ranks had their answer. */
static void split_undo(spd_op *op, const split_entry *e, int self,
                       const char *msg) {
  spd_group *parent = op->group;
  spd_group_split_failed(parent, op->seq, SPK_ENO_MEMORY, msg);
  if (parent->multinode)
    spd_op_peer_tell_failed(op, SPK_ENO_MEMORY, msg);
  for (int i = 0; i < parent->world; i++) {
    spd_op_rank *r = &op->ranks[e[i].rank];
    if (e[i].node == self && r->session != NULL &&
        (e[i].color < 0 || r->group_reserved))
      spd_session_send_error(r->session, r->req, SPK_ENO_MEMORY, msg);
  }
}

static void split_done(spd_op *op, int failed) {
  spd_ctx *ctx = op->group->ctx;
  int slot = SPD_OP_SLOT_GROUP_SPLIT;
  if (failed) {
    ctx->stats.ops_failed++;
    spd_op_stats_failed(&ctx->op_stats[slot]);
    spd_op_stats_failed(&op->group->op_stats[slot]);
  } else {
    uint64_t ns = spd_now_ns() - op->started_ns;
    ctx->stats.ops_completed++;
    spd_op_stats_done(&ctx->op_stats[slot], 0, ns);
    spd_op_stats_done(&op->group->op_stats[slot], 0, ns);
  }
  spd_op_free(op);
}

void spd_group_split_run(spd_op *op) {
  spd_group *parent = op->group;
  int world = parent->world, self = parent->ctx->cfg.node_index;
  char msg[200];
  split_entry *e = split_entries(op, self);
  if (e == NULL) {
    spd_op_fail(op, SPK_ENO_MEMORY, "out of memory for group split");
    return;
  }
  int rc = split_check(op, self, e, msg, sizeof(msg));
  if (rc < 0) {
    free(e);
    spd_op_fail(op, rc, msg);
    return;
  }
  /* Sub-groups first, "no group" answers last: a failure part way leaves
   * no rank told it is in no group while the others are told the split
   * failed. */
  for (int i = 0, j; i < world && rc == SPK_OK; i = j) {
    int here = 0;
    for (j = i; j < world && e[j].color == e[i].color; j++)
      here |= e[j].node == self;
    if (e[i].color >= 0 && here)
      rc = split_make(op, e + i, j - i, self);
  }
  if (rc < 0) {
    snprintf(msg, sizeof(msg), "group split of '%s': out of memory",
             parent->name);
    SPD_ERROR(&parent->ctx->log, "%s", msg);
    split_undo(op, e, self, msg);
  } else {
    for (int i = 0; i < world && e[i].color < 0; i++)
      if (e[i].node == self)
        reply_no_group(&op->ranks[e[i].rank]);
  }
  free(e);
  split_done(op, rc < 0);
}

int spd_group_split_awaits(const spd_group *g, int node) {
  if (!g->split || g->ready)
    return 0;
  for (int r = 0; r < g->world; r++)
    if (g->ranks[r].session == NULL && g->ranks[r].node == node)
      return 1;
  return 0;
}

void spd_group_split_abandon(spd_group *g, int status, const char *msg) {
  if (!g->detached)
    SPD_WARN(&g->ctx->log, "group split into '%s' failed: %s", g->name, msg);
  /* Nothing joins it again here; it is kept only until the ranks other
   * nodes had joined to it have left. */
  g->detached = 1;
  spd_group_fail_joins(g, status, msg); /* may free g */
}

void spd_group_split_failed(spd_group *parent, uint64_t seq, int status,
                            const char *msg) {
  spd_group *g = TAILQ_FIRST(&parent->ctx->groups), *next;
  for (; g != NULL; g = next) {
    next = TAILQ_NEXT(g, link);
    if (g->split && !g->ready && g->split_parent == parent->rec &&
        g->split_seq == seq)
      spd_group_split_abandon(g, status, msg);
  }
}
