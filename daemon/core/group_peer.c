/* Group membership across nodes: every daemon tells every other which
 * ranks joined and left locally; each keeps its own record of the group,
 * ready once every rank joined on some node. Records are matched by name
 * only at Join; after that each side names a group by the other's record
 * id, so a name reused for a new group never mixes with the old one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "op.h"
#include "op_p2p.h"
#include "peer.h"
#include "tensor_check.h"

static void send_all(spd_ctx *ctx, const Spcoll__Peer__Msg *m) {
  for (int n = 0; n < spd_peer_count(ctx); n++)
    if (n != spd_peer_self(ctx))
      spd_peer_send(ctx, n, m);
}

static void send_join(spd_group *g, int rank, uid_t uid, int node) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Join j = SPCOLL__PEER__JOIN__INIT;
  j.name = g->name;
  j.world = g->world;
  j.rank = rank;
  j.rec = g->rec;
  j.uid = (uint32_t)uid;
  j.owner = (uint32_t)g->owner;
  j.issued = g->ranks[rank].issued;
  m.body_case = SPCOLL__PEER__MSG__BODY_JOIN;
  m.join = &j;
  if (node < 0)
    send_all(g->ctx, &m);
  else
    spd_peer_send(g->ctx, node, &m);
}

void spd_group_peer_joined(spd_group *g, int rank, uid_t uid) {
  if (spd_peers_enabled(g->ctx))
    send_join(g, rank, uid, -1);
}

void spd_group_peer_left(spd_group *g, int rank, int lost, const char *why) {
  if (!spd_peers_enabled(g->ctx))
    return;
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Leave l = SPCOLL__PEER__LEAVE__INIT;
  l.rec = g->rec;
  l.rank = rank;
  l.lost = lost;
  l.reason = (char *)why;
  if (g->broken) {
    l.broken_status = g->broken_status;
    l.broken_reason = g->broken_reason;
  }
  m.body_case = SPCOLL__PEER__MSG__BODY_LEAVE;
  m.leave = &l;
  send_all(g->ctx, &m);
}

void spd_group_peer_op_failed(spd_group *g, spd_op *op, int status,
                              const char *msg) {
  if (g->multinode && spd_peers_enabled(g->ctx))
    spd_op_peer_tell_failed(op, status, msg);
}

int spd_group_other_nodes(const spd_group *g, int *nodes) {
  int n = 0;
  uint64_t seen = 0;
  for (int r = 0; r < g->world; r++) {
    const spd_rank_slot *s = &g->ranks[r];
    if (s->remote && !(seen & (1ull << s->node))) {
      seen |= 1ull << s->node;
      nodes[n++] = s->node;
    }
  }
  return n;
}

/* Refused peer messages are logged at most SPD_REFUSED_BURST times a
 * window: a peer may send them as fast as it likes. */
static void refused_summary(spd_ctx *ctx, uint64_t n) {
  spd_log_limit_told(&ctx->log, n, "refused peer messages", "peer_refused");
}

void spd_group_peer_refused(spd_ctx *ctx, int node, const char *fmt, ...) {
  char prefix[48];
  snprintf(prefix, sizeof(prefix), "message of node %d refused", node);
  va_list ap;
  va_start(ap, fmt);
  spd_log_refusal(&ctx->log, &ctx->peer_refused_log, spd_now_ns(),
                  &ctx->stats.peer_refused, "refused peer messages",
                  "peer_refused", prefix, fmt, ap);
  va_end(ap);
}

void spd_group_peer_refused_tick(spd_ctx *ctx, uint64_t now) {
  refused_summary(ctx, spd_log_limit_end(&ctx->peer_refused_log, now,
                                         SPD_REFUSED_WINDOW_NS));
}

spd_group *spd_group_by_peer_rec(spd_ctx *ctx, int node, uint64_t rec) {
  spd_group *g;
  /* 0 is no record: peer_rec[node] is 0 in every group node has not
   * joined, so it names none of them. */
  if (rec == 0)
    return NULL;
  TAILQ_FOREACH(g, &ctx->groups, link)
    if (g->peer_rec[node] == rec)
      return g;
  return NULL;
}

