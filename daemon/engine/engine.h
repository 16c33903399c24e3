/* The engine contract: one work item, one static table of engines (as
 * NCCL's transport table). The op layer builds a work item and hands it
 * to the engine the table picks; an engine sees the plan, the tensors'
 * addresses and a done callback, never the daemon's op or group. Adding
 * an engine is one new file and one row of SPD_ENGINES. Loop thread
 * only. */
#ifndef SPD_ENGINE_H
#define SPD_ENGINE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "daemon.h"
#include "op_stats.h"
#include "plan.h"
#include "status.h"

#include "types.h"

struct spd_ctx;

/* Every engine, once: kind suffix, the name config and stats use, and the
 * help of its two counters (Prometheus: spcoll_mover_<name>_ops_total and
 * spcoll_mover_<name>_bytes_total). Table order breaks ties in the
 * choice, so the preferred engine of a kind of work comes first. */
#define SPD_ENGINES(X)                                                       \
  X(HOST, host, "Plans executed by the host mover.",                         \
    "Bytes written by the host mover.")                                      \
  X(CUDA, cuda, "Plans executed by the CUDA (same-GPU IPC) mover.",          \
    "Bytes written by the CUDA mover.")                                      \
  X(NCCL, nccl, "Plans executed by the NCCL mover.",                         \
    "Bytes written by the NCCL mover.")                                      \
  X(UCX, ucx, "Ops whose cross-node part ran over UCX.",                     \
    "Bytes sent to peer daemons over UCX.")                                  \
  X(SERIAL, serial, "Plans executed by the serial (loop-thread) engine.",    \
    "Bytes written by the serial engine.")                                   \
  X(FAST, fast, "Ops the ranks ran among themselves in their group's "       \
    "shared segment (the fast path; rank 0's count).",                       \
    "Bytes per rank of the fast path's ops (rank 0's count).")

typedef enum {
#define SPD_ENGINE_ENUM(kind, name, ops_help, bytes_help) SPD_ENGINE_##kind,
  SPD_ENGINES(SPD_ENGINE_ENUM)
#undef SPD_ENGINE_ENUM
  SPD_ENGINE_COUNT
} spd_engine_kind;

/* What an engine reports when the work finished (status SPK_OK) or failed
 * (an SPK_E* and why); called on the loop thread, never inside submit. */
typedef void (*spd_work_done_cb)(void *arg, int status, const char *msg);

/* One tensor of a rank, as an engine sees it: its memory and the buffer
 * it lies in (an engine registers whole buffers, once). */
typedef struct spd_work_tensor {
  int here;                   /* 1: in this node's memory; 0: another node's
                               * rank (the rest is unset) */
  int dev;                    /* its GPU, -1: host memory */
  uint64_t off;               /* where it starts in its buffer */
  uint8_t *buf_base;          /* the buffer: its whole mapping */
  size_t buf_size;
  uint64_t buf_id;            /* names it in messages */
  void **state;               /* [SPD_ENGINE_COUNT]: what each engine keeps
                               * of the buffer (the ucx row: its UCX
                               * registration), dropped by forget_buffer
                               * when the buffer goes */
} spd_work_tensor;

/* One rank of the work, as an engine sees it. */
typedef struct spd_work_rank {
  const spk_op_args *args;    /* its shapes, dtype and op */
  spd_work_tensor t[SPK_T_COUNT];
} spd_work_rank;

