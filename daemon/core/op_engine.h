/* The op layer's side of the engine contract: an op's work item built
 * from its ranks, handed to the engine the table picks, and what the
 * engines keep of each rank's request. Loop thread only. */
#ifndef SPD_OP_ENGINE_H
#define SPD_OP_ENGINE_H

#include "engine.h"
#include "mover_host.h"
#include "op.h"

/* Run op's plan on the engine the table picks for it (the config's
 * `mover` when it can); done(op) runs on the loop thread when it
 * finished, with op->fail_status set when it failed. Sets op->engine. */
int spd_engine_submit(spd_op *op, spd_mover_done_cb done, spk_err *err);

/* op, whose ranks have all arrived, is its group's next op while earlier
 * ops of the group run: 1 when it may be handed to its engine now, queued
 * behind the latest of them not yet finished (its engine's queues_behind
 * says so; op->behind set), or all of them finished (their answers are
 * still to go); 0 when it waits for them. */
int spd_op_may_start_behind(spd_op *op);

/* Fail op's running work through its engine's abort (engine.h). */
void spd_engine_abort(spd_op *op, int status, const char *msg,
                      int dead_node);

/* Count a finished op's bytes against the engine that ran it. */
void spd_engine_account(spd_op *op);

/* A rank's request arrived: what an engine keeps of it (its stream
 * events, through the table's rank_open) in r->eng, closed with the op. */
int spd_op_rank_engine_open(spd_op_rank *r, const Spcoll__OpRequest *rq,
                            spk_err *err);

/* What op's engine says it waits for ("" when it says nothing or the op
 * is not in an engine). */
const char *spd_engine_describe(const spd_op *op, char *buf, size_t len);

#endif
