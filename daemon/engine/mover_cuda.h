/* The CUDA mover: a plan executed by one batched kernel launch per phase
 * (reduce steps, then moves) over IPC-mapped pointers, on a stream of the
 * daemon. For groups whose tensors share one GPU (NCCL refuses several
 * ranks on one device), or, when asked for, GPUs with peer access. */
#ifndef SPD_MOVER_CUDA_H
#define SPD_MOVER_CUDA_H

#include "engine.h"
#include "gpu.h"

#ifdef SPC_HAVE_CUDA
/* Run w's plan with kernels on GPU dev; every tensor is on dev or on a
 * GPU dev can reach with peer access. w->done runs on the loop thread
 * when the work is complete or failed. */
int spd_mover_cuda_submit(spd_gpu *gpu, spd_work *w, int dev, spk_err *err);

/* Whether w's job recorded its end event, which a next op of its group
 * queued behind it waits on (not when its queueing failed part way). */
int spd_mover_cuda_orders_next(const spd_work *w);
#endif

#endif
