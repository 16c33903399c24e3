/* The few CUDA driver API types, constants and entry points libspclient
 * uses, declared here (with the values of CUDA's cuda.h, checked against
 * it by tests/unit/unit_client_cuda_abi.c) so the library builds without
 * CUDA and loads libcuda.so.1 only when a device call needs it. */
#ifndef SPC_CLIENT_GPU_CU_H
#define SPC_CLIENT_GPU_CU_H

#include <stddef.h>

typedef int spc__CUresult;
typedef int spc__CUdevice;
typedef unsigned long long spc__CUdeviceptr;
typedef struct spc__CUctx_st *spc__CUcontext;
typedef struct spc__CUstream_st *spc__CUstream;
typedef struct spc__CUevent_st *spc__CUevent;
typedef struct { char reserved[64]; } spc__CUipcMemHandle;
typedef struct { char reserved[64]; } spc__CUipcEventHandle;
typedef struct { char bytes[16]; } spc__CUuuid;
typedef unsigned long long spc__CUmemGenericAllocationHandle;
typedef struct spc__CUmod_st *spc__CUmodule;
typedef struct spc__CUfunc_st *spc__CUfunction;
/* CUDA_MEMCPY2D (cuda.h), as cuMemcpy2DAsync takes it. */
typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  spc__CUdeviceptr srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  spc__CUdeviceptr dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} spc__CUDA_MEMCPY2D;

enum {
  SPC__CUDA_SUCCESS = 0,
  SPC__CUDA_ERROR_INVALID_VALUE = 1,
  SPC__CUDA_ERROR_NOT_READY = 600,
  SPC__CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  SPC__CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  SPC__CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
  SPC__CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  SPC__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  SPC__CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10,
  SPC__CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES = 14,
  SPC__CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18,
  SPC__CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19,
  SPC__CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID = 20,
  SPC__CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
  SPC__CU_MEMORYTYPE_DEVICE = 2,
  SPC__CU_EVENT_DISABLE_TIMING = 2,
  SPC__CU_EVENT_INTERPROCESS = 4,
  SPC__CU_MEMHOSTREGISTER_PORTABLE = 1,
  SPC__CU_MEMHOSTREGISTER_DEVICEMAP = 2,
  SPC__CU_STREAM_WAIT_VALUE_GEQ = 0,
  SPC__CU_STREAM_WRITE_VALUE_DEFAULT = 0,
  SPC__CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122,
  SPC__CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
  SPC__CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
};

/* Entry points, loaded with dlsym under the versioned names cuda.h maps
 * the plain ones to. */
#define SPC__CU_FUNCS(X)                                                     \
  X(Init, "cuInit", (unsigned flags))                                        \
  X(GetErrorString, "cuGetErrorString", (spc__CUresult r, const char **s))  \
  X(DeviceGet, "cuDeviceGet", (spc__CUdevice * d, int ordinal))              \
  X(DeviceGetCount, "cuDeviceGetCount", (int *n))                            \
  X(DeviceGetUuid, "cuDeviceGetUuid_v2", (spc__CUuuid * u, spc__CUdevice d)) \
  X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                      \
    (spc__CUcontext * c, spc__CUdevice d))                                   \
  X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",                 \
    (spc__CUdevice d))                                                       \
  X(CtxPushCurrent, "cuCtxPushCurrent_v2", (spc__CUcontext c))               \
  X(CtxPopCurrent, "cuCtxPopCurrent_v2", (spc__CUcontext * c))               \
  X(CtxSynchronize, "cuCtxSynchronize", (void))                              \
  X(PointerGetAttribute, "cuPointerGetAttribute",                            \
    (void *data, int attr, spc__CUdeviceptr p))                              \
  X(MemGetAddressRange, "cuMemGetAddressRange_v2",                           \
    (spc__CUdeviceptr * base, size_t *size, spc__CUdeviceptr p))             \
  X(IpcGetMemHandle, "cuIpcGetMemHandle",                                    \
    (spc__CUipcMemHandle * h, spc__CUdeviceptr p))                           \
  X(MemAlloc, "cuMemAlloc_v2", (spc__CUdeviceptr * p, size_t size))          \
  X(MemFree, "cuMemFree_v2", (spc__CUdeviceptr p))                           \
  X(MemsetD8, "cuMemsetD8_v2",                                               \
    (spc__CUdeviceptr p, unsigned char v, size_t n))                         \
  X(EventCreate, "cuEventCreate", (spc__CUevent * e, unsigned flags))        \
  X(EventDestroy, "cuEventDestroy_v2", (spc__CUevent e))                     \
  X(EventRecord, "cuEventRecord", (spc__CUevent e, spc__CUstream s))         \
  X(EventSynchronize, "cuEventSynchronize", (spc__CUevent e))                \
  X(EventQuery, "cuEventQuery", (spc__CUevent e))                            \
  X(StreamQuery, "cuStreamQuery", (spc__CUstream s))                         \
  X(IpcGetEventHandle, "cuIpcGetEventHandle",                                \
    (spc__CUipcEventHandle * h, spc__CUevent e))                             \
  X(StreamWaitEvent, "cuStreamWaitEvent",                                    \
    (spc__CUstream s, spc__CUevent e, unsigned flags))

