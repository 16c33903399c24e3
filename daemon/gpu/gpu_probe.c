#include "gpu_probe.h"

#include <stdio.h>

#ifdef SPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#ifdef SPC_HAVE_NCCL
#include <nccl.h>
#endif

static size_t probe_cuda(char *buf, size_t len) {
#ifdef SPC_HAVE_CUDA
  int rt = 0, n = 0;
  cudaError_t e = cudaRuntimeGetVersion(&rt);
  if (e == cudaSuccess)
    e = cudaGetDeviceCount(&n);
  int w = snprintf(buf, len, "cuda runtime %d.%d, %d device(s)%s%s%s",
                   rt / 1000, (rt % 1000) / 10, e == cudaSuccess ? n : 0,
                   e == cudaSuccess ? "" : " (",
                   e == cudaSuccess ? "" : cudaGetErrorString(e),
                   e == cudaSuccess ? "" : ")");
#else
  int w = snprintf(buf, len, "cuda: not built");
#endif
  return w > 0 && (size_t)w < len ? (size_t)w : len;
}

static void probe_nccl(char *buf, size_t len) {
#ifdef SPC_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess)
    snprintf(buf, len, "; nccl %d.%d.%d", v / 10000, (v % 10000) / 100,
             v % 100);
  else
    snprintf(buf, len, "; nccl: ncclGetVersion failed");
#else
  snprintf(buf, len, "; nccl: not built");
#endif
}

void spd_gpu_probe(char *buf, size_t len) {
  size_t used = probe_cuda(buf, len);
  if (used < len)
    probe_nccl(buf + used, len - used);
}
