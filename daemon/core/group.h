/* Named groups: membership, readiness, and the per-group queue of ops
 * matched across ranks by sequence number. Loop thread only. */
#ifndef SPD_GROUP_H
#define SPD_GROUP_H

#include <stdint.h>
#include <sys/queue.h>

#include "daemon.h"
#include "engine.h"
#include "session.h"

struct spd_op;
struct spd_p2p_half;
TAILQ_HEAD(spd_p2p_list, spd_p2p_half);

typedef struct {
  spd_session *session;       /* NULL: rank not (or no longer) here */
  int remote;                 /* joined on node `node` (another daemon) */
  int node;
  spd_member *member;
  uint64_t join_req;          /* join request to answer when ready */
  uint64_t next_seq;          /* sequence number of this rank's next op */
  uint64_t issued;            /* ops it issued before (GroupJoin.issued) */
} spd_rank_slot;

typedef struct spd_group {
  TAILQ_ENTRY(spd_group) link;
  spd_ctx *ctx;
  char name[128];
  int world;
  uid_t owner;                /* the uid that created it */
  uint64_t created_ns;        /* for the join deadline */
  uint64_t join_by_ns;        /* an earlier one a rejoin asked (0: none) */
  uint64_t op_timeout_ns;     /* an op waiting this long for a rank fails */
  int joined;                 /* ranks present */
  int ready;                  /* every rank joined once */
  int broken;                 /* a rank left or was lost after ready */
  int broken_status;
  char broken_reason[256];
  spd_rank_slot *ranks;
  /* Across nodes (group_peer.c): each node names a group by its own
   * record id; peer_rec[n] is node n's id for this one. */
  uint64_t rec;
  uint64_t peer_rec[SPD_MAX_NODES];
  int nlocal;                 /* ranks joined here */
  int multinode;              /* a rank of it lives on another node */
  int detached;               /* no local rank left: not joinable, kept
                               * until the remote ranks have left */
  TAILQ_HEAD(, spd_op) ops;   /* ascending seq */
  int running;                /* its ops in an engine: more than one only
                               * when queued behind (op_engine.c) */
  uint64_t ops_done;
  spd_op_stats op_stats[SPD_OP_SLOTS]; /* this group's share */
  /* What the engine row with group hooks keeps of it (the fast path's
   * shared segment), for a group of this node's ranks only, and the view
   * of the group that row gets (set at ready). */
  spd_group_state shared;
  spd_group_view view;
  /* Point to point (op_p2p.c): halves not yet matched, in arrival order,
   * and the halves of pairs in an engine. */
  struct spd_p2p_list p2p_sends, p2p_recvs, p2p_run;
  /* Across nodes (op_p2p_peer.c): the id of the next send posted to its
   * receiver's node, and the stream number of the next pair matched here
   * with a send of another node. */
  uint64_t p2p_next_id, p2p_next_seq;
  /* Made by a group split (group_split.c): the parent's record id here
   * and the split's sequence number. Until it is ready, the slot of a
   * rank not yet joined names the node its join must come from. */
  int split;
  uint64_t split_parent, split_seq;
} spd_group;

/* Join `name` as `rank`. Replies GroupJoined to every rank once all have
 * joined; on a bad argument or conflict replies Error to this request. */
void spd_group_join(spd_ctx *ctx, spd_session *s, uint64_t req,
                    const Spcoll__GroupJoin *join);

/* May a client of `uid` join or abort g? Its owner, root and the
 * configured allow_uid may. */
int spd_group_may_use(const spd_ctx *ctx, const spd_group *g, uid_t uid);
int spd_group_may_use_uid(const spd_ctx *ctx, uid_t owner, uid_t uid);

/* Create an empty group of owner (NULL when out of memory). */
spd_group *spd_group_create(spd_ctx *ctx, const char *name, int world,
                            uid_t owner);

/* Group names live in their owner's namespace: "NAME" in a join is the
 * joiner's own group NAME, "@UID/NAME" is uid UID's group NAME (allowed to
 * root and allow_uid only: see spd_group_may_use). Splits full into the
 * owner and the name within its namespace; SPK_EINVAL for a malformed
 * qualifier. */
int spd_group_name_parse(const char *full, uid_t self, uid_t *owner_p,
                         const char **name_p, spk_err *err);
/* The name as `viewer` would write it: NAME for its own group,
 * "@UID/NAME" for another uid's. */
const char *spd_group_label(const spd_group *g, uid_t viewer, char *buf,
                            size_t len);
/* The local record of owner's group name that a join goes to (one still
 * gathering ranks first, else a complete one), or NULL. */
spd_group *spd_group_find(spd_ctx *ctx, uid_t owner, const char *name);