/* Entry points a driver may lack: NULL then, and the library orders ops
 * with events instead of stream flags (client_gpu_flags.c), cannot
 * share cuMem memory (client_gpu_vmm.c), or keeps symmetric buffers on the
 * daemon's path (client_gpu_sym.c). */
#define SPC__CU_OPT_FUNCS(X)                                                 \
  X(MemRetainAllocationHandle, "cuMemRetainAllocationHandle",                \
    (spc__CUmemGenericAllocationHandle * h, void *p))                        \
  X(MemExportToShareableHandle, "cuMemExportToShareableHandle",              \
    (void *shareable, spc__CUmemGenericAllocationHandle h, int type,         \
     unsigned long long flags))                                              \
  X(MemRelease, "cuMemRelease", (spc__CUmemGenericAllocationHandle h))       \
  X(DeviceGetAttribute, "cuDeviceGetAttribute",                              \
    (int *v, int attr, spc__CUdevice d))                                     \
  X(MemHostRegister, "cuMemHostRegister_v2",                                 \
    (void *p, size_t size, unsigned flags))                                  \
  X(MemHostUnregister, "cuMemHostUnregister", (void *p))                     \
  X(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2",                 \
    (spc__CUdeviceptr * d, void *p, unsigned flags))                         \
  X(StreamWriteValue64, "cuStreamWriteValue64_v2",                           \
    (spc__CUstream s, spc__CUdeviceptr a, unsigned long long v,             \
     unsigned flags))                                                        \
  X(StreamWaitValue64, "cuStreamWaitValue64_v2",                             \
    (spc__CUstream s, spc__CUdeviceptr a, unsigned long long v,             \
     unsigned flags))                                                        \
  X(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2",                               \
    (spc__CUdeviceptr * p, spc__CUipcMemHandle h, unsigned flags))           \
  X(IpcCloseMemHandle, "cuIpcCloseMemHandle", (spc__CUdeviceptr p))          \
  X(MemcpyAsync, "cuMemcpyAsync",                                            \
    (spc__CUdeviceptr dst, spc__CUdeviceptr src, size_t n, spc__CUstream s)) \
  X(Memcpy2DAsync, "cuMemcpy2DAsync_v2",                                     \
    (const spc__CUDA_MEMCPY2D *p, spc__CUstream s))                         \
  X(StreamSynchronize, "cuStreamSynchronize", (spc__CUstream s))          \
  X(ModuleLoadData, "cuModuleLoadData",                                      \
    (spc__CUmodule * m, const void *image))                                  \
  X(ModuleUnload, "cuModuleUnload", (spc__CUmodule m))                       \
  X(ModuleGetFunction, "cuModuleGetFunction",                                \
    (spc__CUfunction * f, spc__CUmodule m, const char *name))                \
  X(LaunchKernel, "cuLaunchKernel",                                          \
    (spc__CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,  \
     unsigned by, unsigned bz, unsigned shmem, spc__CUstream s,              \
     void **params, void **extra))

typedef struct {
#define SPC__CU_FIELD(name, sym, args) spc__CUresult (*name) args;
  SPC__CU_FUNCS(SPC__CU_FIELD)
  SPC__CU_OPT_FUNCS(SPC__CU_FIELD)
#undef SPC__CU_FIELD
} spc__cu_api;

#endif
