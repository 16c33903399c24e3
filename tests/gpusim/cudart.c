/* libcudart.so.13 of the simulator: the runtime entry points spcoll uses,
 * compiled against the real cuda_runtime_api.h so every signature is the
 * real one. Each failing call sets the calling thread's last error, which
 * cudaGetLastError returns and clears (CUDA's rule); after a device fault
 * every call that needs the context returns the sticky error instead,
 * which nothing clears (R, sim_poison). */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define API __attribute__((visibility("default")))

static cudaError_t R(int e) { return (cudaError_t)sim_set_last(sim_sticky(e)); }

/* A launch's own result: the fault of the kernel it queued shows on later
 * calls, not on this one, however soon the worker runs it. */
static cudaError_t launched(int sticky_before, int rc) {
  return (cudaError_t)sim_set_last(sticky_before != SIM_OK ? sticky_before
                                                           : rc);
}

static int dev_ok(int d) { return d >= 0 && d < sim_cfg()->ndev; }

API const char *cudaGetErrorString(cudaError_t e) {
  switch ((int)e) {
  case SIM_OK:
    return "no error";
  case SIM_EINVAL:
    return "invalid argument";
  case SIM_ENOMEM:
    return "out of memory";
  case SIM_EDEVICE:
    return "invalid device ordinal";
  case SIM_EHANDLE:
    return "invalid resource handle";
  case SIM_ENOTREADY:
    return "device not ready";
  case SIM_EMAPFAIL:
    return "mapping of buffer object failed";
  case SIM_EPEERON:
    return "peer access is already enabled";
  case SIM_ENOPEER:
    return "peer access is not supported between these two devices";
  case SIM_ELAUNCH:
    return "unspecified launch failure";
  case SIM_ENOKERNEL:
    return "invalid device function";
  case SIM_ECONFIG:
    return "invalid configuration argument";
  case SIM_EILLEGAL:
    return "an illegal memory access was encountered";
  case SIM_EREGISTERED:
    return "part or all of the requested memory range is already mapped";
  case SIM_ENOTREGISTERED:
    return "pointer does not correspond to a registered memory region";
  case SIM_ENOTSUP:
    return "operation not supported";
  case 100:
    return "no CUDA-capable device is detected";
  default:
    return "unrecognized error code";
  }
}

API const char *cudaGetErrorName(cudaError_t e) {
  static __thread char buf[32];
  snprintf(buf, sizeof(buf), "cudaError_%d", (int)e);
  return buf;
}

API cudaError_t cudaGetLastError(void) { return (cudaError_t)sim_get_last(1); }
API cudaError_t cudaPeekAtLastError(void) {
  return (cudaError_t)sim_get_last(0);
}

API cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

API cudaError_t cudaDriverGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

API cudaError_t cudaGetDeviceCount(int *n) {
  *n = sim_cfg()->ndev;
  if (*n == 0)
    return R(100); /* cudaErrorNoDevice */
  return cudaSuccess;
}

API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
  if (!dev_ok(d))
    return R(SIM_EDEVICE);
  memset(p, 0, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "spcsim simulated GPU %d", d);
  sim_uuid(d, (uint8_t *)p->uuid.bytes);
  p->totalGlobalMem = sim_cfg()->mem_limit;
  p->multiProcessorCount = sim_cfg()->sms;
  p->major = 9;
  p->minor = 0;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 48 * 1024;
  p->pciDeviceID = d;
  p->unifiedAddressing = 1;
  p->canMapHostMemory = 1;
  return cudaSuccess;
}

API cudaError_t cudaSetDevice(int d) {
  if (!dev_ok(d))
    return R(SIM_EDEVICE);
  sim_ctx_touch(d); /* CUDA 12+ makes the primary context here */
  sim_set_cur_dev(d);
  return R(SIM_OK);
}

API cudaError_t cudaGetDevice(int *d) {
  *d = sim_cur_dev();
  return cudaSuccess;
}

/* Rule host-sync (sim_no_block): the calls that may block the host on
 * the GPU, flagged on the main thread of a program that must not block.
 * Documented: the synchronize calls; cudaMemcpy and cudaMemset, the
 * synchronous forms (CUDA's "API synchronization behavior": a copy
 * to or from host memory returns once done, a memset of pinned host
 * memory is fully synchronous; whether memory a client names is pinned
 * host or device memory is the client's choice, so every direction is
 * flagged). Widely known, not in the reference pages: cudaFree and
 * cudaFreeHost synchronize the device implicitly (CUDA's programming
 * guide contrasts cudaFree with the stream-ordered cudaFreeAsync;
 * cudaFree here waits, sim_free). Not flagged: cudaHostUnregister,
 * documented only to unmap the range and make it pageable again, and
 * the destroy calls, documented to return at once with work still
 * queued (cudaStreamDestroy, cudaEventDestroy). */