/* One op's work, as an engine sees it. */
typedef struct spd_work {
  const spk_plan *plan;
  uint8_t *const *bases;      /* [world * SPK_T_COUNT]: rank r's tensor t at
                               * bases[r * SPK_T_COUNT + t]; host or device
                               * addresses as mapped by the daemon */
  const int *dev;             /* [world]: GPU of rank r's tensors, -1 host */
  const spd_work_rank *ranks; /* [world] */
  void *const *rank_state;    /* [world]: what rank_open kept of the rank's
                               * request (the GPU rows' stream events), or
                               * NULL */
  const int *node_of;         /* [world]: the node each rank runs on */
  int world;
  int device;                 /* 1: some tensor is in device memory */
  int multinode;              /* 1: the group spans nodes */
  int partial;                /* 1: one step of a larger op (the UCX
                               * engine's local steps): the ranks' tensors
                               * are touched again after it, so the GPU
                               * rows write no done flag (the op's end sets
                               * it from the host) */
  /* Who the work is, opaque to engines but for messages and matching:
   * the group's name, the op's sequence number, this node's key of the
   * group and each node's key of it ([SPD_MAX_NODES]; the UCX engine tags
   * its streams with them). */
  const char *name;
  uint64_t seq;
  uint64_t key;
  const uint64_t *peer_key;
  struct spd_ctx *ctx;
  spd_work_done_cb done;
  void *arg;
  /* A cross-node engine failed: the group cannot run another op (its
   * nodes' streams no longer meet). tell: 1 also tell the other nodes
   * that this node will not run the work (it failed before posting
   * anything). NULL on a node-local work item. */
  void (*broken)(void *arg, int status, const char *msg, int tell);
  void *priv;                 /* the running engine's own */
  /* The group's previous work, still running on the same row, when this
   * one was queued behind it (the row's queues_behind said yes): the row
   * orders this work after it on the GPU. NULL: nothing runs before. */
  const struct spd_work *behind;
} spd_work;

/* What a rank's request brings for per-rank engine state: the client's
 * stream events (CUDA IPC event handles, either may be empty) and its
 * input buffer. */
typedef struct spd_rank_req {
  struct spd_ctx *ctx;
  uint64_t session;
  int in_dev;                 /* GPU of its input tensor, -1: host memory
                               * or no input */
  void *in_gpu_mem;           /* the input buffer's IPC mapping (device) */
  const uint8_t *ready, *done;
  size_t nready, ndone;
  /* Stream flags instead of events (StreamFlags): the flags buffer's
   * engine states (what flags_open made), the slot's byte offset in it
   * and the op's seq; flags_state NULL: none. */
  void *const *flags_state;
  uint64_t flags_off, flags_seq;
} spd_rank_req;

/* Per-rank state of one engine row, from spd_engines_rank_open. */
typedef struct spd_rank_state {
  int kind;                   /* the row that made it */
  void *p;                    /* NULL: none */
} spd_rank_state;

/* A group whose ranks are all on this node, as a row's group hooks see
 * it: kept by the group, valid from group_open to group_close. */
typedef struct spd_group_view {
  struct spd_ctx *ctx;
  const char *name;
  int world;
  uid_t owner;                /* memory held for it counts against this uid */
  uint64_t op_timeout_ns;
  const int *broken;          /* the group's mark: nonzero once broken */
  uint64_t *ops_done;         /* the group's counters, which the row's own */
  spd_op_stats *op_stats;     /* ops add to ([SPD_OP_SLOTS]) */
  /* Break the group and fail its pending ops with status and msg (a
   * row's own op past the group's op timeout). */
  void (*fail)(void *group, int status, const char *msg);
  void *group;
} spd_group_view;

/* A row's own op of a group that some rank started and another has not
 * reached: its sequence number and kind (as its ranks wrote them: only
 * printed), how long no rank moved, the ranks it waits for, and whether
 * the watchdog logged it as stuck. */
typedef struct spd_group_wait {
  uint64_t seq;
  int kind;
  uint64_t age_ns;
  int stuck;
  char missing[200];
} spd_group_wait;

/* What a row keeps of a group (spd_engines_group_open). */
typedef struct spd_group_state {
  int kind;                   /* the row that made it */
  void *p;                    /* NULL: none */
} spd_group_state;

/* A row of the table (its name and counter help are in SPD_ENGINES).
 * wants: 0 cannot run w, 1 can, 2 is the engine for
 * it. submit: SPK_OK, then done() runs once; < 0: nothing started, err
 * says why. A row whose work the daemon never runs (the fast row: its
 * ranks run their ops themselves) has neither, and --mover refuses its
 * name. The rest may be NULL. */
