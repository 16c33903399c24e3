/* The cross-node engine: runs this node's cut of a plan (kernels/plan_cut.h)
 * — phase-0 streams, local reduce steps, phase-1 streams, local moves —
 * with one tagged UCX message per peer node and phase, and the local
 * steps on the host mover. Loop thread only. */
#ifndef SPD_ENGINE_UCX_H
#define SPD_ENGINE_UCX_H

#include "engine.h"
#include "mover_host.h"
#include "op.h"

int spd_engine_ucx_submit(spd_op *op, spd_mover_done_cb done, spk_err *err);

/* Fail a running cross-node op. It still posts every stream of its cut
 * (skipping only its local steps), so every node's sends and receives
 * meet and nothing hangs; streams with a lost node fail at once. The
 * group is broken; done() reports the failure once nothing is in flight.
 * dead_node >= 0: that node will post no stream of this op (it failed
 * before running it): receives from it are cancelled, nothing more is
 * posted with it. */
void spd_engine_ucx_abort(spd_op *op, int status, const char *msg,
                          int dead_node);

/* Tell the other nodes of op's group that this node will not run op. */
void spd_engine_ucx_tell_failed(spd_op *op, int status, const char *msg);

#endif
