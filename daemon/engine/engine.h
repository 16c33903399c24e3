/* The engine contract: one work item, one static table of engines (as
 * NCCL's transport table). The op layer builds a work item and hands it
 * to the engine the table picks; an engine sees the plan, the tensors'
 * addresses and a done callback, never the daemon's op or group. Adding
 * an engine is one new file and one row of SPD_ENGINES. Loop thread
 * only. */
#ifndef SPD_ENGINE_H
#define SPD_ENGINE_H

#include <stdint.h>

#include "plan.h"
#include "status.h"

struct spd_ctx;
struct spd_op;
struct spd_buffer;

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
    "Bytes written by the serial engine.")

typedef enum {
#define SPD_ENGINE_ENUM(kind, name, ops_help, bytes_help) SPD_ENGINE_##kind,
  SPD_ENGINES(SPD_ENGINE_ENUM)
#undef SPD_ENGINE_ENUM
  SPD_ENGINE_COUNT
} spd_engine_kind;

/* What an engine reports when the work finished (status SPK_OK) or failed
 * (an SPK_E* and why); called on the loop thread, never inside submit. */
typedef void (*spd_work_done_cb)(void *arg, int status, const char *msg);

/* One op's work, as an engine sees it. */
typedef struct spd_work {
  const spk_plan *plan;
  uint8_t *const *bases;      /* [world * SPK_T_COUNT]: rank r's tensor t at
                               * bases[r * SPK_T_COUNT + t]; host or device
                               * addresses as mapped by the daemon */
  const int *dev;             /* [world]: GPU of rank r's tensors, -1 host */
  int world;
  int device;                 /* 1: some tensor is in device memory */
  int multinode;              /* 1: the group spans nodes */
  struct spd_ctx *ctx;
  spd_work_done_cb done;
  void *arg;
  /* The op behind the work, for the engines not yet on the contract alone
   * (cuda, nccl, ucx read its ranks' events and group): see
   * docs/architecture.md. */
  struct spd_op *op;
} spd_work;

/* A row of the table (its name and counter help are in SPD_ENGINES).
 * wants: 0 cannot run w, 1 can, 2 is the engine for
 * it. submit: SPK_OK, then done() runs once; < 0: nothing started, err
 * says why. The rest may be NULL. */
typedef struct spd_engine {
  int built;                  /* 0: compiled out (config refuses its name) */
  int counts_own_bytes;       /* 1: it adds to its bytes counter itself */
  int (*start)(struct spd_ctx *ctx, spk_err *err);
  int (*wants)(const spd_work *w);
  int (*submit)(spd_work *w, spk_err *err);
  /* Fail a running work (dead_node >= 0: a node that will not take part);
   * done() still runs once. */
  void (*abort)(spd_work *w, int status, const char *msg, int dead_node);
  /* A buffer goes away: drop what the engine holds of it. */
  void (*forget_buffer)(struct spd_ctx *ctx, struct spd_buffer *buf);
  /* At exit, no work running. */
  void (*fini)(struct spd_ctx *ctx);
} spd_engine;

/* Each engine's counters, indexed by spd_engine_kind. */
typedef struct {
  uint64_t ops, bytes;
} spd_engine_counters;

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

/* The engine for w: `prefer` (a kind, or -1 for the best) when it can run
 * w, else the one that wants it most; -1 when none can. */
int spd_engine_pick(const spd_work *w, int prefer);

/* Start every engine; stop them (reverse order) at exit. */
int spd_engines_start(struct spd_ctx *ctx, spk_err *err);
void spd_engines_fini(struct spd_ctx *ctx);
/* Tell every engine a buffer is going away. */
void spd_engines_forget_buffer(struct spd_ctx *ctx, struct spd_buffer *buf);

#endif
