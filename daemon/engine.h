/* Engines: which mover runs a planned op, and what each one moved. The op
 * layer plans; the engine layer only decides where the plan runs. Loop
 * thread only. */
#ifndef SPD_ENGINE_H
#define SPD_ENGINE_H

#include "mover_host.h"
#include "op.h"

typedef enum {
  SPD_ENGINE_HOST = 0,   /* memcpy on the host mover's threads */
  SPD_ENGINE_CUDA,       /* batched kernel over IPC-mapped pointers */
  SPD_ENGINE_NCCL,       /* daemon-owned NCCL communicators */
  SPD_ENGINE_UCX,        /* cross-node part, aggregated per peer daemon */
} spd_engine_kind;

const char *spd_engine_name(spd_engine_kind kind);

/* Run op's plan on the engine its tensors call for; done(op) runs on the
 * loop thread when it finished. Sets op->engine. */
int spd_engine_submit(spd_op *op, spd_mover_done_cb done, spk_err *err);

/* Count a finished op's bytes against the engine that ran it. */
void spd_engine_account(spd_op *op);

/* The GPU engines (engine_gpu.c): 1 when any of op's tensors is in device
 * memory, and the submission for such an op. */
int spd_engine_gpu_wants(const spd_op *op);
int spd_engine_gpu_submit(spd_op *op, spd_mover_done_cb done, spk_err *err);
/* Per-rank GPU state of an op request (stream events): taken from the
 * request when the rank arrives, freed with the op, and the rank's Done
 * reply filled with what the client waits on. */
int spd_engine_gpu_rank_fill(spd_op_rank *r, const Spcoll__OpRequest *rq,
                             spk_err *err);
void spd_engine_gpu_rank_free(spd_op_rank *r);
void spd_engine_gpu_done_fill(const spd_op *op, int rank, Spcoll__Done *done);

#endif