/* The name is the peer's, refused perhaps for its bytes: logged escaped. */
static void send_reject(spd_ctx *ctx, int node, const Spcoll__Peer__Join *j,
                        int status, const char *why) {
  char name[SPD_LOG_STR_SIZE];
  SPD_WARN(&ctx->log, "join of rank %d of group '%s' from node %d refused: %s",
           j->rank, spd_log_str(name, sizeof(name), j->name), node, why);
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Reject r = SPCOLL__PEER__REJECT__INIT;
  r.rec = j->rec;
  r.rank = j->rank;
  r.status = status;
  r.reason = (char *)why;
  m.body_case = SPCOLL__PEER__MSG__BODY_REJECT;
  m.reject = &r;
  spd_peer_send(ctx, node, &m);
}

static int node_has_ranks(const spd_group *g, int node) {
  for (int r = 0; r < g->world; r++)
    if (g->ranks[r].remote && g->ranks[r].node == node)
      return 1;
  return 0;
}

/* A record still gathering ranks that node's record rec may join: the
 * same one it joined before, or one where node has no rank yet. */
static spd_group *joinable(spd_ctx *ctx, int node,
                           const Spcoll__Peer__Join *j) {
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link) {
    if (g->detached || g->ready || g->broken || g->owner != j->owner ||
        strcmp(g->name, j->name) != 0)
      continue;
    if (g->peer_rec[node] == 0 || g->peer_rec[node] == j->rec ||
        !node_has_ranks(g, node))
      return g;
  }
  return NULL;
}

static int join_valid(const spd_ctx *ctx, const Spcoll__Peer__Join *j,
                      char *why, size_t len) {
  spk_err err;
  if (j->name == NULL ||
      spk_name_check(j->name, strlen(j->name), &err) < 0)
    snprintf(why, len, "bad group name: %s",
             j->name == NULL ? "none" : err.msg);
  else if (j->world < 1 || j->world > ctx->cfg.max_world)
    snprintf(why, len, "world size %d outside 1..%d (max_world here)",
             j->world, ctx->cfg.max_world);
  else if (j->rank < 0 || j->rank >= j->world)
    snprintf(why, len, "rank %d outside 0..%d", j->rank, j->world - 1);
  else
    return SPK_OK;
  return SPK_EINVAL;
}

static void remote_join(spd_ctx *ctx, int node, const Spcoll__Peer__Join *j) {
  char why[256];
  if (join_valid(ctx, j, why, sizeof(why)) < 0) {
    send_reject(ctx, node, j, SPK_EINVAL, why);
    return;
  }
  spd_group *g = joinable(ctx, node, j);
  if (g == NULL) {
    g = spd_group_create(ctx, j->name, j->world, (uid_t)j->owner);
    if (g == NULL) {
      send_reject(ctx, node, j, SPK_ENO_MEMORY, "out of memory for a group");
      return;
    }
  }
  int status = SPK_OK;
  if (g->world != j->world)
    status = SPK_ECONFLICT, snprintf(why, sizeof(why), "group '%s' has world "
                                     "size %d on node %d, not %d", g->name,
                                     g->world, spd_peer_self(ctx), j->world);
  else if (!spd_group_may_use(ctx, g, j->uid))
    status = SPK_EPERM, snprintf(why, sizeof(why), "group '%s' belongs to uid "
                                 "%d; uid %u may not join it", g->name,
                                 (int)g->owner, j->uid);
  else if (spd_group_has_rank(g, j->rank))
    status = SPK_ECONFLICT, snprintf(why, sizeof(why), "rank %d of group '%s' "
                                     "is already joined on node %d", j->rank,
                                     g->name, g->ranks[j->rank].node);
  if (status < 0) {
    send_reject(ctx, node, j, status, why);
    spd_group_maybe_free(g);
    return;
  }
  spd_rank_slot *slot = &g->ranks[j->rank];
  slot->remote = 1, slot->node = node;
  slot->issued = j->issued;
  g->peer_rec[node] = j->rec;
  g->multinode = 1;
  g->joined++;
  SPD_DEBUG(&ctx->log, "rank %d of '%s' joined on node %d (%d/%d)", j->rank,
            g->name, node, g->joined, g->world);
  if (g->joined == g->world)
    spd_group_announce_ready(g);
}

