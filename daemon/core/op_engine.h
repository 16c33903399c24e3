/* The op layer's side of the engine contract: an op's work item built
 * from its ranks, handed to the engine the table picks, and the per-rank
 * GPU state (stream events) the GPU engines read. Loop thread only. */
#ifndef SPD_OP_ENGINE_H
#define SPD_OP_ENGINE_H

#include "engine.h"
#include "mover_host.h"
#include "op.h"

/* Run op's plan on the engine the table picks for it (the config's
 * `mover` when it can); done(op) runs on the loop thread when it
 * finished, with op->fail_status set when it failed. Sets op->engine. */
int spd_engine_submit(spd_op *op, spd_mover_done_cb done, spk_err *err);

/* Fail op's running work through its engine's abort (engine.h). */
void spd_engine_abort(spd_op *op, int status, const char *msg,
                      int dead_node);

/* Count a finished op's bytes against the engine that ran it. */
void spd_engine_account(spd_op *op);

/* For the engines that still report through the op (cuda, nccl, ucx):
 * the spd_mover_done_cb that ends op's work item with op->fail_status. */
void spd_work_op_done(void *op);

/* Per-rank GPU state of an op request (stream events; engine_gpu.c):
 * taken from the request when the rank arrives, freed with the op, and
 * the rank's Done reply filled with what the client waits on. */
int spd_engine_gpu_rank_fill(spd_op_rank *r, const Spcoll__OpRequest *rq,
                             spk_err *err);
void spd_engine_gpu_rank_free(spd_op_rank *r);
void spd_engine_gpu_done_fill(const spd_op *op, int rank, Spcoll__Done *done);

#endif
