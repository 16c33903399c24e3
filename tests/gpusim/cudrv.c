/* libcuda.so.1 of the simulator: the driver entry points libspclient
 * loads (client/client_gpu_cu.h), compiled against the real cuda.h (which
 * maps the plain names to the _v2 symbols the client looks up). A context
 * is its device's primary context; push/pop keep a per-thread stack. */
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cudrv.h"
#include "sim.h"

#define API __attribute__((visibility("default")))

/* The driver's code for a core result; after a device fault, the sticky
 * error whatever the call did (sim_poison). */
static CUresult C(int e) {
  switch (sim_sticky(e)) {
  case SIM_OK:
    return CUDA_SUCCESS;
  case SIM_ENOMEM:
    return CUDA_ERROR_OUT_OF_MEMORY;
  case SIM_EDEVICE:
    return CUDA_ERROR_INVALID_DEVICE;
  case SIM_EHANDLE:
    return CUDA_ERROR_INVALID_HANDLE;
  case SIM_ENOTREADY:
    return CUDA_ERROR_NOT_READY;
  case SIM_EMAPFAIL:
    return CUDA_ERROR_MAP_FAILED;
  case SIM_EILLEGAL:
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  case SIM_EREGISTERED:
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  case SIM_ENOTREGISTERED:
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  case SIM_ENOTSUP:
    return CUDA_ERROR_NOT_SUPPORTED;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

/* C, for cudrv_vmm.c. */
CUresult cudrv_result(int e) { return C(e); }

static CUcontext ctx_of(int d) { return (CUcontext)(uintptr_t)(0x2000 + d); }

static int dev_of_ctx(CUcontext c) {
  uintptr_t v = (uintptr_t)c;
  return v >= 0x2000 && v < 0x2000 + (uintptr_t)sim_cfg()->ndev
             ? (int)(v - 0x2000)
             : -1;
}

static __thread int ctx_stack[16];
static __thread int ctx_n;
static int retained[SIM_MAX_DEV];

/* Primary contexts retained and never released: part of the leak report. */
static void ctx_leaks(void) {
  for (int d = 0; d < SIM_MAX_DEV; d++)
    if (__atomic_load_n(&retained[d], __ATOMIC_ACQUIRE) > 0)
      sim_leak_note("GPU %d's primary context retained %d more time(s) "
                    "than released", d, retained[d]);
}

__attribute__((constructor)) static void cudrv_init(void) {
  atexit(ctx_leaks);
}

API CUresult cuInit(unsigned flags) {
  return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult r, const char **s) {
  switch (r) {
  case CUDA_SUCCESS:
    *s = "no error";
    break;
  case CUDA_ERROR_INVALID_VALUE:
    *s = "invalid argument";
    break;
  case CUDA_ERROR_OUT_OF_MEMORY:
    *s = "out of memory";
    break;
  case CUDA_ERROR_INVALID_DEVICE:
    *s = "invalid device ordinal";
    break;
  case CUDA_ERROR_INVALID_HANDLE:
    *s = "invalid resource handle";
    break;
  case CUDA_ERROR_NOT_READY:
    *s = "device not ready";
    break;
  case CUDA_ERROR_MAP_FAILED:
    *s = "mapping of buffer object failed";
    break;
  case CUDA_ERROR_ILLEGAL_ADDRESS:
    *s = "an illegal memory access was encountered";
    break;
  case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
    *s = "part or all of the requested memory range is already mapped";
    break;
  case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
    *s = "pointer does not correspond to a registered memory region";
    break;
  case CUDA_ERROR_NOT_SUPPORTED:
    *s = "operation not supported";
    break;
  default:
    *s = "unknown error";
    break;
  }
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n) {
  *n = sim_cfg()->ndev;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal < 0 || ordinal >= sim_cfg()->ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
  if (d < 0 || d >= sim_cfg()->ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  sim_uuid(d, (uint8_t *)u->bytes);
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (d < 0 || d >= sim_cfg()->ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  __atomic_add_fetch(&retained[d], 1, __ATOMIC_ACQ_REL);
  sim_ctx_touch(d);
  *c = ctx_of(d);
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  if (d < 0 || d >= sim_cfg()->ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  if (__atomic_sub_fetch(&retained[d], 1, __ATOMIC_ACQ_REL) < 0) {
    sim_violation("ctx-release-unretained", "cuDevicePrimaryCtxRelease",
                  "GPU %d's primary context released more often than "
                  "retained",
                  d);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent(CUcontext c) {
  int d = dev_of_ctx(c);
  if (d < 0 || ctx_n >= 16)
    return CUDA_ERROR_INVALID_CONTEXT;
  ctx_stack[ctx_n++] = sim_cur_dev();
  sim_set_cur_dev(d);
  return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent(CUcontext *c) {
  if (ctx_n == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (c)
    *c = ctx_of(sim_cur_dev());
  sim_set_cur_dev(ctx_stack[--ctx_n]);
  return CUDA_SUCCESS;
}

/* For PyPI torch (see cudart_torch.c): the current context is the
 * current device's primary context, and every primary context reports
 * itself active (the runtime part opens them without the driver's
 * retain count). */
API CUresult cuCtxGetCurrent(CUcontext *c) {
  *c = ctx_of(sim_cur_dev());
  return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext c) {
  if (c == NULL)
    return CUDA_SUCCESS;
  int d = dev_of_ctx(c);
  if (d < 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  sim_set_cur_dev(d);
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags,
                                        int *active) {
  if (d < 0 || d >= sim_cfg()->ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  if (flags)
    *flags = 0;
  *active = 1;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  if (d < 0 || d >= sim_cfg()->ndev)
    return CUDA_ERROR_INVALID_DEVICE;
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *v = 9;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *v = sim_cfg()->sms;
    break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
  case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
  case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    *v = 1;
    break;
  /* Stream memory operations, 64-bit ones and NOR waits: the deprecated
   * v1 API's attributes and the current ones, unless the GPUs are said to
   * lack them (SPCSIM_NO_STREAM_MEM_OPS, SIM_MEMOPS_*). */
  case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
  case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
  case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
    *v = sim_cfg()->no_memops == SIM_MEMOPS_ALL;
    break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
  case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
    *v = sim_cfg()->no_memops != SIM_MEMOPS_NONE;
    break;
  /* Virtual memory management (sim_vmm.c), shareable as file
   * descriptors; not as fabric handles (no IMEX channels here). */
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    *v = 1;
    break;
  default:
    *v = 0; /* features the simulator does not have (multicast, fabric) */
    sim_attr_unmodelled("cuDeviceGetAttribute", (int)a);
  }
  return CUDA_SUCCESS;
}

/* Rule host-sync (sim_no_block) on the driver's blocking calls, as on
 * the runtime's (cudart.c, cudaDeviceSynchronize, says which and why). */
API CUresult cuCtxSynchronize(void) {
  sim_no_block("cuCtxSynchronize", "waits for the GPU");
  return C(sim_device_sync(sim_cur_dev()));
}

/* An address reserved (cuMemAddressReserve) with nothing mapped there:
 * not mapped, in the reservation's range; no other attribute. */
static CUresult unmapped_attribute(void *data, CUpointer_attribute attr,
                                   const void *p) {
  uint8_t *base;
  uint64_t size;
  if (sim_vmm_reservation(p, &base, &size) != SIM_OK)
    return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_MAPPED:
    *(unsigned *)data = 0;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    *(size_t *)data = size;
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

/* Access of the current context's GPU (CUmemAccess_flags values). */
static unsigned access_flags(const sim_map *m, const void *p) {
  int flags = 0;
  if (m->kind != SIM_M_VMM)
    return sim_accessible(m, sim_cur_dev()) ? 3 : 0;
  return sim_vmm_get_access(p, sim_cur_dev(), &flags) == SIM_OK ? flags : 0;
}

/* Where memory sits and how it may be shared. Mapping: the cuMemMap
 * mapping for cuMem memory, the allocation for the others; range: the
 * reservation for cuMem memory (CUDA: "not necessarily the address of
 * the mapped region"). The memory block is the physical allocation: one
 * id for every mapping of it. Booleans are unsigned ints, as IS_MANAGED
 * is (the callers in this tree pass one). */
static CUresult mapping_attribute(void *data, CUpointer_attribute attr,
                                  const sim_map *m, const void *p) {
  int vmm = m->kind == SIM_M_VMM;
  uint8_t *base = m->ptr;
  uint64_t size = m->size;
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    *(unsigned *)data = m->kind == SIM_M_DEVICE;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPED:
    *(unsigned *)data = 1;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    *(void **)data = m->ptr;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    *(size_t *)data = m->size;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    if (vmm)
      (void)sim_vmm_reservation(p, &base, &size);
    if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
      *(size_t *)data = size;
    else
      *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    *(unsigned *)data = vmm ? (unsigned)m->handle_types : 0;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    *(unsigned long long *)data = vmm ? m->block_id : m->buffer_id;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    *(unsigned *)data = access_flags(m, p);
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

/* cuMem (VMM) memory is device memory of its allocation's GPU that
 * belongs to no context (the CONTEXT attribute fails, as CUDA's does);
 * its buffer id is the mapping's. */
API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr,
                                   CUdeviceptr p) {
  sim_map m;
  const void *a = (const void *)(uintptr_t)p;
  if (sim_sticky(SIM_OK) != SIM_OK)
    return C(SIM_OK);
  if (data == NULL)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_lookup(a, 1, &m))
    return unmapped_attribute(data, attr, a);
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data =
        m.kind == SIM_M_PINNED ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    *(unsigned *)data = 0;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = m.dev;
    return m.dev >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    if (m.dev < 0 || m.kind == SIM_M_VMM)
      return CUDA_ERROR_INVALID_VALUE;
    *(CUcontext *)data = ctx_of(m.dev);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    *(unsigned long long *)data = m.buffer_id;
    return CUDA_SUCCESS;
  default:
    return mapping_attribute(data, attr, &m, a);
  }
}

int spcsim_cu_mem_get_address_range(unsigned long long *base, size_t *size,
                                    unsigned long long p);

API CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size,
                                  CUdeviceptr p) {
  unsigned long long b = 0;
  int r = spcsim_cu_mem_get_address_range(&b, size, p);
  if (base)
    *base = b;
  return C(r == 0 ? SIM_OK : SIM_EINVAL);
}

API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
  return C(sim_ipc_get((const void *)(uintptr_t)p, (sim_handle64 *)h,
                       "cuIpcGetMemHandle"));
}

API CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
  void *v = NULL;
  int rc = sim_malloc(sim_cur_dev(), n, &v);
  if (rc == SIM_OK)
    *p = (CUdeviceptr)(uintptr_t)v;
  return C(rc);
}

API CUresult cuMemFree(CUdeviceptr p) {
  sim_no_block("cuMemFree", "waits for the GPU (cuMemFree synchronizes the "
               "device; cuMemFreeAsync frees in stream order)");
  return C(sim_free((void *)(uintptr_t)p, "cuMemFree"));
}

API CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
  sim_no_block("cuMemsetD8", "may wait for the GPU (a synchronous memset; "
               "cuMemsetD8Async queues it on a stream)");
  return C(sim_memset((void *)(uintptr_t)p, v, n, NULL, 1, "cuMemsetD8"));
}

API CUresult cuEventCreate(CUevent *e, unsigned flags) {
  return C(
      sim_event_create(sim_cur_dev(), flags, (sim_event **)e, "cuEventCreate"));
}

API CUresult cuEventDestroy(CUevent e) {
  return C(sim_event_destroy((sim_event *)e, "cuEventDestroy"));
}

API CUresult cuEventRecord(CUevent e, CUstream s) {
  return C(sim_event_record((sim_event *)e, (sim_stream *)s));
}

API CUresult cuEventSynchronize(CUevent e) {
  sim_no_block("cuEventSynchronize", "waits for the GPU");
  return C(sim_event_sync((sim_event *)e));
}

API CUresult cuEventQuery(CUevent e) {
  return C(sim_event_query((sim_event *)e));
}

API CUresult cuStreamQuery(CUstream s) {
  return C(sim_stream_query((sim_stream *)s));
}

API CUresult cuStreamSynchronize(CUstream s) {
  sim_no_block("cuStreamSynchronize", "waits for the stream's work");
  return C(sim_stream_sync((sim_stream *)s));
}

/* ---- modules (libspclient's symmetric buffers) ----------------------------
 * A module is any image: its functions are the kernels with a host build
 * (kernels_host.cc), found by their device names. */

#define SIM_MODULE ((CUmodule)(uintptr_t)0x4d4f44) /* one handle for all */

API CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  if (m == NULL || image == NULL)
    return C(SIM_EINVAL);
  *m = SIM_MODULE;
  return CUDA_SUCCESS;
}

API CUresult cuModuleUnload(CUmodule m) {
  return C(m == SIM_MODULE ? SIM_OK : SIM_EHANDLE);
}

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  if (m != SIM_MODULE || f == NULL || name == NULL)
    return C(SIM_EHANDLE);
  void *k = NULL;
  int rc = sim_kernel_named(&k, name);
  if (rc == SIM_ENOKERNEL)
    return CUDA_ERROR_NOT_FOUND;
  if (rc == SIM_OK)
    *f = (CUfunction)k;
  return C(rc);
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy,
                            unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, CUstream s, void **params,
                            void **extra) {
  if (f == NULL || extra != NULL)
    return C(SIM_EINVAL);
  return C(sim_launch(f, 1, (sim_dim3){gx, gy, gz}, (sim_dim3){bx, by, bz},
                      params, shmem, (sim_stream *)s));
}

/* ---- copies and CUDA IPC of memory (libspclient's symmetric buffers) ---- */

API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
                           CUstream s) {
  return C(sim_memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n,
                      (sim_stream *)s, 1, "cuMemcpyAsync"));
}

/* Device-to-device only, as libspclient asks (no arrays, no host). */
API CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s) {
  if (p == NULL || p->srcMemoryType != CU_MEMORYTYPE_DEVICE ||
      p->dstMemoryType != CU_MEMORYTYPE_DEVICE)
    return C(SIM_ENOTSUP);
  uint8_t *dst = (uint8_t *)(uintptr_t)p->dstDevice + p->dstXInBytes +
                 p->dstY * p->dstPitch;
  const uint8_t *src = (const uint8_t *)(uintptr_t)p->srcDevice +
                       p->srcXInBytes + p->srcY * p->srcPitch;
  return C(sim_memcpy2d(dst, p->dstPitch, src, p->srcPitch, p->WidthInBytes,
                        p->Height, (sim_stream *)s, "cuMemcpy2DAsync"));
}

API CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h,
                                unsigned flags) {
  void *v = NULL;
  int rc = sim_ipc_open((const sim_handle64 *)&h,
                        (flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0, &v,
                        "cuIpcOpenMemHandle");
  if (rc == SIM_OK)
    *p = (CUdeviceptr)(uintptr_t)v;
  return C(rc);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  return C(sim_ipc_close((void *)(uintptr_t)p, "cuIpcCloseMemHandle"));
}

API CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e) {
  return C(sim_event_ipc_get((sim_event *)e, (sim_handle64 *)h,
                             "cuIpcGetEventHandle"));
}

API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  (void)flags;
  return C(sim_stream_wait((sim_stream *)s, (sim_event *)e));
}

/* ---- host memory the GPUs reach --------------------------------------- */

/* Flags beyond PORTABLE and DEVICEMAP (I/O memory, read-only) are not
 * simulated; with unified addressing every registration is mapped. */
API CUresult cuMemHostRegister(void *p, size_t n, unsigned flags) {
  if (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE |
                          CU_MEMHOSTREGISTER_DEVICEMAP |
                          CU_MEMHOSTREGISTER_IOMEMORY |
                          CU_MEMHOSTREGISTER_READ_ONLY))
    return C(SIM_EINVAL);
  if (flags & (CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY))
    return C(SIM_ENOTSUP);
  return C(sim_host_register(p, n));
}

