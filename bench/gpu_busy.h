/* The compute of spcoll-gpu-bench's overlap column (gpu_busy.cu). */
#ifndef SPC_BENCH_GPU_BUSY_H
#define SPC_BENCH_GPU_BUSY_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queue on s a kernel of `blocks` blocks of 32 threads that each spin for
 * `cycles` of their SM's clock, reading and writing no memory: a trainer's
 * kernel holding SMs while a collective runs. cudaLaunchKernel's status. */
cudaError_t spc_bench_busy(cudaStream_t s, long long cycles, int blocks);

#ifdef __cplusplus
}
#endif

#endif
