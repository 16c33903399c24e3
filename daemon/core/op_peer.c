/* Ops across nodes: each daemon sends every other node of the group its
 * local ranks' arguments (Args), so every node holds all of them and
 * builds the same plan. A rank's own error travels with its Args and
 * fails the op on every node at once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_engine.h"
#include "op.h"
#include "peer.h"

static void tensor_out(const spk_shape *sh, spk_dtype dt,
                       Spcoll__Peer__Tensor *t) {
  t->dtype = (uint32_t)dt;
  t->n_shape = (size_t)sh->ndim;
  t->shape = (int64_t *)sh->dim;
}

void spd_op_peer_send_args(spd_op *op, int rank) {
  spd_group *g = op->group;
  spd_op_rank *r = &op->ranks[rank];
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Args a = SPCOLL__PEER__ARGS__INIT;
  Spcoll__Peer__Tensor in = SPCOLL__PEER__TENSOR__INIT;
  Spcoll__Peer__Tensor out = SPCOLL__PEER__TENSOR__INIT;
  int32_t dims[4];
  a.rec = g->rec;
  a.seq = op->seq;
  a.rank = rank;
  a.status = r->status;
  a.error = r->status < 0 ? r->err.msg : "";
  a.op = (uint32_t)r->args.op;
  a.group_split = r->group_split != 0;
  a.scalar = r->args.scalar;
  a.flags = r->args.flags;
  for (int i = 0; i < r->args.ndims; i++)
    dims[i] = r->args.dims[i];
  a.n_dims = (size_t)r->args.ndims, a.dims = dims;
  a.n_sizes = (size_t)r->args.nsizes, a.sizes = r->sizes;
  a.n_sizes2 = (size_t)r->args.nsizes2, a.sizes2 = r->sizes2;
  tensor_out(&r->args.in, r->args.dtype, &in);
  tensor_out(&r->args.out, r->args.dtype, &out);
  a.input = &in, a.output = &out;
  m.body_case = SPCOLL__PEER__MSG__BODY_ARGS;
  m.args = &a;
  int nodes[SPD_MAX_NODES], n = spd_group_other_nodes(g, nodes);
  for (int i = 0; i < n; i++)
    spd_peer_send(g->ctx, nodes[i], &m);
}

static int shape_in(const Spcoll__Peer__Tensor *t, const char *what,
                    spk_shape *sh, spk_err *err) {
  if (t == NULL || t->n_shape < 1 || t->n_shape > SPK_MAX_DIMS)
    return spk_err_set(err, SPK_EPROTOCOL, "%s tensor with %zu dims", what,
                       t ? t->n_shape : 0);
  sh->ndim = (int)t->n_shape;
  memcpy(sh->dim, t->shape, t->n_shape * sizeof(int64_t));
  return SPK_OK;
}

/* Planner arguments from another node's Args; shapes are checked again by
 * the planner, as for a local rank. */
static int remote_fill(spd_op_rank *r, const Spcoll__Peer__Args *a,
                       spk_err *err) {
  r->group_split = a->group_split; /* its stats slot even when it failed */
  if (a->status < 0)
    return spk_err_set(err, a->status, "%s", a->error ? a->error : "");
  spk_op_args *x = &r->args;
  x->op = (spk_op_kind)a->op;
  x->scalar = a->scalar;
  x->flags = a->flags;
  if (a->n_dims > 4)
    return spk_err_set(err, SPK_EPROTOCOL, "Args with %zu dims", a->n_dims);
  x->ndims = (int)a->n_dims;
  for (size_t i = 0; i < a->n_dims; i++)
    x->dims[i] = a->dims[i];
  if (a->group_split)
    return SPK_OK; /* color and key, no tensors */
  int rc = spd_op_copy_list(a->sizes, a->n_sizes, &r->sizes, "sizes", err);
  if (rc == SPK_OK)
    rc = spd_op_copy_list(a->sizes2, a->n_sizes2, &r->sizes2, "sizes2", err);
  if (rc == SPK_OK)
    rc = shape_in(a->input, "input", &x->in, err);
  if (rc == SPK_OK)
    rc = shape_in(a->output, "output", &x->out, err);
  if (rc < 0)
    return rc;
  x->sizes = r->sizes, x->nsizes = (int)a->n_sizes;
  x->sizes2 = r->sizes2, x->nsizes2 = (int)a->n_sizes2;
  x->dtype = (spk_dtype)a->input->dtype;
  if (spk_dtype_size(x->dtype) == 0)
    return spk_err_set(err, SPK_EPROTOCOL, "Args with dtype %u",
                       a->input->dtype);
  return SPK_OK;
}

/* The oldest op some rank of g not on another node has not issued (its
 * lowest next_seq), into *base_p; 0 when every rank lives elsewhere. */
static int local_base(const spd_group *g, uint64_t *base_p) {
  int any = 0;
  uint64_t base = UINT64_MAX;
  for (int r = 0; r < g->world; r++)
    if (!g->ranks[r].remote && g->ranks[r].next_seq < base)
      base = g->ranks[r].next_seq, any = 1;
  *base_p = base;
  return any;
}

/* Whether node may make g hold op a->seq for rank a->rank: SPK_OK, or
 * SPK_EPROTOCOL with why. The rank must be one of node's; its ops come in
 * order (its node sends each rank's Args as the rank issues them, one
 * sequence number after the other, and control messages keep their order
 * per endpoint); and the op may be at most client_max_pending ahead of
 * the oldest op a rank of this node has not issued. That is as far ahead
 * as a rank can be: an op ends on its node only once every rank, this
 * node's too, issued it, and a client has at most client_max_pending ops
 * not ended. So no peer makes this node hold more ops than its own ranks
 * could, whatever sequence numbers it sends. */