#define WAITS_FOR_GPU "waits for the GPU"

API cudaError_t cudaDeviceSynchronize(void) {
  sim_no_block("cudaDeviceSynchronize", WAITS_FOR_GPU);
  return R(sim_device_sync(sim_cur_dev()));
}

API cudaError_t cudaDeviceCanAccessPeer(int *ok, int d, int peer) {
  if (!dev_ok(d) || !dev_ok(peer))
    return R(SIM_EDEVICE);
  *ok = d != peer && sim_peer_possible(d, peer);
  return cudaSuccess;
}

API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  if (!dev_ok(peer) || flags != 0 || peer == sim_cur_dev())
    return R(SIM_EINVAL);
  return R(sim_peer_enable(sim_cur_dev(), peer));
}

/* ---- memory ------------------------------------------------------------- */

API cudaError_t cudaMalloc(void **p, size_t n) {
  return R(sim_malloc(sim_cur_dev(), n, p));
}

API cudaError_t cudaFree(void *p) {
  sim_no_block("cudaFree", "waits for the GPU (cudaFree synchronizes the "
               "device; cudaFreeAsync frees in stream order)");
  return R(sim_free(p, "cudaFree"));
}

API cudaError_t cudaMallocHost(void **p, size_t n) {
  return R(sim_host_alloc(n, p));
}

API cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
  (void)flags;
  return R(sim_host_alloc(n, p));
}

API cudaError_t cudaFreeHost(void *p) {
  sim_no_block("cudaFreeHost", "waits for the GPU (cudaFreeHost "
               "synchronizes the device)");
  return R(sim_host_free(p));
}

/* With unified addressing registered memory is mapped for every GPU
 * whatever the flags (cudaHostRegisterDefault included), at the same
 * address. I/O and read-only registrations are not simulated. */
API cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) {
  if (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped |
                          cudaHostRegisterIoMemory | cudaHostRegisterReadOnly))
    return R(SIM_EINVAL);
  if (flags & (cudaHostRegisterIoMemory | cudaHostRegisterReadOnly))
    return R(SIM_ENOTSUP);
  return R(sim_host_register(p, n));
}

/* Not a host-sync call: see cudaDeviceSynchronize. */
API cudaError_t cudaHostUnregister(void *p) {
  return R(sim_host_unregister(p));
}

API cudaError_t cudaHostGetDevicePointer(void **dev, void *host,
                                         unsigned flags) {
  if (flags != 0)
    return R(SIM_EINVAL);
  return R(sim_host_device_ptr(host, dev));
}

API cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
  return R(sim_malloc_pool(sim_stream_dev((sim_stream *)s), n, p));
}

static void free_pool_op(void *a, int *status) {
  (void)status;
  sim_free_pool_now(a);
}

API cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
  if (p == NULL)
    return cudaSuccess;
  /* Stream-ordered: the memory goes after the work queued before. */
  return R(sim_enqueue((sim_stream *)s, free_pool_op, p, 0));
}

API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int d) {
  if (!dev_ok(d))
    return R(SIM_EDEVICE);
  sim_ctx_touch(d); /* the pool is the device context's */
  *pool = (cudaMemPool_t)(uintptr_t)(0x1000 + d);
  return cudaSuccess;
}

static int pool_dev(cudaMemPool_t pool) {
  uintptr_t v = (uintptr_t)pool;
  return v >= 0x1000 && dev_ok((int)(v - 0x1000)) ? (int)(v - 0x1000) : -1;
}

API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool,
                                        enum cudaMemPoolAttr attr,
                                        void *value) {
  (void)attr, (void)value;
  return pool_dev(pool) < 0 ? R(SIM_EINVAL) : cudaSuccess;
}

API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool,
                                     const struct cudaMemAccessDesc *map,
                                     size_t count) {
  int pd = pool_dev(pool);
  if (pd < 0)
    return R(SIM_EINVAL);
  for (size_t i = 0; i < count; i++) {
    if (map[i].location.type != cudaMemLocationTypeDevice)
      return R(SIM_EINVAL);
    int rc = sim_pool_set_access(pd, map[i].location.id,
                                 map[i].flags != cudaMemAccessFlagsProtNone);
    if (rc != SIM_OK)
      return R(rc);
  }
  return cudaSuccess;
}

