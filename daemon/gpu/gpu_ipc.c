/* Clients' device allocations, mapped with CUDA IPC: each handle opened
 * once (a second registration of the same allocation shares the mapping)
 * and closed when its last buffer goes, on release or client exit. */
#include "gpu_ipc.h"

/* What can be wrong with a registration whatever the build. */
static int args_check(size_t hlen, uint64_t size, spk_err *err) {
  if (hlen != 64)
    return spk_err_set(err, SPK_EINVAL, "ipc_handle has %zu bytes, a CUDA "
                       "IPC memory handle has 64", hlen);
  if (size == 0)
    return spk_err_set(err, SPK_EINVAL, "device buffer of 0 bytes");
  return SPK_OK;
}

#ifdef SPC_HAVE_CUDA

#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

_Static_assert(SPD_GPU_HANDLE == 64, "args_check knows the handle size");

typedef CUresult (*mem_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

/* The bytes of the allocation from base on, as the driver knows it; 0
 * when it cannot tell (then the client's size is taken on trust, said
 * once in the log). */
static uint64_t alloc_size(spd_gpu *gpu, uint8_t *base) {
  char why[200] = "";
  mem_range_fn fn = (mem_range_fn)spd_gpu_driver_entry("cuMemGetAddressRange",
                                                      why, sizeof(why));
  CUdeviceptr start = 0;
  size_t size = 0;
  CUresult r = fn ? fn(&start, &size, (CUdeviceptr)(uintptr_t)base)
                  : CUDA_ERROR_NOT_SUPPORTED;
  if (r == CUDA_SUCCESS && start <= (CUdeviceptr)(uintptr_t)base)
    return size - ((CUdeviceptr)(uintptr_t)base - start);
  if (!gpu->range_warned)
    SPD_WARN(&gpu->ctx->log, "cannot bound-check device buffers: "
             "cuMemGetAddressRange on an IPC mapping gave %d %s; sizes "
             "clients give are trusted", (int)r, why);
  gpu->range_warned = 1;
  return 0;
}

static int mem_open(spd_gpu *gpu, const uint8_t *handle, int dev,
                    spd_gpu_mem **mem_p, spk_err *err) {
  for (spd_gpu_mem *m = gpu->mems; m != NULL; m = m->next)
    if (m->vmm == NULL && m->dev == dev &&
        memcmp(m->handle, handle, SPD_GPU_HANDLE) == 0) {
      *mem_p = m;
      return SPK_OK;
    }
  spd_gpu_mem *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a mapping record "
                       "failed");
  int rc = spd_gpu_dev_open(gpu, dev, err);
  if (rc < 0) {
    free(m);
    return rc;
  }
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof(h));
  void *p = NULL;
  /* Lazy peer access: a GPU mover on another device may read it. */
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    free(m);
    return spk_err_set(err, SPK_EDEVICE, "cudaIpcOpenMemHandle on GPU %d: "
                       "%s", dev, cudaGetErrorString(e));
  }
  memcpy(m->handle, handle, SPD_GPU_HANDLE);
  m->dev = dev;
  m->base = p;
  m->size = alloc_size(gpu, p);
  m->next = gpu->mems;
  gpu->mems = m;
  SPD_DEBUG(&gpu->ctx->log, "GPU %d: opened an IPC allocation of %llu "
            "bytes at %p", dev, (unsigned long long)m->size, p);
  *mem_p = m;
  return SPK_OK;
}

/* Close m; a cuMem mapping's unmap tells fn(arg) (when not NULL) once it
 * is done: 1 then, else 0. */