static int args_check(const spd_group *g, int node,
                      const Spcoll__Peer__Args *a, char *why, size_t len) {
  if (a->rank < 0 || a->rank >= g->world || !g->ranks[a->rank].remote ||
      g->ranks[a->rank].node != node) {
    snprintf(why, len, "rank %d is not a rank of node %d", a->rank, node);
    return SPK_EPROTOCOL;
  }
  uint64_t next = g->ranks[a->rank].next_seq, base;
  if (a->seq != next) {
    snprintf(why, len, "out of order: the rank's next op is %llu",
             (unsigned long long)next);
    return SPK_EPROTOCOL;
  }
  if (!local_base(g, &base)) {
    snprintf(why, len, "no rank of the group lives on node %d",
             g->ctx->cfg.node_index);
    return SPK_EPROTOCOL;
  }
  uint64_t window = (uint64_t)g->ctx->cfg.client_max_pending;
  if (a->seq >= base && a->seq - base >= window) {
    snprintf(why, len, "%llu ops ahead of op %llu, the oldest one a rank of "
             "node %d has not issued; a rank may be at most %llu ahead "
             "(client_max_pending)", (unsigned long long)(a->seq - base),
             (unsigned long long)base, g->ctx->cfg.node_index,
             (unsigned long long)window);
    return SPK_EPROTOCOL;
  }
  return SPK_OK;
}

static void tell_failed(spd_group *g, uint64_t seq, int status,
                        const char *msg) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__OpFail f = SPCOLL__PEER__OP_FAIL__INIT;
  f.rec = g->rec;
  f.seq = seq;
  f.status = status;
  f.reason = (char *)msg;
  m.body_case = SPCOLL__PEER__MSG__BODY_OP_FAIL;
  m.op_fail = &f;
  int nodes[SPD_MAX_NODES], n = spd_group_other_nodes(g, nodes);
  for (int i = 0; i < n; i++)
    spd_peer_send(g->ctx, nodes[i], &m);
}

/* Node's Args a are refused (status, why): no op is made for them. Op
 * a->seq cannot complete here, nor can any later op of the rank (its
 * next Args are out of order now), so the other nodes hear that this
 * node fails a->seq (OpFail, as for any op that fails here: they fail it
 * and break the group), the group breaks here too, and its pending ops
 * that the rank has not issued fail at once rather than by their
 * timeout. */
static void args_refuse(spd_group *g, int node, const Spcoll__Peer__Args *a,
                        int status, const char *why) {
  spd_group_peer_refused(g->ctx, node, "op %llu of rank %d of group '%s': %s",
                         (unsigned long long)a->seq, a->rank, g->name, why);
  char msg[400];
  snprintf(msg, sizeof(msg), "node %d refused op %llu of rank %d from node "
           "%d: %s", g->ctx->cfg.node_index, (unsigned long long)a->seq,
           a->rank, node, why);
  tell_failed(g, a->seq, status, msg);
  spd_group_break(g, status, msg);
  int rank_ok = a->rank >= 0 && a->rank < g->world;
  spd_op *op = TAILQ_FIRST(&g->ops), *next;
  for (; op != NULL; op = next) {
    next = TAILQ_NEXT(op, link);
    if (!op->running &&
        (op->seq == a->seq || (rank_ok && !op->ranks[a->rank].arrived)))
      spd_op_fail(op, status, msg);
  }
  spd_group_kick(g);
}

void spd_op_peer_args(spd_group *g, int node, const Spcoll__Peer__Args *a) {
  char why[300];
  int status = args_check(g, node, a, why, sizeof(why));
  /* Charged like a local rank's request, to the group's owner: the uid
   * the peer speaks for in this group. */
  long long lists = a->group_split ? 0
                                   : (long long)(a->n_sizes + a->n_sizes2) *
                                         (long long)sizeof(int64_t);
  spd_op *op = NULL;
  if (status == SPK_OK &&
      (op = spd_op_get_charged(g, a->seq, a->rank, g->owner, lists, why,
                               sizeof(why))) == NULL)
    status = SPK_ENO_MEMORY;
  if (status < 0) {
    args_refuse(g, node, a, status, why);
    return;
  }
  g->ranks[a->rank].next_seq++;
  spd_op_rank *r = &op->ranks[a->rank];
  r->arrived = 1;
  r->remote = 1;
  r->node = node;
  r->arrived_ns = spd_now_ns();
  r->status = remote_fill(r, a, &r->err);
  spd_op_rank_arrived(op);
}

int spd_op_peer_fail(spd_group *g, int node, uint64_t seq, int status,
                     const char *msg) {
  spd_op *op;
  TAILQ_FOREACH(op, &g->ops, link)
    if (op->seq == seq)
      break;
  if (op == NULL)
    return 0;
  spd_group_break(g, status, msg);
  /* Not started here: the nodes that did start it would wait for this
   * node's streams, so they hear it will not run here either. */
  if (!op->running)
    spd_op_peer_tell_failed(op, status, msg);
  if (op->running)
    spd_engine_abort(op, status, msg, node);
  else
    spd_op_fail(op, status, msg);
  return 1;
}

/* A lost node posts nothing more: receives from it are cancelled (a
 * tagged receive waits on the worker, not on the dead endpoint, so it
 * would never end by itself). */
void spd_op_peer_node_lost(spd_group *g, int node, int status,
                           const char *msg) {
  spd_op *op;
  TAILQ_FOREACH(op, &g->ops, link)
    if (op->running)
      spd_engine_abort(op, status, msg, node);
}

void spd_op_peer_tell_failed(spd_op *op, int status, const char *msg) {
  tell_failed(op->group, op->seq, status, msg);
}
