/* Entry points that PyPI's torch links or looks up but that spcoll and
 * the tests never need: each fails cleanly with the library's own "not
 * supported" status, naming the call on stderr, instead of leaving the
 * library unloadable. Built three times, into libcudart.so.13
 * (SIM_ABSENT_CUDART), libcuda.so.1 (SIM_ABSENT_CUDA) and libnccl.so.2
 * (SIM_ABSENT_NCCL), against the real headers, with their signatures.
 * The one exception: entry points of NCCL 2.30 (torch's own NCCL), which
 * the 2.28 nccl.h the simulator builds against does not declare; they
 * take no arguments, which the x86-64 and aarch64 calling conventions
 * allow for a caller passing some. */
#include <stdio.h>

#include "sim.h"

#define API __attribute__((visibility("default")))

/* A stub ignores its arguments. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

static void said(const char *name) {
  static __thread const char *last;
  if (last != name)
    fprintf(stderr, "spcsim: %s is not simulated (not supported)\n", name);
  last = name;
}

#if defined(SIM_ABSENT_CUDART)
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

/* cudaErrorNotSupported, also the thread's last error */
#define ABSENT(name, params)                                                   \
  API cudaError_t name params {                                                \
    said(#name);                                                               \
    return (cudaError_t)sim_set_last(cudaErrorNotSupported);                   \
  }
/* One that may block the host on the GPU, which rule host-sync forbids
 * on a loop thread (sim_no_block): flagged before it fails. */
#define ABSENT_BLOCKING(name, params, how)                                     \
  API cudaError_t name params {                                                \
    sim_no_block(#name, how);                                                  \
    said(#name);                                                               \
    return (cudaError_t)sim_set_last(cudaErrorNotSupported);                   \
  }
ABSENT(cudaDeviceGetGraphMemAttribute,
       (int device, enum cudaGraphMemAttributeType attr, void *value))
ABSENT(cudaDeviceSetGraphMemAttribute,
       (int device, enum cudaGraphMemAttributeType attr, void *value))
ABSENT(cudaFuncGetAttributes,
       (struct cudaFuncAttributes * attr, const void *func))
ABSENT(cudaFuncSetAttribute,
       (const void *func, enum cudaFuncAttribute attr, int value))
ABSENT(cudaGetSymbolAddress, (void **devPtr, const void *symbol))
ABSENT(cudaGraphAddNode,
       (cudaGraphNode_t * pGraphNode, cudaGraph_t graph,
        const cudaGraphNode_t *pDependencies,
        const cudaGraphEdgeData *dependencyData, size_t numDependencies,
        struct cudaGraphNodeParams *nodeParams))
ABSENT(cudaGraphConditionalHandleCreate,
       (cudaGraphConditionalHandle * pHandle_out, cudaGraph_t graph,
        unsigned int defaultLaunchValue, unsigned int flags))
ABSENT(cudaGraphDestroy, (cudaGraph_t graph))
ABSENT(cudaGraphExecDestroy, (cudaGraphExec_t graphExec))
ABSENT(cudaGraphGetNodes,
       (cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes))
ABSENT(cudaGraphInstantiate, (cudaGraphExec_t * pGraphExec, cudaGraph_t graph,
                              unsigned long long flags))
ABSENT(cudaGraphInstantiateWithFlags,
       (cudaGraphExec_t * pGraphExec, cudaGraph_t graph,
        unsigned long long flags))
ABSENT(cudaGraphLaunch, (cudaGraphExec_t graphExec, cudaStream_t stream))
ABSENT(cudaGraphNodeGetDependencies,
       (cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
        cudaGraphEdgeData *edgeData, size_t *pNumDependencies))
ABSENT(cudaGraphRetainUserObject, (cudaGraph_t graph, cudaUserObject_t object,
                                   unsigned int count, unsigned int flags))
ABSENT(cudaKernelSetAttributeForDevice,
       (cudaKernel_t kernel, enum cudaFuncAttribute attr, int value,
        int device))
ABSENT(cudaLaunchCooperativeKernel,
       (const void *func, dim3 gridDim, dim3 blockDim, void **args,
        size_t sharedMem, cudaStream_t stream))
ABSENT(cudaLaunchKernelExC,
       (const cudaLaunchConfig_t *config, const void *func, void **args))
ABSENT(cudaLibraryGetGlobal,
       (void **dptr, size_t *bytes, cudaLibrary_t library, const char *name))
ABSENT(cudaLibraryGetKernel,
       (cudaKernel_t * pKernel, cudaLibrary_t library, const char *name))
ABSENT(cudaLibraryGetKernelCount, (unsigned int *count, cudaLibrary_t lib))
ABSENT(cudaLibraryGetManaged,
       (void **dptr, size_t *bytes, cudaLibrary_t library, const char *name))
ABSENT(cudaLibraryGetUnifiedFunction,
       (void **fptr, cudaLibrary_t library, const char *symbol))
ABSENT(cudaLibraryLoadData,
       (cudaLibrary_t * library, const void *code,
        enum cudaJitOption *jitOptions, void **jitOptionsValues,
        unsigned int numJitOptions, enum cudaLibraryOption *libraryOptions,
        void **libraryOptionValues, unsigned int numLibraryOptions))
ABSENT(cudaLibraryLoadFromFile,
       (cudaLibrary_t * library, const char *fileName,
        enum cudaJitOption *jitOptions, void **jitOptionsValues,
        unsigned int numJitOptions, enum cudaLibraryOption *libraryOptions,
        void **libraryOptionValues, unsigned int numLibraryOptions))
ABSENT(cudaLibraryUnload, (cudaLibrary_t library))
ABSENT(cudaMallocManaged, (void **devPtr, size_t size, unsigned int flags))
ABSENT(cudaMemPoolGetAttribute,
       (cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value))
ABSENT(cudaMemPoolTrimTo, (cudaMemPool_t memPool, size_t minBytesToKeep))
ABSENT(cudaMemcpy2DAsync,
       (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
        size_t height, enum cudaMemcpyKind kind, cudaStream_t stream))
ABSENT(cudaMemcpyPeerAsync, (void *dst, int dstDevice, const void *src,
                             int srcDevice, size_t count, cudaStream_t stream))
ABSENT_BLOCKING(cudaMemcpyToSymbol,
                (const void *symbol, const void *src, size_t count,
                 size_t offset, enum cudaMemcpyKind kind),
                "waits for the GPU (a synchronous copy)")
ABSENT(cudaOccupancyMaxActiveBlocksPerMultiprocessor,
       (int *numBlocks, const void *func, int blockSize,
        size_t dynamicSMemSize))
ABSENT(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
       (int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize,
        unsigned int flags))
ABSENT(cudaProfilerStart, (void))
ABSENT(cudaProfilerStop, (void))
ABSENT(cudaStreamBeginCapture,
       (cudaStream_t stream, enum cudaStreamCaptureMode mode))
ABSENT(cudaStreamBeginCaptureToGraph,
       (cudaStream_t stream, cudaGraph_t graph,
        const cudaGraphNode_t *dependencies,
        const cudaGraphEdgeData *dependencyData, size_t numDependencies,
        enum cudaStreamCaptureMode mode))
ABSENT(cudaStreamEndCapture, (cudaStream_t stream, cudaGraph_t *pGraph))
ABSENT(cudaStreamUpdateCaptureDependencies,
       (cudaStream_t stream, cudaGraphNode_t *dependencies,
        const cudaGraphEdgeData *dependencyData, size_t numDependencies,
        unsigned int flags))
ABSENT(cudaUserObjectCreate,
       (cudaUserObject_t * object_out, void *ptr, cudaHostFn_t destroy,
        unsigned int initialRefcount, unsigned int flags))
ABSENT(cudaUserObjectRelease, (cudaUserObject_t object, unsigned int count))

#elif defined(SIM_ABSENT_CUDA)
#include <cuda.h>

#define ABSENT(name, params)                                                   \
  API CUresult name params {                                                   \
    said(#name);                                                               \
    return CUDA_ERROR_NOT_SUPPORTED;                                           \
  }
ABSENT(cuCtxFromGreenCtx, (CUcontext * pContext, CUgreenCtx hCtx))
ABSENT(cuDevResourceGenerateDesc,
       (CUdevResourceDesc * phDesc, CUdevResource *resources,
        unsigned int nbResources))
ABSENT(cuDevSmResourceSplitByCount,
       (CUdevResource * result, unsigned int *nbGroups,
        const CUdevResource *input, CUdevResource *remaining,
        unsigned int useFlags, unsigned int minCount))
ABSENT(cuDeviceGetDevResource,
       (CUdevice device, CUdevResource *resource, CUdevResourceType type))
ABSENT(cuGreenCtxCreate, (CUgreenCtx * phCtx, CUdevResourceDesc desc,
                          CUdevice dev, unsigned int flags))
ABSENT(cuGreenCtxDestroy, (CUgreenCtx hCtx))
ABSENT(cuGreenCtxStreamCreate, (CUstream * phStream, CUgreenCtx greenCtx,
                                unsigned int flags, int priority))
ABSENT(cuLogsRegisterCallback, (CUlogsCallback callbackFunc, void *userData,
                                CUlogsCallbackHandle *callback_out))
ABSENT(cuLogsUnregisterCallback, (CUlogsCallbackHandle callback))
ABSENT(cuMemsetD32Async,
       (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))
ABSENT(cuMulticastAddDevice,
       (CUmemGenericAllocationHandle mcHandle, CUdevice dev))
ABSENT(cuMulticastBindMem,
       (CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
        CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
        unsigned long long flags))
ABSENT(cuMulticastCreate, (CUmemGenericAllocationHandle * mcHandle,
                           const CUmulticastObjectProp *prop))
ABSENT(cuMulticastUnbind, (CUmemGenericAllocationHandle mcHandle, CUdevice dev,
                           size_t mcOffset, size_t size))
ABSENT(cuFuncGetAttribute,
       (int *pi, CUfunction_attribute attrib, CUfunction hfunc))
ABSENT(cuFuncSetAttribute,
       (CUfunction hfunc, CUfunction_attribute attrib, int value))
ABSENT(cuFuncSetCacheConfig, (CUfunction hfunc, CUfunc_cache config))
ABSENT(cuLaunchCooperativeKernel,
       (CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
        void **kernelParams))
ABSENT(cuLinkAddData_v2,
       (CUlinkState state, CUjitInputType type, void *data, size_t size,
        const char *name, unsigned int numOptions, CUjit_option *options,
        void **optionValues))
ABSENT(cuLinkComplete, (CUlinkState state, void **cubinOut, size_t *sizeOut))
ABSENT(cuLinkCreate_v2, (unsigned int numOptions, CUjit_option *options,
                         void **optionValues, CUlinkState *stateOut))
ABSENT(cuModuleLoad, (CUmodule * module, const char *fname))
ABSENT(cuModuleLoadDataEx,
       (CUmodule * module, const void *image, unsigned int numOptions,
        CUjit_option *options, void **optionValues))
ABSENT(cuOccupancyMaxActiveBlocksPerMultiprocessor,
       (int *numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize))
ABSENT(cuTensorMapEncodeTiled,
       (CUtensorMap * tensorMap, CUtensorMapDataType tensorDataType,
        cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
        const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
        const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
        CUtensorMapFloatOOBfill oobFill))

/* torch looks the plain names up with dlsym; cuda.h maps them to _v2,
 * which cudrv.c defines. The plain stream memory operations are the
 * deprecated v1 API: the same operations on the simulated GPUs, unless
 * the v1 API is said to be missing (SPCSIM_NO_STREAM_MEM_OPS=v1, as on a
 * driver loaded without NVreg_EnableStreamMemOPs=1). */
#undef cuMemGetAddressRange
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp
API CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size,
                                  CUdeviceptr p) {
  return cuMemGetAddressRange_v2(base, size, p);
}
API CUresult cuCtxPushCurrent(CUcontext ctx) {
  return cuCtxPushCurrent_v2(ctx);
}
API CUresult cuCtxPopCurrent(CUcontext *ctx) { return cuCtxPopCurrent_v2(ctx); }
static int no_v1(void) { return sim_cfg()->no_memops != SIM_MEMOPS_ALL; }
API CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr,
                                  cuuint32_t value, unsigned int flags) {
  return no_v1() ? CUDA_ERROR_NOT_SUPPORTED
                 : cuStreamWriteValue32_v2(s, addr, value, flags);
}
API CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr,
                                  cuuint64_t value, unsigned int flags) {
  return no_v1() ? CUDA_ERROR_NOT_SUPPORTED
                 : cuStreamWriteValue64_v2(s, addr, value, flags);
}
API CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                 unsigned int flags) {
  return no_v1() ? CUDA_ERROR_NOT_SUPPORTED
                 : cuStreamWaitValue32_v2(s, addr, value, flags);
}
API CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                 unsigned int flags) {
  return no_v1() ? CUDA_ERROR_NOT_SUPPORTED
                 : cuStreamWaitValue64_v2(s, addr, value, flags);
}
API CUresult cuStreamBatchMemOp(CUstream s, unsigned int count,
                                CUstreamBatchMemOpParams *params,
                                unsigned int flags) {
  return no_v1() ? CUDA_ERROR_NOT_SUPPORTED
                 : cuStreamBatchMemOp_v2(s, count, params, flags);
}

