/* Clients' device memory shared as cuMem allocations: each allocation's
 * POSIX file descriptor (sent with BufRegister) imported, the allocations
 * mapped back to back into an address range the daemon reserves, and
 * access granted to every GPU that may reach them (as legacy IPC's lazy
 * peer access does). Unlike legacy IPC handles, descriptors cross PID
 * namespaces, and they share torch's expandable segments.
 *
 * cuMemSetAccess and cuMemUnmap may wait for the GPU (CUDA marks them
 * synchronous), so mapping and unmapping run on libuv's thread pool; the
 * loop thread only links the result. The driver's entry points come
 * through the runtime (cudaGetDriverEntryPointByVersion), so the daemon
 * links libcudart alone. */
#include "gpu_ipc.h"

#ifdef SPC_HAVE_CUDA

#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"

typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *, void *,
                              CUmemAllocationHandleType);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                               unsigned long long);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t,
                           CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *,
                              size_t);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*range_fn)(CUdeviceptr, size_t);
typedef CUresult (*errstr_fn)(CUresult, const char **);

/* The driver's virtual memory calls, copied into every job so that a job
 * outlives the GPU state (an unmap queued at exit). */
typedef struct {
  import_fn import;
  reserve_fn reserve;
  map_fn map;
  access_fn access;
  release_fn release;
  range_fn unmap, addr_free;
  errstr_fn errstr;
} vmm_api;

/* One job on the pool: a map (fds in) or an unmap (a mapping out). A
 * mapping's record (spd_gpu_mem.vmm) keeps its job for the unmap. */
typedef struct spd_gpu_vmm {
  uv_work_t work;
  spd_ctx *ctx;
  vmm_api api;
  int dev, ndev;
  int peers[SPD_GPU_MAX_DEV];  /* GPUs granted access besides dev */
  int npeers;
  int fds[SPK_VMM_MAX_CHUNKS];
  uint64_t sizes[SPK_VMM_MAX_CHUNKS];
  int n, nmapped;
  CUdeviceptr base;
  uint64_t total, offset;     /* the mapped bytes; the buffer's start */
  spd_gpu_vmm_done done;
  void *arg;
  spd_gpu_closed_fn closed;    /* unmap: told once it is done, or NULL */
  void *closed_arg;
  spk_err err;
  int rc;
} vmm_job;

static const char *cu_str(const vmm_api *a, CUresult r) {
  const char *s = NULL;
  if (a->errstr == NULL || a->errstr(r, &s) != CUDA_SUCCESS || s == NULL)
    return "unknown CUDA driver error";
  return s;
}

static void *entry(const char *sym, spk_err *err) {
  char why[200] = "";
  void *p = spd_gpu_driver_entry(sym, why, sizeof(why));
  if (p == NULL)
    spk_err_set(err, SPK_EUNSUPPORTED, "%s: no cuMem device buffers", why);
  return p;
}

static int api_load(vmm_api *a, spk_err *err) {
  if ((*(void **)&a->import = entry("cuMemImportFromShareableHandle", err)) &&
      (*(void **)&a->reserve = entry("cuMemAddressReserve", err)) &&
      (*(void **)&a->map = entry("cuMemMap", err)) &&
      (*(void **)&a->access = entry("cuMemSetAccess", err)) &&
      (*(void **)&a->release = entry("cuMemRelease", err)) &&
      (*(void **)&a->unmap = entry("cuMemUnmap", err)) &&
      (*(void **)&a->addr_free = entry("cuMemAddressFree", err)) &&
      (*(void **)&a->errstr = entry("cuGetErrorString", err)))
    return SPK_OK;
  return SPK_EUNSUPPORTED;
}

/* ---- on the pool ------------------------------------------------------- */