static int mem_close_then(spd_gpu *gpu, spd_gpu_mem *m, spd_gpu_closed_fn fn,
                          void *arg) {
  spd_gpu_events_drop_mem(gpu, m);
  for (spd_gpu_mem **p = &gpu->mems; *p != NULL; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  if (m->vmm != NULL) {
    spd_gpu_vmm_close(m, fn, arg);
    if (!m->orphan)
      free(m);
    return fn != NULL;
  }
  spk_err err;
  cudaError_t e = cudaSuccess;
  if (spd_gpu_set_device(m->dev, &err) == SPK_OK)
    e = cudaIpcCloseMemHandle(m->base);
  if (e != cudaSuccess)
    SPD_ERROR(&gpu->ctx->log, "cudaIpcCloseMemHandle(%p) on GPU %d: %s",
              (void *)m->base, m->dev, cudaGetErrorString(e));
  if (!m->orphan)
    free(m);
  return 0;
}

static void mem_close(spd_gpu *gpu, spd_gpu_mem *m) {
  (void)mem_close_then(gpu, m, NULL, NULL);
}

int spd_gpu_ipc_open(spd_ctx *ctx, const uint8_t *handle, size_t hlen,
                     const uint8_t *uuid, size_t ulen, uint64_t offset,
                     uint64_t size, void **mem_p, uint8_t **base_p,
                     int *dev_p, spk_err *err) {
  spd_gpu *gpu;
  int dev;
  spd_gpu_mem *m;
  int rc = args_check(hlen, size, err);
  if (rc == SPK_OK)
    rc = spd_gpu_get(ctx, &gpu, err);
  if (rc == SPK_OK)
    rc = spd_gpu_dev_of_uuid(gpu, uuid, ulen, &dev, err);
  if (rc == SPK_OK)
    rc = mem_open(gpu, handle, dev, &m, err);
  if (rc < 0)
    return rc;
  if (m->size != 0 && (offset > m->size || size > m->size - offset)) {
    rc = spk_err_set(err, SPK_EINVAL, "device buffer (offset %llu, %llu "
                     "bytes) reaches past its allocation of %llu bytes",
                     (unsigned long long)offset, (unsigned long long)size,
                     (unsigned long long)m->size);
    if (m->refs == 0)
      mem_close(gpu, m);
    return rc;
  }
  m->refs++;
  *mem_p = m;
  *base_p = m->base + offset;
  *dev_p = dev;
  return SPK_OK;
}

void spd_gpu_ipc_close(spd_ctx *ctx, void *mem) {
  (void)spd_gpu_ipc_close_then(ctx, mem, NULL, NULL);
}

int spd_gpu_ipc_close_then(spd_ctx *ctx, void *mem, spd_gpu_closed_fn fn,
                           void *arg) {
  spd_gpu_mem *m = mem;
  if (m->orphan) { /* closed at exit: the GPU state may be gone */
    if (--m->refs == 0)
      free(m);
    return 0;
  }
  return --m->refs == 0 ? mem_close_then(ctx->gpu, m, fn, arg) : 0;
}

void spd_gpu_free(spd_ctx *ctx) {
  spd_gpu *gpu = ctx->gpu;
  if (gpu == NULL)
    return;
  while (gpu->mems != NULL) {
    spd_gpu_mem *m = gpu->mems;
    SPD_WARN(&ctx->log, "GPU %d: %s mapping still open at exit (%d "
             "buffers): closing it", m->dev, m->vmm ? "a cuMem" : "an IPC",
             m->refs);
    /* Closed now; its struct goes with the last buffer on it, which an
     * op may release after this (spd_gpu_ipc_close_then). */
    m->orphan = m->refs > 0;
    mem_close(gpu, m);
  }
  spd_gpu_desc_cache_free(gpu);
  spd_gpu_state_free(gpu);
  ctx->gpu = NULL;
}

#else /* !SPC_HAVE_CUDA */

int spd_gpu_ipc_open(spd_ctx *ctx, const uint8_t *handle, size_t hlen,
                     const uint8_t *uuid, size_t ulen, uint64_t offset,
                     uint64_t size, void **mem_p, uint8_t **base_p,
                     int *dev_p, spk_err *err) {
  (void)ctx, (void)handle, (void)uuid, (void)ulen, (void)offset;
  (void)mem_p, (void)base_p, (void)dev_p;
  int rc = args_check(hlen, size, err);
  if (rc < 0)
    return rc;
  return spk_err_set(err, SPK_EUNSUPPORTED, "spcolld was built without CUDA "
                     "(no nvcc under CUDA_HOME at build time): no device "
                     "buffers");
}

void spd_gpu_ipc_close(spd_ctx *ctx, void *mem) {
  (void)ctx, (void)mem;
}

int spd_gpu_ipc_close_then(spd_ctx *ctx, void *mem, spd_gpu_closed_fn fn,
                           void *arg) {
  (void)ctx, (void)mem, (void)fn, (void)arg;
  return 0;
}

void spd_gpu_free(spd_ctx *ctx) {
  (void)ctx;
}

#endif
