/* A collective op of one group, matched across its ranks by sequence
 * number: each rank's request arrives, then the op is planned, moved and
 * answered on every rank. Loop thread only. */
#ifndef SPD_OP_H
#define SPD_OP_H

#include <sys/queue.h>

#include "buffer.h"
#include "engine.h"
#include "group.h"
#include "plan.h"
#include "types.h"
#include "peer.pb-c.h"

typedef struct {
  int arrived;
  uint64_t req;
  uint64_t arrived_ns;
  spd_session *session;       /* NULL once the client went away */
  int status;                 /* a local error found at arrival */
  spk_err err;
  spk_op_args args;
  int64_t *sizes, *sizes2;    /* owned copies behind args */
  spd_buffer *buf[SPK_T_COUNT];
  uint64_t off[SPK_T_COUNT];
  spd_rank_state eng;         /* an engine's per-rank state (events) */
  spd_buffer *flags_buf;      /* its stream flags buffer, held while the
                               * engine state may write the done flag */
  int remote;                 /* arrived on another node (its Args) */
  int charged;                /* counted in uid's quotas (quota.h) */
  uid_t uid;
  long long charge;           /* request bytes counted for it */
  int node;                   /* that node */
  /* A group split (GroupSplit): matched like an op but run by the daemon
   * itself; args.dims = {color, key}, args.op 0, no tensors. */
  int group_split;
  int group_reserved;         /* holds a place in its client's
                               * client_max_groups (group_split.c) */
} spd_op_rank;

typedef struct spd_op {
  TAILQ_ENTRY(spd_op) link;
  spd_group *group;
  uint64_t seq;
  int arrived;
  int running;
  /* Its engine reported. The ops of a group answer in their order: one
   * that finished while an earlier op still runs waits for it (op.c). */
  int finished;
  /* Handed to its engine while this earlier op of its group still ran
   * (spd_op_may_start_behind); read at submit only. */
  struct spd_op *behind;
  int stuck_reported;         /* logged once as stuck */
  int engine;                 /* spd_engine_kind that ran it */
  spd_work work;              /* what that engine sees (op_engine.c) */
  void *work_mem;             /* owned: the arrays behind work */
  void (*finish)(void *op);   /* the op layer's completion */
  spk_plan plan;
  uint8_t **bases;            /* [world * SPK_T_COUNT]; NULL off-node */
  int fail_status;            /* set by an engine whose run failed */
  char fail_msg[256];
  uint64_t created_ns;        /* when the first rank arrived */
  uint64_t started_ns;        /* when every rank had arrived */
  uint64_t submitted_ns;      /* when handed to a mover */
  int abandoned;              /* ran past the op timeout: ranks answered */
  uv_work_t plan_work;        /* building the plan off the loop */
  int plan_rc;
  spk_err plan_err;
  spd_op_rank ranks[];
} spd_op;

/* Resolve a request's tensor t of session s (what: "input", ...): its
 * registered buffer (referenced, *buf_p), dtype, shape, alignment and
 * bounds checked; SPK_OK or an error naming what is wrong. */
int spd_op_tensor(spd_session *s, const Spcoll__Tensor *t, const char *what,
                  spk_shape *shape, spd_buffer **buf_p, spk_err *err);

/* Record rank's request for its next op of the group; replies Error at
 * once only when the request cannot be tied to an op. */
void spd_op_arrive(spd_group *g, int rank, spd_session *s, uint64_t req,
                   const Spcoll__OpRequest *rq);

/* Tie rank's request req of client s to its next op of g (the op, its
 * rank's slot arrived and charged), or reply Error at once and return
 * NULL. Then fill the rank's slot and call spd_op_rank_in. For requests
 * that keep an op's place in the group's sequence without being a data
 * op (a group split, group_split.c); spd_op_arrive is both for an op. */
spd_op *spd_op_take(spd_group *g, int rank, spd_session *s, uint64_t req,
                    long long lists);
void spd_op_rank_in(spd_op *op, int rank);
/* Give back the place in its client's client_max_groups that r holds
 * (group_reserved: a group split's, until the split runs). */
void spd_op_rank_unreserve(spd_op_rank *r);

/* The stats slot of op (op_stats.h): its kind's, or the group split's. */
int spd_op_slot_of(const spd_op *op);

/* Plan and hand to the mover, or fail on every rank. */
void spd_op_start(spd_op *op);

/* Groups this large build their plans on libuv's thread pool (op_plan.c):
 * a plan has up to world^2 moves, and at 1024 ranks building it on the
 * loop thread stalled every client of the daemon for ~0.3 s. */
#define SPD_PLAN_OFF_LOOP_WORLD 64

/* Build op's plan from its ranks' arguments (pure: any thread). */
int spd_op_plan(spd_op *op, spk_err *err);
/* Build it on the thread pool; the op counts as running meanwhile and
 * goes on with spd_op_launch on the loop. SPK_OK when queued. */
int spd_op_plan_off_loop(spd_op *op);
/* With its plan built (rc SPK_OK) or not: check it and hand it to its
 * engine (SPK_OK: the engine's completion goes on from there, perhaps
 * already inside this call), or fail it on every rank (the status; the op
 * is gone, or, behind an earlier op of its group still running, answered
 * after it; the caller moves the group on). */
int spd_op_launch(spd_op *op, int rc, spk_err *err);
/* After a running op is gone: the group's next op, or the stop. */
void spd_op_after(spd_group *g);

/* Reply `status` with msg to every rank still present and free the op. */
void spd_op_fail(spd_op *op, int status, const char *msg);


/* The op of g with sequence number seq, made when new (NULL: no memory). */
spd_op *spd_op_get(spd_group *g, uint64_t seq);

/* The op of g at seq with rank's slot charged to uid, as every arrival
 * is (quota.h): one pending op, and `lists` bytes of size lists plus the
 * op record itself when the op is new. NULL with msg naming the spent
 * limit (or memory); nothing is held then. */
spd_op *spd_op_get_charged(spd_group *g, uint64_t seq, int rank, uid_t uid,
                           long long lists, char *msg, size_t len);

/* An owned copy of a size list (at most 65536 entries). */
int spd_op_copy_list(const int64_t *src, size_t n, int64_t **dst_p,
                     const char *what, spk_err *err);

/* A rank arrived: count it, start the op when it was the last. */
void spd_op_rank_arrived(spd_op *op);

/* Across nodes (op_peer.c): tell the other nodes of the group a local
 * rank's arrival; take another node's; fail on its word; a lost node. */
void spd_op_peer_send_args(spd_op *op, int rank);
void spd_op_peer_args(spd_group *g, int node, const Spcoll__Peer__Args *a);
/* Node failed op seq of g, which is here: g breaks and the op fails (or
 * its engine aborts it) with status and msg; 1. 0: no such op here. */
int spd_op_peer_fail(spd_group *g, int node, uint64_t seq, int status,
                     const char *msg);
/* Node is lost: g's running ops abort with status, naming it in msg. */
void spd_op_peer_node_lost(spd_group *g, int node, int status,
                           const char *msg);
/* Tell the other nodes of op's group that this node will not run op. */
void spd_op_peer_tell_failed(spd_op *op, int status, const char *msg);

/* Free a finished or failed op: buffers released, removed from the group. */
void spd_op_free(spd_op *op);

/* Ranks of a pending op that have not issued it, as "2,3" into buf. */
const char *spd_op_missing(const spd_op *op, char *buf, size_t len);

/* The client of `rank` went away: forget its session pointer. */
void spd_op_forget_session(spd_op *op, int rank);

#endif