/* Our Join was refused there: the local rank's join fails with its reason
 * and the rank leaves (telling the others). */
static void remote_reject(spd_ctx *ctx, int node,
                          const Spcoll__Peer__Reject *r) {
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    if (g->rec == r->rec)
      break;
  if (g == NULL || r->rank < 0 || r->rank >= g->world || g->ready)
    return;
  spd_rank_slot *slot = &g->ranks[r->rank];
  if (slot->session == NULL)
    return;
  char msg[320];
  snprintf(msg, sizeof(msg), "node %d refused the join: %s", node,
           r->reason ? r->reason : "");
  spd_session_send_error(slot->session, slot->join_req,
                         spk_error_or(r->status, SPK_ECONFLICT), msg);
  spd_member *m = slot->member;
  spd_session *s = slot->session;
  TAILQ_REMOVE(&s->members, m, link);
  spd_group_depart(g, m, 1);
  free(m);
}

static void remote_leave(spd_ctx *ctx, int node, const Spcoll__Peer__Leave *l) {
  spd_group *g = spd_group_by_peer_rec(ctx, node, l->rec);
  if (g == NULL || l->rank < 0 || l->rank >= g->world)
    return;
  spd_rank_slot *slot = &g->ranks[l->rank];
  if (!slot->remote || slot->node != node)
    return;
  slot->remote = 0;
  g->joined--;
  char msg[400];
  int status = SPK_EPEER_LOST;
  if (l->broken_status < 0 && l->broken_reason && l->broken_reason[0]) {
    /* the cause, as that node saw it */
    status = spk_error_or(l->broken_status, SPK_EPEER_LOST);
    snprintf(msg, sizeof(msg), "node %d: %s", node, l->broken_reason);
  } else {
    snprintf(msg, sizeof(msg), "%s", l->reason && l->reason[0] ? l->reason
                                                               : "a rank left");
  }
  spd_group_break(g, status, msg);
  /* Unmatched point-to-point halves of or for the rank fail, as when a
   * rank of this node leaves (pairs already running end on their own). */
  spd_p2p_fail_rank(g, l->rank, g->broken ? g->broken_status : status,
                    g->broken ? g->broken_reason : msg);
  /* Its node finished its part of every op the rank had issued (that is
   * when its client may leave): those go on here; the others fail, with
   * the group's first cause. */
  spd_op *op = TAILQ_FIRST(&g->ops), *next;
  for (; op != NULL; op = next) {
    next = TAILQ_NEXT(op, link);
    if (!op->running && !op->ranks[l->rank].arrived)
      spd_op_fail(op, g->broken ? g->broken_status : status,
                  g->broken ? g->broken_reason : msg);
  }
  spd_group_kick(g);
  if (g->split && !g->ready)
    spd_group_split_abandon(g, SPK_EPEER_LOST, msg); /* nobody can take
                                                     * its place */
  else
    spd_group_maybe_free(g);
}

/* 1 when every rank of this node is past op seq (it ran here). */
static int done_here(const spd_group *g, uint64_t seq) {
  int local = 0;
  for (int r = 0; r < g->world; r++) {
    if (g->ranks[r].session == NULL)
      continue;
    local++;
    if (g->ranks[r].next_seq <= seq)
      return 0;
  }
  return local > 0;
}

/* Node failed op seq of g. Here: it fails here too (op_peer.c). Not here
 * yet (no rank of this node reached it): g breaks, so its ranks are
 * refused when they do and this node never starts an op that node will
 * post no stream of. Done here: only a group split can have left
 * something waiting (sub-groups for that node's ranks), and a failed
 * split leaves its parent usable. */
