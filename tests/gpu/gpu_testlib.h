/* What the GPU suites share: the skip when there is no GPU (decided in a
 * child process, because CUDA must not be initialized before the suites
 * fork their rank processes), device memory helpers over the CUDA runtime,
 * and the daemon's stats counters. */
#ifndef GPT_GPU_TESTLIB_H
#define GPT_GPU_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"

/* Number of CUDA devices, found in a child process; 0 with why filled
 * when there is none (or no CUDA in this build). */
int gpt_gpu_count(char *why, size_t len);

/* Print "skipped: no GPU (why)" and exit 77 unless a GPU is there;
 * returns the device count. */
int gpt_require_gpu(void);

/* A counter of the daemon's stats (text format, section "counters"),
 * through its stats socket; -1 when it cannot be read. */
long long gpt_stat(const spt_daemon *d, const char *name);

/* The daemon's log on stderr when SPCOLL_GPU_LOGS=1 (the GPU run keeps
 * them), before it is stopped and removed. */
void gpt_keep_log(const spt_daemon *d);

/* Start d with extra arguments, run fn on world ranks (guard_s seconds
 * at most), keep or dump its log, stop it; a check failure when it did not
 * start or stop cleanly or a rank failed. */
void gpt_run_on_daemon(spt_daemon *d, const char *const *extra, int world,
                       spt_rank_fn fn, void *arg, int guard_s);

#ifdef SPC_HAVE_CUDA
#include <cuda_runtime.h>

/* Fail the rank with the call named when a CUDA call fails. */
#define GPT_CUDA(call)                                                       \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,          \
              cudaGetErrorString(e_));                                       \
      return 1;                                                              \
    }                                                                        \
  } while (0)

/* A stream held at a gate before anything else runs on it: a host
 * function that waits until the process opens the gate. */
typedef struct {
  cudaStream_t s;
  volatile int gate;
} gpt_held;
/* A new non-blocking stream, held. 0, or 1 having said why. */
int gpt_hold(gpt_held *h);
/* The same with cudaStreamCreateWithFlags' flags (0: a blocking stream,
 * which the legacy default stream waits for). */
int gpt_hold_flags(gpt_held *h, unsigned flags);
void gpt_open_gate(gpt_held *h);

/* Device memory made as torch's expandable segments make it: an address
 * range reserved, then `bytes` of cuMem allocations of `chunk` bytes each
 * (multiples of 2 MiB) created exportable as POSIX file descriptors,
 * mapped back to back and made accessible from dev. Through the driver's
 * entry points (the tests link libcudart alone). 0, or 1 having said why
 * on stderr. */
int gpt_vmm_alloc(int dev, size_t bytes, size_t chunk, void **p);
/* The same with the allocations' requestedHandleTypes given (a
 * CUmemAllocationHandleType mask; 0: not exportable). */
int gpt_vmm_alloc_as(int dev, size_t bytes, size_t chunk, int handle_types,
                     void **p);
/* Unmap, release and unreserve what gpt_vmm_alloc made. */
int gpt_vmm_free(void *p, size_t bytes, size_t chunk);
#endif

#endif
