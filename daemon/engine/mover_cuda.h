/* The CUDA mover: a plan executed by one batched kernel launch per phase
 * (reduce steps, then moves) over IPC-mapped pointers, on a stream of the
 * daemon. For groups whose tensors share one GPU (NCCL refuses several
 * ranks on one device), or, when asked for, GPUs with peer access. */
#ifndef SPD_MOVER_CUDA_H
#define SPD_MOVER_CUDA_H

#include "gpu.h"

#ifdef SPC_HAVE_CUDA
/* Run op's plan with kernels on GPU dev; every tensor is on dev or on a
 * GPU dev can reach with peer access. done(op) runs on the loop thread
 * when the work is complete (or failed: then every rank got an error). */
int spd_mover_cuda_submit(spd_gpu *gpu, spd_op *op, int dev,
                          spd_mover_done_cb done, spk_err *err);
#endif

#endif
