/* The CUDA shim for building the kernels (kernels/ .cu files) for the
 * host, in spcsim: the kernel source compiles unchanged with g++; each
 * CUDA thread of a block is a fiber of the stream's worker thread,
 * __syncthreads switches to the next one (sim_kernel.c), __shared__
 * variables are per worker thread (blocks of a launch run one after
 * another on it). Only what the project's kernels use is here. */
#ifndef SPCSIM_SHIM_CUDA_RUNTIME_H
#define SPCSIM_SHIM_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef dim3 uint3;
struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};

struct spcsim_tctx {
  unsigned tx, ty, tz, bx, by, bz, bdx, bdy, bdz, gdx, gdy, gdz;
};
struct spcsim_idx {
  unsigned x, y, z;
};

extern "C" {
extern __thread spcsim_tctx *spcsim_tc;
void spcsim_syncthreads(void);
}

#define threadIdx (*(const spcsim_idx *)&spcsim_tc->tx)
#define blockIdx (*(const spcsim_idx *)&spcsim_tc->bx)
#define blockDim (*(const spcsim_idx *)&spcsim_tc->bdx)
#define gridDim (*(const spcsim_idx *)&spcsim_tc->gdx)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* Shared by the fibers of a block; blocks run one at a time per thread. */
#define __shared__ static thread_local
#define __syncthreads() spcsim_syncthreads()

static inline float __uint_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}
static inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

/* The host launcher of the .cu is not part of the host build: renamed out
 * of the way, its <<<...>>> rewritten to SPCSIM_CHEVRONS(...) by the
 * build (mk/gpusim.mk). */
typedef int cudaError_t;
enum { cudaSuccess = 0 };
typedef struct CUstream_st *cudaStream_t;
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **,
                                           size_t, cudaStream_t) {
  return cudaSuccess;
}
static inline const char *cudaGetErrorString(cudaError_t) { return ""; }
#define spk_cuda_launch spcsim_host_build_unused_launch
#define SPCSIM_CHEVRONS(...)

#endif
