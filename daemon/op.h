/* A collective op of one group, matched across its ranks by sequence
 * number: each rank's request arrives, then the op is planned, moved and
 * answered on every rank. Loop thread only. */
#ifndef SPD_OP_H
#define SPD_OP_H

#include <sys/queue.h>

#include "buffer.h"
#include "group.h"
#include "plan.h"
#include "types.h"

/* A control op matched like the others but run by the daemon itself:
 * dims = {color, key}, no tensors. */
#define SPD_OP_GROUP_SPLIT 100

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
  void *gpu;                  /* the GPU engine's per-rank state (events) */
} spd_op_rank;

typedef struct spd_op {
  TAILQ_ENTRY(spd_op) link;
  spd_group *group;
  uint64_t seq;
  int arrived;
  int running;
  int stuck_reported;         /* logged once as stuck */
  int engine;                 /* spd_engine_kind that ran it */
  spk_plan plan;
  uint8_t **bases;            /* [world * SPK_T_COUNT] */
  uint64_t created_ns;        /* when the first rank arrived */
  uint64_t started_ns;        /* when every rank had arrived */
  uint64_t submitted_ns;      /* when handed to a mover */
  spd_op_rank ranks[];
} spd_op;

/* Record rank's request for its next op of the group; replies Error at
 * once only when the request cannot be tied to an op. */
void spd_op_arrive(spd_group *g, int rank, spd_session *s, uint64_t req,
                   const Spcoll__OpRequest *rq);

/* Plan and hand to the mover, or fail on every rank. */
void spd_op_start(spd_op *op);

/* Reply `status` with msg to every rank still present and free the op. */
void spd_op_fail(spd_op *op, int status, const char *msg);

/* Run a group split whose ranks have all arrived (group_split.c); replies
 * to every rank and frees the op. */
void spd_group_split_run(spd_op *op);

/* Free a finished or failed op: buffers released, removed from the group. */
void spd_op_free(spd_op *op);

/* The client of `rank` went away: forget its session pointer. */
void spd_op_forget_session(spd_op *op, int rank);

#endif
