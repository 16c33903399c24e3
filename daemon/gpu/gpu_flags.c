/* Stream flags: the words through which a client's stream and the
 * daemon's streams order an op on device tensors without either side
 * waiting for the other to have queued its half (proto/spcoll.proto,
 * StreamFlags). They live in a host buffer the client registered for them
 * (a memfd both map), registered with CUDA on both sides; the GPUs wait on
 * and write them with the driver's stream memory operations
 * (cuStreamWaitValue64 / cuStreamWriteValue64), taken through the
 * runtime's driver entry points so the daemon links libcudart alone. */
#include "gpu.h"

#ifdef SPC_HAVE_CUDA

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

typedef CUresult (*memop_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
typedef CUresult (*attr_fn)(int *, CUdevice_attribute, CUdevice);

static void *entry(spd_gpu *gpu, const char *sym) {
  return spd_gpu_driver_entry(sym, gpu->memops_why, sizeof(gpu->memops_why));
}

static int memops_load(spd_gpu *gpu, spk_err *err) {
  if (!gpu->memops_looked) {
    gpu->memops_looked = 1;
    gpu->write64 = entry(gpu, "cuStreamWriteValue64");
    gpu->wait64 = entry(gpu, "cuStreamWaitValue64");
    gpu->attr = entry(gpu, "cuDeviceGetAttribute");
  }
  if (gpu->write64 == NULL || gpu->wait64 == NULL || gpu->attr == NULL)
    return spk_err_set(err, SPK_EUNSUPPORTED, "stream flags: %s",
                       gpu->memops_why);
  return SPK_OK;
}

int spd_gpu_flags_open(spd_ctx *ctx, uint8_t *base, size_t size,
                       void **state, spk_err *err) {
  spd_gpu *gpu;
  int rc = spd_gpu_get(ctx, &gpu, err);
  if (rc == SPK_OK)
    rc = memops_load(gpu, err);
  if (rc < 0)
    return rc;
  /* Registered in the context of a GPU the client's buffers are on
   * (portable: every context sees it), so no context is made elsewhere. */
  for (int d = 0; d < gpu->ndev; d++)
    if (gpu->dev[d].opened) {
      rc = spd_gpu_set_device(d, err);
      break;
    }
  if (rc < 0)
    return rc;
  spd_gpu_flags *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a stream flags "
                       "record failed");
  cudaError_t e = cudaHostRegister(base, size, cudaHostRegisterPortable |
                                                   cudaHostRegisterMapped);
  if (e != cudaSuccess) {
    free(f);
    return spk_err_set(err, SPK_EDEVICE, "cudaHostRegister of a %zu-byte "
                       "stream flags buffer: %s", size, cudaGetErrorString(e));
  }
  void *dev = NULL;
  e = cudaHostGetDevicePointer(&dev, base, 0);
  if (e != cudaSuccess) {
    if (cudaHostUnregister(base) != cudaSuccess)
      cudaGetLastError();
    free(f);
    return spk_err_set(err, SPK_EDEVICE, "cudaHostGetDevicePointer of a "
                       "stream flags buffer: %s", cudaGetErrorString(e));
  }
  f->host = base;
  f->dev = (uint64_t)(uintptr_t)dev;
  f->size = size;
  *state = f;
  return SPK_OK;
}

/* The buffer's last reference is gone (no op holds it): no stream of the
 * daemon waits on or writes its words any more. */
void spd_gpu_flags_close(void **state) {
  spd_gpu_flags *f = *state;
  if (cudaHostUnregister(f->host) != cudaSuccess)
    cudaGetLastError(); /* nothing to answer; the mapping goes next */
  free(f);
  *state = NULL;
}

int spd_gpu_flags_dev_ok(spd_gpu *gpu, int dev, spk_err *err) {
  spd_gpu_dev *d = &gpu->dev[dev];
  if (d->memops == 0) {
    int v = 0;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (memops_load(gpu, err) == SPK_OK)
      r = ((attr_fn)gpu->attr)(&v,
                               CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                               (CUdevice)dev);
    d->memops = r == CUDA_SUCCESS && v == 1 ? 1 : -1;
  }
  if (d->memops < 0)
    return spk_err_set(err, SPK_EUNSUPPORTED, "stream flags: GPU %d has no "
                       "64-bit stream memory operations (%s); order ops "
                       "with events there", dev,
                       gpu->attr == NULL ? gpu->memops_why
                                         : "CAN_USE_64_BIT_STREAM_MEM_OPS 0");
  return SPK_OK;
}

static const char *cu_name(CUresult r) {
  switch (r) {
  case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
  case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
  case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
  case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
  default: return "a CUDA driver error";
  }
}

int spd_gpu_flag_wait(spd_gpu *gpu, cudaStream_t s, uint64_t word,
                      uint64_t seq, int rank, spk_err *err) {
  CUresult r = ((memop_fn)gpu->wait64)((CUstream)s, (CUdeviceptr)word, seq,
                                       CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS)
    return spk_err_set(err, SPK_EDEVICE, "cuStreamWaitValue64 on rank %d's "
                       "ready flag (seq %llu): %s (%d)", rank,
                       (unsigned long long)seq, cu_name(r), (int)r);
  return SPK_OK;
}

int spd_gpu_flag_write(spd_gpu *gpu, cudaStream_t s, uint64_t word,
                       uint64_t seq, int rank, spk_err *err) {
  CUresult r = ((memop_fn)gpu->write64)((CUstream)s, (CUdeviceptr)word, seq,
                                        CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS)
    return spk_err_set(err, SPK_EDEVICE, "cuStreamWriteValue64 of rank %d's "
                       "done flag (seq %llu): %s (%d)", rank,
                       (unsigned long long)seq, cu_name(r), (int)r);
  return SPK_OK;
}

#endif /* SPC_HAVE_CUDA */