/* Not a host-sync call (cudart.c's cudaHostUnregister says why). */
API CUresult cuMemHostUnregister(void *p) {
  return C(sim_host_unregister(p));
}

API CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p,
                                       unsigned flags) {
  void *v = NULL;
  int rc = flags != 0 ? SIM_EINVAL : sim_host_device_ptr(p, &v);
  if (rc == SIM_OK)
    *d = (CUdeviceptr)(uintptr_t)v;
  return C(rc);
}

API CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
  if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                          CU_MEMHOSTALLOC_WRITECOMBINED))
    return C(SIM_EINVAL);
  return C(sim_host_alloc(n, p));
}

API CUresult cuMemAllocHost(void **p, size_t n) {
  return C(sim_host_alloc(n, p));
}

API CUresult cuMemFreeHost(void *p) {
  sim_no_block("cuMemFreeHost", "waits for the GPU (cuMemFreeHost "
               "synchronizes the device)");
  return C(sim_host_free(p));
}

/* ---- stream memory operations (sim_memop.c) ------------------------------
 * The names are cuda.h's, which maps them to the _v2 entry points; the
 * plain (v1) names torch looks up are in absent.c. */

static CUresult memop1(CUstream s, int kind, int size, CUdeviceptr addr,
                       uint64_t value, unsigned flags, const char *call) {
  sim_memop o = {kind, size, (uint64_t)addr, value, flags};
  return C(sim_memops((sim_stream *)s, &o, 1, call));
}

API CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr,
                                  cuuint32_t value, unsigned flags) {
  return memop1(s, SIM_MEMOP_WRITE, 4, addr, value, flags,
                "cuStreamWriteValue32");
}

API CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr,
                                  cuuint64_t value, unsigned flags) {
  return memop1(s, SIM_MEMOP_WRITE, 8, addr, value, flags,
                "cuStreamWriteValue64");
}

API CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr,
                                 cuuint32_t value, unsigned flags) {
  return memop1(s, SIM_MEMOP_WAIT, 4, addr, value, flags,
                "cuStreamWaitValue32");
}

API CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr,
                                 cuuint64_t value, unsigned flags) {
  return memop1(s, SIM_MEMOP_WAIT, 8, addr, value, flags,
                "cuStreamWaitValue64");
}

/* One batch entry as a core op; 0 for a barrier (the stream's ops run one
 * after another, fenced: nothing to add), -1 (with *rc_p) for what the
 * simulated GPU refuses or lacks. */
static int batch_op(const CUstreamBatchMemOpParams *p, sim_memop *o,
                    int *rc_p) {
  switch (p->operation) {
  case CU_STREAM_MEM_OP_WAIT_VALUE_32:
  case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
    int is64 = p->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
    *o = (sim_memop){SIM_MEMOP_WAIT, is64 ? 8 : 4, p->waitValue.address,
                     is64 ? p->waitValue.value64 : p->waitValue.value,
                     p->waitValue.flags};
    return 1;
  }
  case CU_STREAM_MEM_OP_WRITE_VALUE_32:
  case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
    int is64 = p->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
    *o = (sim_memop){SIM_MEMOP_WRITE, is64 ? 8 : 4, p->writeValue.address,
                     is64 ? p->writeValue.value64 : p->writeValue.value,
                     p->writeValue.flags};
    return 1;
  }
  case CU_STREAM_MEM_OP_BARRIER:
    if (p->memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_SYS ||
        p->memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_GPU)
      return 0;
    *rc_p = SIM_EINVAL;
    return -1;
  case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES: /* CAN_FLUSH_REMOTE_WRITES 0 */
    *rc_p = SIM_ENOTSUP;
    return -1;
  default:
    *rc_p = SIM_EINVAL;
    return -1;
  }
}

/* The operations in order, all checked before any is queued. */
API CUresult cuStreamBatchMemOp(CUstream s, unsigned count,
                                CUstreamBatchMemOpParams *params,
                                unsigned flags) {
  sim_memop ops[256];
  int n = 0, rc = SIM_OK;
  if (count >= 256 || flags != 0 || (count > 0 && params == NULL))
    return C(SIM_EINVAL);
  for (unsigned i = 0; i < count; i++) {
    int k = batch_op(&params[i], &ops[n], &rc);
    if (k < 0)
      return C(rc);
    n += k;
  }
  return C(sim_memops((sim_stream *)s, ops, n, "cuStreamBatchMemOp"));
}