API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                           enum cudaMemcpyKind k) {
  (void)k;
  sim_no_block("cudaMemcpy", "waits for the GPU (a synchronous copy; "
               "cudaMemcpyAsync queues it on a stream)");
  return R(sim_memcpy(dst, src, n, NULL, 0, "cudaMemcpy"));
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                                enum cudaMemcpyKind k, cudaStream_t s) {
  (void)k;
  return R(sim_memcpy(dst, src, n, (sim_stream *)s, 1, "cudaMemcpyAsync"));
}

API cudaError_t cudaMemset(void *p, int v, size_t n) {
  sim_no_block("cudaMemset", "may wait for the GPU (a synchronous memset; "
               "cudaMemsetAsync queues it on a stream)");
  return R(sim_memset(p, v, n, NULL, 0, "cudaMemset"));
}

API cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  return R(sim_memset(p, v, n, (sim_stream *)s, 1, "cudaMemsetAsync"));
}

typedef int (*range_fn)(unsigned long long *, size_t *, unsigned long long);
int spcsim_cu_mem_get_address_range(unsigned long long *base, size_t *size,
                                    unsigned long long p);

/* The driver's entry points as the real runtime gives them: looked up in
 * the driver library (spcsim's libcuda.so.1), under the versioned name
 * cuda.h maps the plain one to from CUDA 12 on (cuStreamWaitValue64 ->
 * cuStreamWaitValue64_v2) where the driver has one; a name it lacks is
 * not found. (Under SPCSIM_NO_STREAM_MEM_OPS the memory operations exist
 * and answer "not supported", with their attributes 0, as on such a
 * GPU.) */
API cudaError_t cudaGetDriverEntryPointByVersion(
    const char *sym, void **fn, unsigned int version, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *status) {
  (void)flags;
  *fn = NULL;
  if (strcmp(sym, "cuMemGetAddressRange") == 0)
    *fn = (void *)spcsim_cu_mem_get_address_range;
  void *drv = *fn == NULL ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)
                          : NULL;
  if (drv != NULL) {
    char v2[128];
    snprintf(v2, sizeof(v2), "%s_v2", sym);
    if (version >= 12000)
      *fn = dlsym(drv, v2);
    if (*fn == NULL)
      *fn = dlsym(drv, sym);
    /* Not closed: what it returns must stay valid, as the runtime's own
     * handle on the driver does. */
  }
  if (status)
    *status = *fn != NULL ? cudaDriverEntryPointSuccess
                          : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

/* ---- IPC ------------------------------------------------------------------
 */

API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
  return R(sim_ipc_get(p, (sim_handle64 *)h, "cudaIpcGetMemHandle"));
}

API cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h,
                                     unsigned flags) {
  return R(sim_ipc_open((const sim_handle64 *)&h,
                        (flags & cudaIpcMemLazyEnablePeerAccess) != 0, p,
                        "cudaIpcOpenMemHandle"));
}

API cudaError_t cudaIpcCloseMemHandle(void *p) {
  return R(sim_ipc_close(p, "cudaIpcCloseMemHandle"));
}

API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t e) {
  return R(sim_event_ipc_get((sim_event *)e, (sim_handle64 *)h,
                             "cudaIpcGetEventHandle"));
}

API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *e, cudaIpcEventHandle_t h) {
  return R(sim_event_ipc_open((const sim_handle64 *)&h, (sim_event **)e,
                              "cudaIpcOpenEventHandle"));
}

/* ---- streams and events ---- */

API cudaError_t cudaStreamCreate(cudaStream_t *s) {
  return R(sim_stream_create(sim_cur_dev(), 0, (sim_stream **)s));
}

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  return R(sim_stream_create(sim_cur_dev(), flags, (sim_stream **)s));
}

API cudaError_t cudaStreamDestroy(cudaStream_t s) {
  return R(sim_stream_destroy((sim_stream *)s));
}

API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  sim_no_block("cudaStreamSynchronize", WAITS_FOR_GPU);
  return R(sim_stream_sync((sim_stream *)s));
}

API cudaError_t cudaStreamQuery(cudaStream_t s) {
  return R(sim_stream_query((sim_stream *)s));
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e,
                                    unsigned flags) {
  (void)flags;
  return R(sim_stream_wait((sim_stream *)s, (sim_event *)e));
}

typedef struct {
  cudaStreamCallback_t cb;
  void *arg;
} rt_cb;

static void rt_cb_run(void *s, int status, void *a) {
  rt_cb c = *(rt_cb *)a;
  free(a);
  c.cb((cudaStream_t)s, (cudaError_t)status, c.arg);
}

API cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb,
                                      void *arg, unsigned flags) {
  rt_cb *c = malloc(sizeof(*c));
  if (flags != 0 || c == NULL) {
    free(c);
    return R(SIM_EINVAL);
  }
  c->cb = cb;
  c->arg = arg;
  int rc = sim_stream_callback((sim_stream *)s, rt_cb_run, c);
  if (rc != SIM_OK)
    free(c);
  return R(rc);
}

typedef struct {
  cudaHostFn_t fn;
  void *arg;
} rt_host;

static void rt_host_run(void *a, int *status) {
  rt_host *h = a;
  if (*status == SIM_OK) /* CUDA skips host functions after an error */
    h->fn(h->arg);
}

API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg) {
  rt_host *h = malloc(sizeof(*h));
  if (h == NULL)
    return R(SIM_ENOMEM);
  h->fn = fn;
  h->arg = arg;
  int rc = sim_enqueue((sim_stream *)s, rt_host_run, h, 1);
  if (rc != SIM_OK) /* not queued: ours to free */
    free(h);
  return R(rc);
}

API cudaError_t cudaEventCreate(cudaEvent_t *e) {
  return R(
      sim_event_create(sim_cur_dev(), 0, (sim_event **)e, "cudaEventCreate"));
}

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  return R(sim_event_create(sim_cur_dev(), flags, (sim_event **)e,
                            "cudaEventCreateWithFlags"));
}

API cudaError_t cudaEventDestroy(cudaEvent_t e) {
  return R(sim_event_destroy((sim_event *)e, "cudaEventDestroy"));
}

API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  return R(sim_event_record((sim_event *)e, (sim_stream *)s));
}

API cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  sim_no_block("cudaEventSynchronize", WAITS_FOR_GPU);
  return R(sim_event_sync((sim_event *)e));
}

API cudaError_t cudaEventQuery(cudaEvent_t e) {
  return R(sim_event_query((sim_event *)e));
}

API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  return R(sim_event_elapsed(ms, (sim_event *)a, (sim_event *)b));
}

/* ---- kernels ---- */

API void **__cudaRegisterFatBinary(void *fatbin) {
  return sim_register_fatbin(fatbin);
}

API void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }

API void __cudaUnregisterFatBinary(void **h) { sim_unregister_fatbin(h); }

API void __cudaRegisterFunction(void **h, const char *host_fun,
                                char *device_fun, const char *device_name,
                                int thread_limit, uint3 *tid, uint3 *bid,
                                dim3 *bdim, dim3 *gdim, int *wsize) {
  (void)device_name, (void)thread_limit, (void)tid, (void)bid, (void)bdim;
  (void)gdim, (void)wsize;
  sim_register_function(h, host_fun, device_fun);
}

API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem,
                                         struct CUstream_st *s) {
  sim_push_config((sim_dim3){grid.x, grid.y, grid.z},
                  (sim_dim3){block.x, block.y, block.z}, shmem, s);
  return 0;
}

API cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block,
                                           size_t *shmem, void *s) {
  sim_dim3 g, b;
  int rc = sim_pop_config(&g, &b, shmem, (void **)s);
  if (rc == SIM_OK) {
    *grid = (dim3){g.x, g.y, g.z};
    *block = (dim3){b.x, b.y, b.z};
  }
  return R(rc);
}

API cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *fun) {
  return R(sim_get_kernel((void **)k, fun));
}

API cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block,
                                   void **args, size_t shmem, cudaStream_t s) {
  int before = sim_sticky(SIM_OK);
  return launched(before, sim_launch(k, 1, (sim_dim3){grid.x, grid.y, grid.z},
                      (sim_dim3){block.x, block.y, block.z}, args, shmem,
                      (sim_stream *)s));
}

API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block,
                                        void **args, size_t shmem,
                                        cudaStream_t s) {
  return __cudaLaunchKernel(k, grid, block, args, shmem, s);
}

API cudaError_t cudaLaunchKernel(const void *f, dim3 grid, dim3 block,
                                 void **args, size_t shmem, cudaStream_t s) {
  if (sim_launch_should_fail())
    return R(SIM_ECONFIG);
  int before = sim_sticky(SIM_OK);
  return launched(before, sim_launch(f, 0, (sim_dim3){grid.x, grid.y, grid.z},
                      (sim_dim3){block.x, block.y, block.z}, args, shmem,
                      (sim_stream *)s));
}

/* Interposed on libc's munmap for the programs that link the runtime. */
API int munmap(void *addr, size_t len) { return sim_munmap(addr, len); }