static void op_failed_there(spd_group *g, int node,
                            const Spcoll__Peer__OpFail *f) {
  char msg[320];
  snprintf(msg, sizeof(msg), "node %d: %s", node, f->reason ? f->reason : "");
  int status = spk_error_or(f->status, SPK_ENODE_LOST);
  if (spd_op_peer_fail(g, node, f->seq, status, msg))
    return;
  int done = done_here(g, f->seq);
  spd_group_split_failed(g, f->seq, status, msg);
  if (!done)
    spd_group_break(g, status, msg);
}

static void on_msg(spd_ctx *ctx, int node, const Spcoll__Peer__Msg *m) {
  spd_group *g;
  switch (m->body_case) {
  case SPCOLL__PEER__MSG__BODY_JOIN:
    remote_join(ctx, node, m->join);
    break;
  case SPCOLL__PEER__MSG__BODY_REJECT:
    remote_reject(ctx, node, m->reject);
    break;
  case SPCOLL__PEER__MSG__BODY_LEAVE:
    remote_leave(ctx, node, m->leave);
    break;
  case SPCOLL__PEER__MSG__BODY_ARGS:
    if ((g = spd_group_by_peer_rec(ctx, node, m->args->rec)) != NULL)
      spd_op_peer_args(g, node, m->args);
    break;
  case SPCOLL__PEER__MSG__BODY_P2P:
    if ((g = spd_group_by_peer_rec(ctx, node, m->p2p->rec)) != NULL)
      spd_p2p_peer_msg(g, node, m->p2p);
    break;
  case SPCOLL__PEER__MSG__BODY_OP_FAIL:
    if ((g = spd_group_by_peer_rec(ctx, node, m->op_fail->rec)) != NULL)
      op_failed_there(g, node, m->op_fail);
    break;
  default:
    SPD_DEBUG(&ctx->log, "node %d sent message %d: ignored", node,
              (int)m->body_case);
  }
}

/* A node came (back): tell it every rank joined here of groups still
 * gathering ranks. */
static void on_up(spd_ctx *ctx, int node) {
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link) {
    if (g->detached || g->ready || g->broken)
      continue;
    for (int r = 0; r < g->world; r++)
      if (g->ranks[r].session != NULL)
        send_join(g, r, g->ranks[r].session->uid, node);
  }
}

/* A node is gone: its ranks leave every group; a group that was ready is
 * broken and its ops fail, naming the node, with SPC_ERESTARTED: its
 * daemon may be back soon, and each rank's next op then rejoins the
 * group under its name (client_sequence.c), waiting for that node's ranks
 * for the client's reconnect timeout. */
static void on_lost(spd_ctx *ctx, int node, const char *reason) {
  spd_group *g = TAILQ_FIRST(&ctx->groups), *next;
  for (; g != NULL; g = next) {
    next = TAILQ_NEXT(g, link);
    /* A sub-group of a split still waiting for that node's ranks cannot
     * complete: the split fails on every rank (group_split.c). */
    int awaited = spd_group_split_awaits(g, node);
    if (!node_has_ranks(g, node) && !awaited)
      continue;
    char msg[400];
    snprintf(msg, sizeof(msg), "node %d (%s:%d) was lost: %s", node,
             ctx->cfg.peers[node].host, ctx->cfg.peers[node].port, reason);
    for (int r = 0; r < g->world; r++)
      if (g->ranks[r].remote && g->ranks[r].node == node)
        g->ranks[r].remote = 0, g->joined--;
    g->peer_rec[node] = 0;
    int status = awaited || g->split ? SPK_ENODE_LOST : SPK_ERESTARTED;
    spd_group_break(g, status, msg);
    spd_group_fail_pending(g, status, msg);
    spd_op_peer_node_lost(g, node, status, msg);
    spd_p2p_node_lost(g, node, msg);
    if (awaited)
      spd_group_split_abandon(g, SPK_ENODE_LOST, msg);
    else
      spd_group_maybe_free(g);
  }
}

const spd_peer_hooks spd_group_peer_hooks = {
    .on_msg = on_msg,
    .on_up = on_up,
    .on_lost = on_lost,
};
