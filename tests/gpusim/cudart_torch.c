/* Runtime entry points that PyPI's torch (libtorch_cuda and the nvidia-*
 * libraries it links) needs beyond what spcoll uses, so that torch starts
 * on the simulator: device and stream queries, priorities and capture
 * state, pointer attributes. Compiled against the real
 * cuda_runtime_api.h like cudart.c. What torch links but a test never
 * reaches (graphs, libraries, occupancy, ...) is in absent.c and fails
 * with cudaErrorNotSupported, naming the call. Kernels of torch's own
 * fatbins are not simulated: their launches fail with the simulator's
 * kernel-no-host-build rule. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

#define API __attribute__((visibility("default")))

static cudaError_t R(int e) { return (cudaError_t)sim_set_last(sim_sticky(e)); }

static int dev_ok(int d) { return d >= 0 && d < sim_cfg()->ndev; }

/* Nothing is ever captured: capture calls themselves are absent. */
API cudaError_t cudaStreamIsCapturing(cudaStream_t s,
                                      enum cudaStreamCaptureStatus *st) {
  (void)s;
  *st = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

API cudaError_t
cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  (void)mode;
  return cudaSuccess;
}

API cudaError_t cudaStreamGetCaptureInfo(
    cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id,
    cudaGraph_t *graph, const cudaGraphNode_t **deps,
    const cudaGraphEdgeData **edges, size_t *ndeps) {
  (void)s;
  *st = cudaStreamCaptureStatusNone;
  if (id)
    *id = 0;
  if (graph)
    *graph = NULL;
  if (deps)
    *deps = NULL;
  if (edges)
    *edges = NULL;
  if (ndeps)
    *ndeps = 0;
  return cudaSuccess;
}

/* One priority level: every stream runs on its own worker anyway. */
API cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least)
    *least = 0;
  if (greatest)
    *greatest = 0;
  return cudaSuccess;
}

API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags,
                                             int priority) {
  (void)priority;
  return cudaStreamCreateWithFlags(s, flags);
}

API cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority) {
  (void)s;
  *priority = 0;
  return cudaSuccess;
}

API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s,
                                         unsigned flags) {
  if (flags != 0) /* cudaEventRecordExternal: graphs only */
    return R(cudaErrorNotSupported);
  return cudaEventRecord(e, s);
}

API cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
  uint64_t used = sim_dev_used(sim_cur_dev());
  *total = sim_cfg()->mem_limit;
  *free_b = used < *total ? *total - used : 0;
  return R(SIM_OK);
}

API cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
  if (!dev_ok(d))
    return R(SIM_EDEVICE);
  switch (a) {
  case cudaDevAttrComputeCapabilityMajor:
    *v = 9;
    break;
  case cudaDevAttrMultiProcessorCount:
    *v = sim_cfg()->sms;
    break;
  case cudaDevAttrWarpSize:
    *v = 32;
    break;
  case cudaDevAttrMaxThreadsPerBlock:
    *v = 1024;
    break;
  case cudaDevAttrMaxSharedMemoryPerBlock:
    *v = 48 * 1024;
    break;
  case cudaDevAttrUnifiedAddressing:
  case cudaDevAttrCanMapHostMemory:
  case cudaDevAttrCanUseHostPointerForRegisteredMem:
  case cudaDevAttrHostRegisterSupported:
    *v = 1;
    break;
  default:
    *v = 0; /* features the simulator does not have */
    sim_attr_unmodelled("cudaDeviceGetAttribute", (int)a);
  }
  return cudaSuccess;
}

API cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
  if (!dev_ok(d))
    return R(SIM_EDEVICE);
  snprintf(id, (size_t)len, "0000:%02x:00.0", d + 1);
  return cudaSuccess;
}

API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a,
                                         const void *p) {
  sim_map m;
  memset(a, 0, sizeof(*a));
  a->device = -1;
  if (!sim_lookup(p, 1, &m)) {
    a->type = cudaMemoryTypeUnregistered; /* pageable host memory */
    return cudaSuccess;
  }
  int host = sim_is_host(m.kind);
  a->type = host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  a->device = host ? sim_cur_dev() : m.dev;
  a->devicePointer = (void *)p;
  if (host)
    a->hostPointer = (void *)p;
  return R(SIM_OK);
}

/* Device variables of torch's fatbins: their kernels never run here. */
API void __cudaRegisterVar(void **h, char *host_var, char *dev_addr,
                           const char *dev_name, int ext, size_t size,
                           int constant, int global) {
  (void)h, (void)host_var, (void)dev_addr, (void)dev_name, (void)ext;
  (void)size, (void)constant, (void)global;
}
