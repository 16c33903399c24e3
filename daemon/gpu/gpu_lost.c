/* A device fault (an illegal address, a kernel's assert, a hardware
 * error) ends the CUDA context of the process it happens in: every later
 * call fails with the same error, nothing the context imported can be
 * closed (so the clients could not free the memory the daemon imported),
 * and only a new process gets a context back (CUDA's documentation of
 * these errors: "the process must be terminated and relaunched"). The
 * daemon then refuses device work naming the fault, and asks for a new
 * spcolld (spd_core_up.restart: reload.c, as systemctl reload does),
 * which takes the sockets and the clients over; this one drains and
 * exits, and CUDA takes back what its context held. Loop thread only. */
#include <stdio.h>
#include <string.h>

#include "gpu.h"

#ifdef SPC_HAVE_CUDA

int spd_gpu_error_sticky(int e) {
  switch ((cudaError_t)e) {
  case cudaErrorContained:
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchFailure:
  case cudaErrorTensorMemoryLeak:
  case cudaErrorMpsClientTerminated:
  case cudaErrorExternalDevice:
    return 1;
  default:
    return 0;
  }
}

/* The first GPU the daemon has a context on whose context answers a
 * query (which never waits) with a sticky error, and that error; -1 when
 * none does. The context is asked, not the failed job's error: a stream
 * may report a sticky-looking error without the context being lost (the
 * work an ncclCommAbort cut short, on spcsim). */
static int probe(spd_gpu *gpu, cudaError_t *e_p) {
  for (int d = 0; d < gpu->ndev; d++) {
    if (!gpu->dev[d].opened)
      continue;
    cudaError_t e = cudaSetDevice(d);
    if (e == cudaSuccess)
      e = cudaStreamQuery(NULL);
    if (spd_gpu_error_sticky(e)) {
      *e_p = e;
      return d;
    }
  }
  return -1;
}

/* Ask for a new daemon, naming the fault: again while none has taken
 * over and none is starting (the last start failed, or the new daemon
 * died first), at most once a second. */
static void restart(spd_gpu *gpu) {
  spd_ctx *ctx = gpu->ctx;
  uint64_t now = uv_hrtime();
  if (ctx->reload_started || ctx->draining || ctx->stopping ||
      (gpu->lost_asked_ns != 0 && now - gpu->lost_asked_ns < 1000000000u))
    return;
  gpu->lost_asked_ns = now;
  char why[sizeof(gpu->lost_why) + 32];
  snprintf(why, sizeof(why), "CUDA context lost: %s", gpu->lost_why);
  spd_up_restart(ctx, why);
}

int spd_gpu_lost_check(spd_gpu *gpu) {
  if (gpu->lost) {
    restart(gpu);
    return 1;
  }
  cudaError_t e = cudaSuccess;
  int dev = probe(gpu, &e);
  if (dev < 0)
    return 0;
  gpu->lost = 1;
  snprintf(gpu->lost_why, sizeof(gpu->lost_why), "%s (%s) on GPU %d",
           cudaGetErrorName(e), cudaGetErrorString(e), dev);
  spd_ctx *ctx = gpu->ctx;
  ctx->stats.gpu_contexts_lost++;
  SPD_ERROR(&ctx->log, "a device fault ended this daemon's CUDA context: "
            "%s; device work is refused until a new spcolld takes over",
            gpu->lost_why);
  restart(gpu);
  return 1;
}

void spd_gpu_lost_say(spd_gpu *gpu, char *msg, size_t len) {
  size_t n = strnlen(msg, len);
  if (spd_gpu_lost_check(gpu) && n < len)
    snprintf(msg + n, len - n, "; spcolld's CUDA context is lost (%s): a "
             "new spcolld takes over", gpu->lost_why);
}

#endif /* SPC_HAVE_CUDA */