/* Put session s in g as `rank`, to be answered on request `req` when the
 * group is complete (GroupJoined to every rank at once). */
int spd_group_add(spd_group *g, spd_session *s, int rank, uint64_t req);

/* Rank of member m leaves: explicitly (lost = 0) or because its client
 * went away (lost = 1). Pending ops fail naming the rank and a ready group
 * is marked broken; the last member out frees the group. */
void spd_group_depart(spd_group *g, spd_member *m, int lost);

/* Fail every op of the group that has not reached the mover. */
void spd_group_fail_pending(spd_group *g, int status, const char *msg);

/* Start the group's oldest op if every rank has issued it and nothing of
 * the group is running. */
void spd_group_kick(spd_group *g);

/* The group is not complete by its deadline: every waiting join fails
 * with SPK_ETIMEDOUT naming the missing ranks, and the group goes. */
void spd_group_expire(spd_group *g);
/* A group not yet complete ends: every waiting join fails with status and
 * msg, the other nodes hear its ranks leave, and the group goes. */
void spd_group_fail_joins(spd_group *g, int status, const char *msg);

/* Is rank joined (here or on another node)? */
static inline int spd_group_has_rank(const spd_group *g, int rank) {
  return g->ranks[rank].session != NULL || g->ranks[rank].remote;
}

/* Every rank joined: answer the local ones. */
void spd_group_announce_ready(spd_group *g);

/* What the peer layer tells the groups (a message, a node up or lost):
 * handed to spd_peers_start by main.c. */
struct spd_peer_hooks;
extern const struct spd_peer_hooks spd_group_peer_hooks;

/* Across nodes (group_peer.c): tell the other daemons that a local rank
 * joined or left; " (node N)"-style text for messages. */
void spd_group_peer_joined(spd_group *g, int rank, uid_t uid);
void spd_group_peer_left(spd_group *g, int rank, int lost, const char *why);
/* A pending op of g fails here: the other nodes, which may already run
 * it with every rank's arguments, hear it, so they stop waiting for this
 * node's part (one node failing an op it never started left the others
 * waiting for its streams forever). */
void spd_group_peer_op_failed(spd_group *g, struct spd_op *op, int status,
                              const char *msg);
/* The nodes other than this one holding a rank of g, into nodes[] (room
 * for SPD_MAX_NODES); returns their count. */
int spd_group_other_nodes(const spd_group *g, int *nodes);
/* A message of node refused (fmt: what and why; text of the peer's in it
 * escaped with spd_log_str): counted in peer_refused and logged, at most
 * a few lines a minute, the rest told in one line once the minute is over
 * (spd_group_peer_refused_tick, from the watchdog), so that a peer cannot
 * flood the log. */
void spd_group_peer_refused(spd_ctx *ctx, int node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void spd_group_peer_refused_tick(spd_ctx *ctx, uint64_t now);
/* The record whose id on node is rec (NULL: none). */
spd_group *spd_group_by_peer_rec(spd_ctx *ctx, int node, uint64_t rec);

/* Group split (group_split.c), the GroupSplit request's handler. Rank's
 * split arrives from client s: it keeps an op's place in g's sequence
 * (every rank's arrives as an op's, across nodes in the Args), and a
 * place in the client's client_max_groups is held for it until the split
 * runs, or the rank's status says the limit is reached (failing the split
 * on every rank, every node, alike). */
void spd_group_split_arrive(spd_group *g, int rank, spd_session *s,
                            uint64_t req, const Spcoll__GroupSplit *gs);
/* Run a split whose ranks have all arrived (the op layer's
 * ctx->up.split_run): makes the sub-groups holding this node's ranks,
 * answers them (a sub-group across nodes once its every rank joined) and
 * frees the op. */
struct spd_op;
void spd_group_split_run(struct spd_op *op);
/* Across nodes: does g, a sub-group of a split still gathering ranks,
 * wait for a rank of node? */
int spd_group_split_awaits(const spd_group *g, int node);
/* Sub-group g of a split cannot complete (a node lost, a member gone, the
 * split failed on another node): every local rank's split fails with
 * status and msg, the other nodes hear them leave, and g is joined no
 * more (freed once no rank is left in it). */
void spd_group_split_abandon(spd_group *g, int status, const char *msg);
/* Split `seq` of parent failed: abandon its sub-groups not yet complete. */
void spd_group_split_failed(spd_group *parent, uint64_t seq, int status,
                            const char *msg);

/* Mark a ready group broken (once) with status and reason. */
void spd_group_break(spd_group *g, int status, const char *reason);

/* Free the group if no member and no running op remain. */
void spd_group_maybe_free(spd_group *g);

#endif
