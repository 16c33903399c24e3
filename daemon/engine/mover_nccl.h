/* The NCCL mover: communicators the daemon owns over the node's GPUs
 * (ncclCommInitAll, one set per distinct device set, cached and shared by
 * every group and framework on those devices). A plan that is exactly an
 * NCCL collective runs as one; any other runs as packed blocks exchanged
 * with grouped ncclSend/ncclRecv (gpu_route.c). */
#ifndef SPD_MOVER_NCCL_H
#define SPD_MOVER_NCCL_H

#include "engine.h"
#include "gpu.h"

#ifdef SPC_HAVE_NCCL
/* Run w's plan over the GPUs w->dev[r] (the daemon's ordinal of rank r's
 * GPU). The first op on a device set waits for its communicators, made
 * off the loop thread. w->done runs on the loop thread when the work is
 * complete or failed. */
int spd_mover_nccl_submit(spd_gpu *gpu, spd_work *w, spk_err *err);

/* Whether w's work is on its set's streams, in the order every later op
 * of the set will follow (not gated, not waiting for communicators, the
 * set not aborted): an op of the same group and GPUs queued now runs
 * after it (engine_gpu.c, nccl_queues_behind). */
int spd_mover_nccl_on_streams(const spd_work *w);

/* At exit, no op running: destroy the communicators and their streams,
 * on libuv's thread pool (ncclCommDestroy may block); the loop runs
 * until they are gone, after the GPU state. */
void spd_mover_nccl_free(spd_gpu *gpu);
#endif

#endif