typedef struct spd_engine {
  int built;                  /* 0: compiled out (config refuses its name) */
  int counts_own_bytes;       /* 1: it adds to its bytes counter itself */
  int (*start)(struct spd_ctx *ctx, spk_err *err);
  int (*wants)(const spd_work *w);
  int (*submit)(spd_work *w, spk_err *err);
  /* Fail a running work (dead_node >= 0: a node that will not take part);
   * done() still runs once. */
  void (*abort)(spd_work *w, int status, const char *msg, int dead_node);
  /* A buffer goes away: drop what the engine keeps of it (*state, its
   * slot of the buffer's spd_work_tensor.state; called when not NULL). */
  void (*forget_buffer)(struct spd_ctx *ctx, void **state);
  /* At exit, no work running. */
  void (*fini)(struct spd_ctx *ctx);
  /* Per-rank state from a rank's request, kept until the op is freed
   * (the GPU rows: stream events opened when the rank arrives).
   * rank_open: SPK_OK, *state_p set (NULL: nothing kept); < 0: the rank's
   * request is refused, err says why. rank_recorded: 1 when the done
   * event the rank's client waits on was recorded. */
  int (*rank_open)(const spd_rank_req *rq, void **state_p, spk_err *err);
  /* A host buffer registered for stream flags (BufRegister.stream_flags):
   * make its words reachable by the row's streams, keeping what it made in
   * *state (forget_buffer drops it). The first row with it takes it. */
  int (*flags_open)(struct spd_ctx *ctx, uint8_t *base, size_t size,
                    void **state, spk_err *err);
  void (*rank_close)(void *state);
  /* The op was given up on while its engine still runs it (a stream stuck
   * on a dead client): let the rank's client go on now (the GPU rows set
   * its done flag from the host). */
  void (*rank_release)(void *state);
  int (*rank_recorded)(const void *state);
  /* Whether the group's next op, whose ranks' requests made next_states
   * ([world], rank_open's, NULL where none), may be submitted while prev,
   * this row's work of the same group, still runs: the row would run it
   * too and orders it after prev on the GPU, so it needs nothing of
   * prev's end on the host (spd_work.behind). NULL: never, one op of a
   * group at a time. */
  int (*queues_behind)(const spd_work *prev, void *const *next_states,
                       int world);
  /* What a submitted work is waiting for, one line for stats (NULL: the
   * engine says nothing); snprintf's return. */
  int (*describe)(const spd_work *w, char *buf, size_t len);
  /* Group hooks, of a row whose ops the ranks of a group run among
   * themselves in memory the row shares with them (the fast row: the
   * group's shared segment). One row may define them (spd_engines_start
   * refuses a table where two do). Every group of this node's ranks only
   * gets group_open once ready: *state_p (NULL: the row does not serve
   * it); counters: the row's own, which it adds its ops to as it learns
   * of them (group_harvest). The rest take that state. */
  void (*group_open)(const spd_group_view *g, spd_engine_counters *counters,
                     void **state_p);
  /* The descriptor to hand rank with its GroupJoined (the caller's from
   * here), *size what it maps; -1: none. group_fd_lost: one could not be
   * sent, so no rank may run ops in the shared memory. */
  int (*group_fd)(void *state, int rank, uint64_t *size);
  void (*group_fd_lost)(void *state);
  /* The daemon is about to answer rank's daemon-path request req. */
  void (*group_answered)(void *state, int rank, uint64_t req);
  /* The group broke or the daemon stops: the row's ops in progress fail
   * with status and msg (once). */
  void (*group_break)(void *state, int status, const char *msg);
  /* The watchdog's look, each second: an op stalled past stuck_seconds
   * is logged, one past the op timeout fails the group (view->fail). */
  void (*group_tick)(void *state, uint64_t now);
  /* 1 and *w filled when a row's op waits (stats), else 0. */
  int (*group_waiting)(void *state, uint64_t now, spd_group_wait *w);
  /* Add the row's ops completed since the last call to the group's and
   * the daemon's counters. */
  void (*group_harvest)(void *state);
  /* One line for the text stats (label: the group's), or nothing. */
  void (*group_line)(void *state, const char *label, FILE *out);
  /* The daemon drains: the row's ops go to the daemon from now on. */
  void (*group_drain)(void *state);
  /* 1: a row's op is under way (a drain waits for it). */
  int (*group_busy)(void *state);
  void (*group_close)(void *state);
} spd_engine;