static void job_fail(vmm_job *j, const char *call, int i, CUresult r) {
  j->rc = spk_err_set(&j->err, SPK_EDEVICE, "%s (allocation %d of %d, %llu "
                      "bytes) on GPU %d: %s", call, i, j->n,
                      (unsigned long long)j->sizes[i], j->dev,
                      cu_str(&j->api, r));
}

/* Undo what map_work did: mappings, then the reservation. */
static void unmap_all(vmm_job *j) {
  uint64_t off = 0;
  for (int i = 0; i < j->nmapped; i++) {
    CUresult r = j->api.unmap(j->base + off, j->sizes[i]);
    if (r != CUDA_SUCCESS && j->rc == SPK_OK)
      job_fail(j, "cuMemUnmap", i, r);
    off += j->sizes[i];
  }
  j->nmapped = 0;
  if (j->base != 0) {
    CUresult r = j->api.addr_free(j->base, j->total);
    if (r != CUDA_SUCCESS && j->rc == SPK_OK)
      j->rc = spk_err_set(&j->err, SPK_EDEVICE, "cuMemAddressFree(0x%llx, "
                          "%llu bytes): %s", (unsigned long long)j->base,
                          (unsigned long long)j->total, cu_str(&j->api, r));
    j->base = 0;
  }
}

