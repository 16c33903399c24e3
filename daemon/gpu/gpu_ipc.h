/* Device memory of clients, for buffer.c: a CUDA IPC handle opened once
 * per allocation (cached and reference counted) and mapped into the
 * daemon, or cuMem allocations sent as file descriptors (gpu_vmm.c); and the GPU state's teardown for the shutdown path. No CUDA
 * type here, so callers build the same with or without CUDA; without it
 * every open fails with SPK_EUNSUPPORTED. */
#ifndef SPD_GPU_IPC_H
#define SPD_GPU_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "status.h"

/* Open (or find open) the allocation of `handle` (hlen bytes) on the GPU
 * of `uuid` and hand out [offset, offset + size) of it: *base_p is the
 * daemon's device address of its first byte, *dev_p the daemon's ordinal
 * of the GPU, *mem_p the mapping to release with spd_gpu_ipc_close. The
 * range is checked against the allocation's size. */
int spd_gpu_ipc_open(spd_ctx *ctx, const uint8_t *handle, size_t hlen,
                     const uint8_t *uuid, size_t ulen, uint64_t offset,
                     uint64_t size, void **mem_p, uint8_t **base_p,
                     int *dev_p, spk_err *err);

/* A client's device memory shared as cuMem allocations: fds[i] exports
 * allocation i, of which sizes[i] bytes are mapped back to back; the
 * buffer is [offset, offset + size) of that range, on the GPU of uuid. */
typedef struct {
  const int *fds;
  const uint64_t *sizes;
  size_t n;
  const uint8_t *uuid;
  size_t ulen;
  uint64_t offset, size;
} spd_gpu_vmm_req;

/* Called on the loop thread once q is mapped (rc SPK_OK: mem, base and
 * dev as spd_gpu_ipc_open gives them, mem released with
 * spd_gpu_ipc_close) or failed (rc < 0, err says why). */
typedef void (*spd_gpu_vmm_done)(void *arg, int rc, void *mem, uint8_t *base,
                                 int dev, const spk_err *err);

/* Map q on libuv's thread pool (the driver's calls may wait for the GPU),
 * then call done. Takes q's descriptors: closed in every case. < 0 with
 * err, and done never called, when it cannot start. */
int spd_gpu_vmm_open(spd_ctx *ctx, const spd_gpu_vmm_req *q,
                     spd_gpu_vmm_done done, void *arg, spk_err *err);

/* Drop one reference; the last closes the mapping. */
void spd_gpu_ipc_close(spd_ctx *ctx, void *mem);

/* The same, and 1 when the close goes on after the call (a cuMem mapping
 * is unmapped on the thread pool): fn(arg) then follows on the loop
 * thread once it is done. 0: closed now, or still referenced; fn is not
 * called. */
typedef void (*spd_gpu_closed_fn)(void *arg);
int spd_gpu_ipc_close_then(spd_ctx *ctx, void *mem, spd_gpu_closed_fn fn,
                           void *arg);

/* At exit, once no op runs: NCCL communicators, streams, cached events
 * and mappings still open are released and ctx->gpu freed. A no-op when
 * no device buffer was ever registered. */
void spd_gpu_free(spd_ctx *ctx);

#endif