#elif defined(SIM_ABSENT_NCCL)
#include <nccl.h>

#define ABSENT(name, params)                                                   \
  API ncclResult_t name params {                                               \
    said(#name);                                                               \
    return ncclInvalidUsage;                                                   \
  }
/* One that blocks the host (on other ranks, or until the communicator's
 * work is done) when `blocks` holds, which rule host-sync forbids on a
 * loop thread (sim_no_block): flagged before it fails, so a program that
 * starts using it there hears of both. */
#define ABSENT_BLOCKING(name, params, blocks, how)                             \
  API ncclResult_t name params {                                               \
    if (blocks)                                                                \
      sim_no_block(#name, how);                                                \
    said(#name);                                                               \
    return ncclInvalidUsage;                                                   \
  }
/* A configuration that does not ask for a nonblocking communicator (none:
 * the parent's, which spcsim takes to be blocking, NCCL's default). */
#define BLOCKING(config) ((config) == NULL || (config)->blocking != 0)
#define JOINS "waits for every rank to join"
ABSENT(ncclBcast, (void *buff, size_t count, ncclDataType_t datatype, int root,
                   ncclComm_t comm, cudaStream_t stream))
ABSENT(ncclBroadcast, (const void *sendbuff, void *recvbuff, size_t count,
                       ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream))
ABSENT(ncclCommDeregister, (const ncclComm_t comm, void *handle))
ABSENT_BLOCKING(ncclCommFinalize, (ncclComm_t comm), 1,
                "waits for the communicator's operations to complete")
ABSENT_BLOCKING(ncclCommInitRank,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),
                1, JOINS)
ABSENT_BLOCKING(ncclCommInitRankConfig,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                 ncclConfig_t *config),
                BLOCKING(config), JOINS)
ABSENT_BLOCKING(ncclCommInitRankScalable,
                (ncclComm_t * newcomm, int nranks, int myrank, int nId,
                 ncclUniqueId *commIds, ncclConfig_t *config),
                BLOCKING(config), JOINS)
ABSENT(ncclCommRegister,
       (const ncclComm_t comm, void *buff, size_t size, void **handle))
ABSENT(ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
ABSENT_BLOCKING(ncclCommShrink,
                (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                 ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags),
                BLOCKING(config), JOINS)
ABSENT_BLOCKING(ncclCommSplit,
                (ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                 ncclConfig_t *config),
                BLOCKING(config), JOINS)
ABSENT(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
ABSENT(ncclCommWindowRegister, (ncclComm_t comm, void *buff, size_t size,
                                ncclWindow_t *win, int winFlags))
ABSENT(ncclGather, (const void *sendbuff, void *recvbuff, size_t count,
                    ncclDataType_t datatype, int root, ncclComm_t comm,
                    cudaStream_t stream))
ABSENT(ncclGetUniqueId, (ncclUniqueId * uniqueId))
ABSENT(ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))
ABSENT(ncclMemAlloc, (void **ptr, size_t size))
ABSENT(ncclMemFree, (void *ptr))
ABSENT(ncclRedOpCreatePreMulSum,
       (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype,
        ncclScalarResidence_t residence, ncclComm_t comm))
ABSENT(ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
ABSENT(ncclReduce, (const void *sendbuff, void *recvbuff, size_t count,
                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                    ncclComm_t comm, cudaStream_t stream))

/* NCCL 2.30 only (not in the 2.28 header): no signature to take. */
#define ABSENT_230(name)                                                       \
  API int name(void) {                                                         \
    said(#name);                                                               \
    return ncclInvalidUsage;                                                   \
  }
ABSENT_230(ncclCommGetUniqueId)
ABSENT_230(ncclCommGrow)
ABSENT_230(ncclCommMemStats)
ABSENT_230(ncclCommResume)
ABSENT_230(ncclCommSuspend)
ABSENT_230(ncclDevCommCreate)
ABSENT_230(ncclDevCommDestroy)
ABSENT_230(ncclGetLsaMultimemDevicePointer)
ABSENT_230(ncclGetPeerDevicePointer)
ABSENT_230(ncclPutSignal)
ABSENT_230(ncclSignal)
ABSENT_230(ncclWaitSignal)
ABSENT_230(ncclWinGetUserPtr)

#else
#error                                                                         \
    "build absent.c with SIM_ABSENT_CUDART, SIM_ABSENT_CUDA or SIM_ABSENT_NCCL"
#endif