/* The rows, each defined in its engine's file as spd_engine_<name>. */
#define SPD_ENGINE_DECL(kind, name, ops_help, bytes_help)                    \
  extern const spd_engine spd_engine_##name;
SPD_ENGINES(SPD_ENGINE_DECL)
#undef SPD_ENGINE_DECL

extern const spd_engine *const spd_engines[SPD_ENGINE_COUNT];

const char *spd_engine_name(int kind);
/* Help text of kind's counters (bytes: 1 for the bytes counter). */
const char *spd_engine_help(int kind, int bytes);
/* The kind named name, -1 when none. */
int spd_engine_find(const char *name);
/* Whether row kind is built and runs daemon work (wants and submit). */
int spd_engine_runs(int kind);

/* The engine for w: `prefer` (a kind, or -1 for the best) when it can run
 * w, else the one that wants it most; -1 when none can. */
int spd_engine_pick(const spd_work *w, int prefer);

/* Start every engine; stop them (reverse order) at exit. */
int spd_engines_start(struct spd_ctx *ctx, spk_err *err);
void spd_engines_fini(struct spd_ctx *ctx);
/* A buffer is going away: every engine drops what it keeps of it
 * (state: the buffer's [SPD_ENGINE_COUNT] slots). */
void spd_engines_forget_buffer(struct spd_ctx *ctx, void **state);

/* A rank's request arrived: the row with rank_open (one at most: the
 * state it keeps is read by every row that runs device work, and
 * spd_engines_start refuses a table with two) keeps what it needs of it
 * in st (st->p NULL: nothing). Close it with the op; recorded:
 * whether the rank's done event was recorded (rank_recorded). */
int spd_engines_rank_open(const spd_rank_req *rq, spd_rank_state *st,
                          spk_err *err);
void spd_engines_rank_close(spd_rank_state *st);
void spd_engines_rank_release(spd_rank_state *st);
int spd_engines_rank_recorded(const spd_rank_state *st);
/* A stream flags buffer (state: its [SPD_ENGINE_COUNT] slots): the first
 * row with flags_open opens it; SPK_EUNSUPPORTED when no row can. */
int spd_engines_flags_open(struct spd_ctx *ctx, uint8_t *base, size_t size,
                           void **state, spk_err *err);

/* A group's side of the group hooks (engine_group.c): the row with them
 * keeps its state of the group in st (st->p NULL: none, and every call
 * below does nothing, answering -1 or 0). */
void spd_engines_group_open(const spd_group_view *g, spd_group_state *st);
int spd_engines_group_fd(spd_group_state *st, int rank, uint64_t *size);
void spd_engines_group_fd_lost(spd_group_state *st);
void spd_engines_group_answered(spd_group_state *st, int rank, uint64_t req);
void spd_engines_group_break(spd_group_state *st, int status, const char *msg);
void spd_engines_group_tick(spd_group_state *st, uint64_t now);
int spd_engines_group_waiting(spd_group_state *st, uint64_t now,
                              spd_group_wait *w);
void spd_engines_group_harvest(spd_group_state *st);
void spd_engines_group_line(spd_group_state *st, const char *label,
                            FILE *out);
void spd_engines_group_drain(spd_group_state *st);
int spd_engines_group_busy(spd_group_state *st);
void spd_engines_group_close(spd_group_state *st);
/* Whether some row shares memory with the group's ranks (st->p set). */
static inline int spd_engines_group_shares(const spd_group_state *st) {
  return st->p != NULL;
}

#endif
