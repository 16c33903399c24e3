/* A kernel that only spins, for spcoll-gpu-bench's overlap column. */
#include "gpu_busy.h"

__global__ void spc_bench_busy_kernel(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

extern "C" cudaError_t spc_bench_busy(cudaStream_t s, long long cycles,
                                      int blocks) {
  void *args[] = {&cycles};
  return cudaLaunchKernel((const void *)spc_bench_busy_kernel, dim3(blocks),
                          dim3(32), args, 0, s);
}