static void grant(vmm_job *j) {
  CUmemAccessDesc d[SPD_GPU_MAX_DEV + 1];
  memset(d, 0, sizeof(d));
  int n = 0;
  d[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d[n].location.id = j->dev;
  d[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int k = 0; k < j->npeers; k++) {
    d[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d[n].location.id = j->peers[k];
    d[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  CUresult r = j->api.access(j->base, j->total, d, (size_t)n);
  if (r != CUDA_SUCCESS)
    j->rc = spk_err_set(&j->err, SPK_EDEVICE, "cuMemSetAccess(%llu bytes, "
                        "GPU %d and %d peers): %s",
                        (unsigned long long)j->total, j->dev, j->npeers,
                        cu_str(&j->api, r));
}

/* Import every descriptor, reserve, map, grant; the handles go once
 * mapped (the mappings hold the memory). */
static void map_work(uv_work_t *w) {
  vmm_job *j = w->data;
  CUmemGenericAllocationHandle h[SPK_VMM_MAX_CHUNKS];
  int nh = 0;
  cudaError_t e = cudaSetDevice(j->dev);
  if (e != cudaSuccess) {
    j->rc = spk_err_set(&j->err, SPK_EDEVICE, "cudaSetDevice(%d): %s",
                        j->dev, cudaGetErrorString(e));
    cudaGetLastError();
  }
  for (; j->rc == SPK_OK && nh < j->n; nh++) {
    CUresult r = j->api.import(&h[nh], (void *)(uintptr_t)j->fds[nh],
                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
      job_fail(j, "cuMemImportFromShareableHandle", nh, r);
      break;
    }
    close(j->fds[nh]); /* the handle holds the memory */
    j->fds[nh] = -1;
  }
  CUresult r = CUDA_SUCCESS;
  if (j->rc == SPK_OK &&
      (r = j->api.reserve(&j->base, j->total, 0, 0, 0)) != CUDA_SUCCESS)
    j->rc = spk_err_set(&j->err, SPK_EDEVICE, "cuMemAddressReserve(%llu "
                        "bytes): %s", (unsigned long long)j->total,
                        cu_str(&j->api, r));
  uint64_t off = 0;
  for (int i = 0; j->rc == SPK_OK && i < j->n; i++) {
    if ((r = j->api.map(j->base + off, j->sizes[i], 0, h[i], 0)) !=
        CUDA_SUCCESS)
      job_fail(j, "cuMemMap", i, r);
    else
      j->nmapped++;
    off += j->sizes[i];
  }
  if (j->rc == SPK_OK)
    grant(j);
  for (int i = 0; i < nh; i++)
    j->api.release(h[i]);
  if (j->rc != SPK_OK) {
    int rc = j->rc;
    unmap_all(j);
    j->rc = rc;
  }
}

static void unmap_work(uv_work_t *w) {
  vmm_job *j = w->data;
  if (cudaSetDevice(j->dev) != cudaSuccess)
    cudaGetLastError(); /* the calls name their own failure */
  unmap_all(j);
}

/* ---- on the loop --------------------------------------------------------- */

static void job_free(vmm_job *j) {
  for (int i = 0; i < j->n; i++)
    if (j->fds[i] >= 0)
      close(j->fds[i]);
  free(j);
}

static void unmap_done(uv_work_t *w, int status) {
  vmm_job *j = w->data;
  if (status < 0)
    SPD_ERROR(&j->ctx->log, "unmapping a cuMem buffer on GPU %d did not "
              "run: %s", j->dev, uv_strerror(status));
  else if (j->rc != SPK_OK)
    SPD_ERROR(&j->ctx->log, "unmapping a cuMem buffer: %s", j->err.msg);
  if (j->closed != NULL)
    j->closed(j->closed_arg);
  job_free(j);
}

/* Queue the unmap of j's mapping (its fds long closed). */
static void unmap_queue(vmm_job *j) {
  j->rc = SPK_OK;
  for (int i = 0; i < j->n; i++)
    j->fds[i] = -1;
  int rc = uv_queue_work(j->ctx->loop, &j->work, unmap_work, unmap_done);
  if (rc < 0) {
    SPD_ERROR(&j->ctx->log, "uv_queue_work to unmap a cuMem buffer: %s; "
              "its %llu bytes stay mapped until exit", uv_strerror(rc),
              (unsigned long long)j->total);
    if (j->closed != NULL)
      j->closed(j->closed_arg);
    free(j);
  }
}

static void map_done(uv_work_t *w, int status) {
  vmm_job *j = w->data;
  for (int i = 0; i < j->n; i++) {
    if (j->fds[i] >= 0)
      close(j->fds[i]);
    j->fds[i] = -1;
  }
  spd_gpu *gpu = j->ctx->gpu;
  spd_gpu_mem *m = NULL;
  int rc = j->rc;
  if (status < 0)
    rc = spk_err_set(&j->err, SPK_ESYSTEM, "mapping cuMem memory did not "
                     "run: %s", uv_strerror(status));
  else if (rc == SPK_OK && gpu == NULL)
    rc = spk_err_set(&j->err, SPK_ESHUTDOWN, "spcolld is shutting down");
  else if (rc == SPK_OK && (m = calloc(1, sizeof(*m))) == NULL)
    rc = spk_err_set(&j->err, SPK_ENO_MEMORY, "calloc of a mapping record "
                     "failed");
  if (m == NULL) {
    j->done(j->arg, rc, NULL, NULL, j->dev, &j->err);
    if (j->nmapped > 0)
      unmap_queue(j); /* mapped, but nobody to take it */
    else
      job_free(j);
    return;
  }
  m->vmm = j;
  m->dev = j->dev;
  m->base = (uint8_t *)(uintptr_t)j->base;
  m->size = j->total;
  m->refs = 1;
  m->next = gpu->mems;
  gpu->mems = m;
  SPD_DEBUG(&j->ctx->log, "GPU %d: mapped %d cuMem allocation(s), %llu bytes "
            "at %p", j->dev, j->n, (unsigned long long)j->total, m->base);
  j->done(j->arg, SPK_OK, m, m->base + j->offset, j->dev, NULL);
}

static int req_check(const spd_gpu_vmm_req *q, uint64_t *total,
                     spk_err *err) {
  if (q->n == 0 || q->n > SPK_VMM_MAX_CHUNKS)
    return spk_err_set(err, SPK_EINVAL, "vmm_sizes has %zu entries: 1 to %d "
                       "cuMem allocations per buffer", q->n,
                       SPK_VMM_MAX_CHUNKS);
  *total = 0;
  for (size_t i = 0; i < q->n; i++) {
    if (q->sizes[i] == 0 || q->sizes[i] > UINT64_MAX / 2 - *total)
      return spk_err_set(err, SPK_EINVAL, "vmm_sizes[%zu] is %llu bytes",
                         i, (unsigned long long)q->sizes[i]);
    *total += q->sizes[i];
  }
  if (q->size == 0 || q->offset > *total || q->size > *total - q->offset)
    return spk_err_set(err, SPK_EINVAL, "device buffer (offset %llu, %llu "
                       "bytes) outside its %llu mapped bytes",
                       (unsigned long long)q->offset,
                       (unsigned long long)q->size,
                       (unsigned long long)*total);
  return SPK_OK;
}

/* The job for q, its device open and its peers listed (loop thread). */
static int job_make(spd_ctx *ctx, const spd_gpu_vmm_req *q, vmm_job **j_p,
                    spk_err *err) {
  spd_gpu *gpu;
  int dev;
  uint64_t total = 0;
  int rc = req_check(q, &total, err);
  if (rc == SPK_OK)
    rc = spd_gpu_get(ctx, &gpu, err);
  if (rc == SPK_OK)
    rc = spd_gpu_dev_of_uuid(gpu, q->uuid, q->ulen, &dev, err);
  if (rc == SPK_OK)
    rc = spd_gpu_dev_open(gpu, dev, err);
  if (rc < 0)
    return rc;
  vmm_job *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a cuMem job failed");
  if ((rc = api_load(&j->api, err)) < 0) {
    free(j);
    return rc;
  }
  j->work.data = j;
  j->ctx = ctx;
  j->dev = dev;
  for (int d = 0; d < gpu->ndev; d++) {
    int can = 0;
    if (d != dev && cudaDeviceCanAccessPeer(&can, d, dev) == cudaSuccess &&
        can)
      j->peers[j->npeers++] = d;
    cudaGetLastError();
  }
  j->n = (int)q->n;
  j->total = total;
  j->offset = q->offset;
  memcpy(j->sizes, q->sizes, q->n * sizeof(*q->sizes));
  *j_p = j;
  return SPK_OK;
}

int spd_gpu_vmm_open(spd_ctx *ctx, const spd_gpu_vmm_req *q,
                     spd_gpu_vmm_done done, void *arg, spk_err *err) {
  vmm_job *j = NULL;
  int rc = job_make(ctx, q, &j, err);
  if (rc == SPK_OK) {
    for (size_t i = 0; i < q->n; i++)
      j->fds[i] = q->fds[i];
    j->done = done;
    j->arg = arg;
    rc = uv_queue_work(ctx->loop, &j->work, map_work, map_done);
    if (rc == 0)
      return SPK_OK;
    rc = spk_err_set(err, SPK_ESYSTEM, "uv_queue_work to map cuMem memory: "
                     "%s", uv_strerror(rc));
    free(j);
  }
  for (size_t i = 0; i < q->n; i++)
    close(q->fds[i]);
  return rc;
}

void spd_gpu_vmm_close(spd_gpu_mem *m, spd_gpu_closed_fn fn, void *arg) {
  vmm_job *j = m->vmm;
  m->vmm = NULL;
  j->closed = fn;
  j->closed_arg = arg;
  unmap_queue(j);
}

#else /* !SPC_HAVE_CUDA */

#include <unistd.h>

int spd_gpu_vmm_open(spd_ctx *ctx, const spd_gpu_vmm_req *q,
                     spd_gpu_vmm_done done, void *arg, spk_err *err) {
  (void)ctx, (void)done, (void)arg;
  for (size_t i = 0; i < q->n; i++)
    close(q->fds[i]);
  return spk_err_set(err, SPK_EUNSUPPORTED, "spcolld was built without CUDA "
                     "(no nvcc under CUDA_HOME at build time): no device "
                     "buffers");
}

#endif
