/* Device buffers: device memory registered with the daemon through CUDA
 * IPC (or cuMem file descriptors, client_gpu_vmm.c), once per allocation,
 * shared by the buffers inside it, released with the last of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_gpu.h"

/* ---- registration ------------------------------------------------------- */

/* What the driver says of ptr: the allocation holding it and its GPU. */
typedef struct {
  int device;
  spc__CUcontext ctx;         /* the allocation's context */
  spc__CUdeviceptr base;
  size_t size;
  unsigned long long alloc_id;
  int nchunks;                /* cuMem memory: the mappings under the buffer */
  spc__gpu_chunk chunks[SPK_VMM_MAX_CHUNKS];
} ptr_info;

/* cuMem memory belongs to no context: the device's primary one serves. */
static int vmm_query(spc_client *c, const spc__cu_api *cu, void *ptr,
                     size_t size, ptr_info *pi) {
  spc__gpu_dev *d;
  int rc = spc__gpu_dev_get(c, pi->device, &d);
  if (rc == SPC_OK)
    rc = spc__gpu_vmm_chunks(c, cu, (uint64_t)(uintptr_t)ptr, size,
                             pi->device, pi->chunks, &pi->nchunks);
  if (rc < 0)
    return rc;
  pi->ctx = d->ctx;
  pi->base = pi->chunks[0].base;
  pi->size = 0;
  for (int i = 0; i < pi->nchunks; i++)
    pi->size += pi->chunks[i].size;
  return SPC_OK;
}

static int legacy_query(spc_client *c, const spc__cu_api *cu, void *ptr,
                        size_t size, ptr_info *pi);

static int ptr_query(spc_client *c, const spc__cu_api *cu, void *ptr,
                     size_t size, ptr_info *pi) {
  spc__CUdeviceptr p = (spc__CUdeviceptr)(uintptr_t)ptr;
  unsigned type = 0, managed = 0;
  int legacy = 1;
  pi->nchunks = 0;
  spc__CUresult r = cu->PointerGetAttribute(
      &type, SPC__CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  if (r != SPC__CUDA_SUCCESS || type != SPC__CU_MEMORYTYPE_DEVICE)
    return spc__fail(c, SPC_EINVAL, "%p is not CUDA device memory "
                     "(cuPointerGetAttribute: %s, memory type %u)", ptr,
                     spc__cu_str(cu, r), type);
  r = cu->PointerGetAttribute(&managed, SPC__CU_POINTER_ATTRIBUTE_IS_MANAGED,
                              p);
  if (r == SPC__CUDA_SUCCESS && managed)
    return spc__fail(c, SPC_EINVAL, "%p is managed memory, which CUDA IPC "
                     "cannot share: use cudaMalloc", ptr);
  r = cu->PointerGetAttribute(&pi->device,
                              SPC__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
  /* A driver that predates the attribute knows only legacy memory. */
  if (r == SPC__CUDA_SUCCESS &&
      cu->PointerGetAttribute(&legacy,
                              SPC__CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                              p) != SPC__CUDA_SUCCESS)
    legacy = 1;
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuPointerGetAttribute(%p): %s", ptr,
                     spc__cu_str(cu, r));
  return legacy ? legacy_query(c, cu, ptr, size, pi)
                : vmm_query(c, cu, ptr, size, pi);
}

/* cudaMalloc memory: the allocation (cuMemGetAddressRange) and its
 * context. */
static int legacy_query(spc_client *c, const spc__cu_api *cu, void *ptr,
                        size_t size, ptr_info *pi) {
  spc__CUdeviceptr p = (spc__CUdeviceptr)(uintptr_t)ptr;
  spc__CUresult r = cu->PointerGetAttribute(
      &pi->ctx, SPC__CU_POINTER_ATTRIBUTE_CONTEXT, p);
  if (r == SPC__CUDA_SUCCESS)
    r = cu->PointerGetAttribute(&pi->alloc_id,
                                SPC__CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuPointerGetAttribute(%p): %s", ptr,
                     spc__cu_str(cu, r));
  int rc = spc__gpu_push(c, cu, pi->ctx);
  if (rc < 0)
    return rc;
  r = cu->MemGetAddressRange(&pi->base, &pi->size, p);
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuMemGetAddressRange(%p): %s", ptr,
                     spc__cu_str(cu, r));
  if (size > pi->size - (size_t)(p - pi->base))
    return spc__fail(c, SPC_EINVAL, "%zu bytes at %p reach past the end of "
                     "their allocation (%zu bytes at 0x%llx)", size, ptr,
                     pi->size, (unsigned long long)pi->base);
  return SPC_OK;
}

/* What travels with a registration: a legacy IPC handle of the
 * allocation, or a file descriptor per cuMem allocation. */
typedef struct {
  spc__CUipcMemHandle h;
  int fds[SPK_VMM_MAX_CHUNKS];
  uint64_t sizes[SPK_VMM_MAX_CHUNKS];
  int nfds;
} share;

static int share_make(spc_client *c, const spc__cu_api *cu,
                      const ptr_info *pi, share *sh,
                      Spcoll__BufRegister *reg) {
  int rc = spc__gpu_push(c, cu, pi->ctx);
  if (rc < 0)
    return rc;
  if (pi->nchunks > 0) {
    rc = spc__gpu_vmm_export(c, cu, pi->chunks, pi->nchunks, sh->fds);
    spc__gpu_pop(cu);
    if (rc < 0)
      return rc;
    sh->nfds = pi->nchunks;
    for (int i = 0; i < sh->nfds; i++)
      sh->sizes[i] = pi->chunks[i].size;
    reg->n_vmm_sizes = (size_t)sh->nfds;
    reg->vmm_sizes = sh->sizes;
    return SPC_OK;
  }
  spc__CUresult r = cu->IpcGetMemHandle(&sh->h, pi->base);
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuIpcGetMemHandle(0x%llx): %s (memory "
                     "from cudaMallocAsync pools cannot be shared this way)",
                     (unsigned long long)pi->base, spc__cu_str(cu, r));
  sh->nfds = 0;
  reg->ipc_handle.len = sizeof(sh->h);
  reg->ipc_handle.data = (uint8_t *)&sh->h;
  return SPC_OK;
}

/* The record of what the daemon registered as buffer id. */
static int alloc_record(spc_client *c, const ptr_info *pi, uint64_t id,
                        spc__gpu_alloc **a_p) {
  spc__gpu_alloc *a = calloc(1, sizeof(*a));
  size_t cb = (size_t)pi->nchunks * sizeof(*pi->chunks);
  if (a != NULL && cb > 0 && (a->chunks = malloc(cb)) == NULL) {
    free(a);
    a = NULL;
  }
  if (a == NULL)
    return spc__fail(c, SPC_ENOMEM, "calloc of an allocation record failed");
  if (cb > 0)
    memcpy(a->chunks, pi->chunks, cb);
  a->nchunks = pi->nchunks;
  a->daemon_id = id;
  a->base = pi->base;
  a->size = pi->size;
  a->alloc_id = pi->alloc_id;
  a->device = pi->device;
  *a_p = a;
  return SPC_OK;
}

/* Register the whole allocation (or run of cuMem mappings) with the
 * daemon. */
static int alloc_register(spc_client *c, const spc__cu_api *cu,
                          const ptr_info *pi, spc__gpu_alloc **a_p) {
  spc__gpu_dev *d;
  spc__CUuuid uuid;
  share sh;
  Spcoll__BufRegister reg = SPCOLL__BUF_REGISTER__INIT;
  int rc = spc__gpu_dev_get(c, pi->device, &d);
  if (rc < 0)
    return rc;
  spc__CUresult r = cu->DeviceGetUuid(&uuid, d->cudev);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuDeviceGetUuid(%d): %s", pi->device,
                     spc__cu_str(cu, r));
  if ((rc = share_make(c, cu, pi, &sh, &reg)) < 0)
    return rc;
  Spcoll__Frame f = SPCOLL__FRAME__INIT, *reply = NULL;
  reg.size = pi->size;
  reg.alloc_offset = 0;
  reg.device_uuid.len = sizeof(uuid);
  reg.device_uuid.data = (uint8_t *)&uuid;
  f.body_case = SPCOLL__FRAME__BODY_BUF_REGISTER;
  f.buf_register = &reg;
  rc = spc__register_call(c, &f, sh.fds, sh.nfds, &reply);
  for (int i = 0; i < sh.nfds; i++)
    close(sh.fds[i]); /* the daemon has its own now */
  if (rc == SPC_OK && reply->body_case != SPCOLL__FRAME__BODY_BUF_REGISTERED)
    rc = spc__fail(c, SPC_EPROTOCOL, "spcolld answered buf_register with %s",
                   spf_body_name(reply->body_case));
  if (rc == SPC_OK)
    rc = alloc_record(c, pi, reply->buf_registered->buffer_id, a_p);
  if (reply != NULL)
    spcoll__frame__free_unpacked(reply, NULL);
  return rc;
}

/* The registration a buffer inside pi can share, or NULL. A freed
 * allocation's address may come back for a new one: the buffer id (the
 * physical allocations, for cuMem memory) tells them apart. */
static spc__gpu_alloc *alloc_find(spc__gpu_client *g, const ptr_info *pi) {
  for (spc__gpu_alloc *a = g->allocs; a != NULL; a = a->next)
    if (pi->nchunks > 0
            ? a->chunks != NULL && a->device == pi->device &&
                  spc__gpu_vmm_covers(a, pi->chunks, pi->nchunks)
            : a->chunks == NULL && a->base == pi->base &&
                  a->alloc_id == pi->alloc_id)
      return a;
  return NULL;
}

static int register_device(spc_client *c, void *ptr, size_t size, int owned,
                           spc_buffer **buf_p) {
  if (size == 0)
    return spc__fail(c, SPC_EINVAL, "device buffer of 0 bytes");
  const spc__cu_api *cu;
  spc__gpu_client *g;
  int rc = spc__gpu_begin(c, &cu, &g);
  if (rc < 0)
    return rc;
  ptr_info pi;
  rc = ptr_query(c, cu, ptr, size, &pi);
  if (rc < 0)
    return rc;
  spc__gpu_alloc *a = alloc_find(g, &pi);
  spc_buffer *b = calloc(1, sizeof(*b));
  spc__gpu_buf *gb = calloc(1, sizeof(*gb));
  if (b == NULL || gb == NULL) {
    free(b);
    free(gb);
    return spc__fail(c, SPC_ENOMEM, "calloc of a buffer failed");
  }
  if (a == NULL) {
    rc = alloc_register(c, cu, &pi, &a);
    if (rc < 0) {
      free(b);
      free(gb);
      return rc;
    }
    a->next = g->allocs;
    g->allocs = a;
  }
  a->refs++;
  gb->alloc = a;
  gb->off = (uint64_t)(uintptr_t)ptr - a->base;
  gb->owned = owned;
  b->client = c;
  b->id = a->daemon_id;
  b->data = ptr;
  b->size = size;
  b->gpu = gb;
  b->next = c->buffers;
  c->buffers = b;
  *buf_p = b;
  return SPC_OK;
}

/* After a daemon restart: every allocation shared with the new daemon
 * as it was with the old one (the driver exports it again: a new IPC
 * handle or new file descriptors), and every device buffer on its new id.
 * An allocation freed meanwhile under a live buffer fails, naming it. */
int spc__gpu_register_again(spc_client *c) {
  spc__gpu_client *g = c->gpu;
  const spc__cu_api *cu = g != NULL ? spc__cu(c) : NULL;
  if (g == NULL || cu == NULL)
    return SPC_OK;
  for (spc__gpu_alloc *a = g->allocs; a != NULL; a = a->next) {
    ptr_info pi;
    spc__gpu_alloc *n;
    int rc = ptr_query(c, cu, (void *)(uintptr_t)a->base, a->size, &pi);
    if (rc == SPC_OK)
      rc = alloc_register(c, cu, &pi, &n);
    if (rc < 0)
      return rc;
    a->daemon_id = n->daemon_id;
    free(n->chunks);
    free(n);
  }
  for (spc_buffer *b = c->buffers; b != NULL; b = b->next)
    if (b->gpu != NULL)
      b->id = ((spc__gpu_buf *)b->gpu)->alloc->daemon_id;
  return SPC_OK;
}

int spc_buffer_register_device(spc_client *c, void *ptr, size_t size,
                               spc_buffer **buf_p) {
  if (c == NULL)
    return SPC_EINVAL;
  if (ptr == NULL || buf_p == NULL)
    return spc__fail(c, SPC_EINVAL, "spc_buffer_register_device: %s is NULL",
                     ptr == NULL ? "ptr" : "buf_p");
  return register_device(c, ptr, size, 0, buf_p);
}

int spc_buffer_alloc_device(spc_client *c, int device, size_t size,
                            spc_buffer **buf_p) {
  if (c == NULL || buf_p == NULL)
    return SPC_EINVAL;
  if (size == 0)
    return spc__fail(c, SPC_EINVAL, "buffer size 0: must be at least 1 byte");
  spc__gpu_dev *d;
  int rc = spc__gpu_dev_get(c, device, &d);
  if (rc < 0)
    return rc;
  const spc__cu_api *cu = spc__cu(c);
  rc = spc__gpu_push(c, cu, d->ctx);
  if (rc < 0)
    return rc;
  spc__CUdeviceptr p = 0;
  spc__CUresult r = cu->MemAlloc(&p, size);
  if (r == SPC__CUDA_SUCCESS) {
    r = cu->MemsetD8(p, 0, size);
    if (r == SPC__CUDA_SUCCESS)
      r = cu->CtxSynchronize(); /* zeroed before anyone reads it */
    if (r != SPC__CUDA_SUCCESS)
      cu->MemFree(p);
  }
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuMemAlloc of %zu bytes on CUDA device "
                     "%d: %s", size, device, spc__cu_str(cu, r));
  rc = register_device(c, (void *)(uintptr_t)p, size, 1, buf_p);
  if (rc < 0 && spc__gpu_push(c, cu, d->ctx) == SPC_OK) {
    cu->MemFree(p);
    spc__gpu_pop(cu);
  }
  return rc;
}

int spc_buffer_device_range(const spc_buffer *b, void **base_p,
                            size_t *size_p) {
  if (b == NULL || b->gpu == NULL || base_p == NULL || size_p == NULL)
    return SPC_EINVAL;
  const spc__gpu_alloc *a = ((const spc__gpu_buf *)b->gpu)->alloc;
  *base_p = (void *)(uintptr_t)a->base;
  *size_p = (size_t)a->size;
  return SPC_OK;
}

int spc_buffer_device(const spc_buffer *b) {
  if (b == NULL || b->gpu == NULL)
    return -1;
  return ((const spc__gpu_buf *)b->gpu)->alloc->device;
}

uint64_t spc__gpu_wire_offset(const spc_buffer *b, uint64_t offset) {
  const spc__gpu_buf *gb = b->gpu;
  return gb == NULL ? offset : gb->off + offset;
}

static void alloc_unlink(spc__gpu_client *g, spc__gpu_alloc *a);

static void buffer_unlink(spc_buffer *b) {
  for (spc_buffer **p = &b->client->buffers; *p != NULL; p = &(*p)->next)
    if (*p == b) {
      *p = b->next;
      return;
    }
}

static void alloc_unlink(spc__gpu_client *g, spc__gpu_alloc *a) {
  for (spc__gpu_alloc **p = &g->allocs; *p != NULL; p = &(*p)->next)
    if (*p == a) {
      *p = a->next;
      return;
    }
}

/* cuMemFree of memory spc_buffer_alloc_device made on device. */
static int owned_free(spc_client *c, int device, uint64_t mem) {
  const spc__cu_api *cu = spc__cu_if_loaded();
  spc__gpu_dev *d;
  int rc = spc__gpu_dev_get(c, device, &d);
  if (rc == SPC_OK)
    rc = spc__gpu_push(c, cu, d->ctx);
  if (rc < 0)
    return rc;
  spc__CUresult r = cu->MemFree((spc__CUdeviceptr)mem);
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuMemFree(0x%llx): %s",
                     (unsigned long long)mem, spc__cu_str(cu, r));
  return SPC_OK;
}

/* The allocation's last buffer went: the daemon closes its mapping, and
 * only then may memory the library made be freed (freeing exported memory
 * an importer still maps is undefined). */
static int alloc_release(spc_client *c, spc__gpu_alloc *a) {
  /* Ops whose answers nobody waits for (stream flags) may still use the
   * allocation in the daemon, and the caller frees it once this returns:
   * their answers first (each comes once the daemon's work is done). */
  while (c->ndetached > 0 && !c->broken)
    if (spc__pump_any(c, 1) < 0)
      break;
  Spcoll__BufRelease rel = SPCOLL__BUF_RELEASE__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  rel.buffer_id = a->daemon_id;
  f.body_case = SPCOLL__FRAME__BODY_BUF_RELEASE;
  f.buf_release = &rel;
  int rc = spc__call(c, &f, -1, NULL);
  if (a->free_mem) {
    int frc = owned_free(c, a->device, a->base);
    rc = rc == SPC_OK ? frc : rc;
  }
  alloc_unlink(c->gpu, a);
  free(a->chunks);
  free(a);
  return rc;
}

int spc__gpu_buffer_free(spc_buffer *b) {
  spc_client *c = b->client;
  spc__gpu_buf *gb = b->gpu;
  spc__gpu_alloc *a = gb->alloc;
  if (gb->owned && a->refs > 1)
    return spc__fail(c, SPC_EINVAL, "%d other buffer(s) are registered inside "
                     "this device allocation: free them first", a->refs - 1);
  int src = gb->sym != NULL ? spc__sym_free(c, gb->sym, 1) : SPC_OK;
  a->free_mem |= gb->owned;
  int rc = --a->refs == 0 ? alloc_release(c, a) : SPC_OK;
  rc = src < 0 ? src : rc;
  buffer_unlink(b);
  free(gb);
  free(b);
  return rc;
}

void spc__gpu_buffer_forget(spc_buffer *b) {
  spc__gpu_buf *gb = b->gpu;
  spc__gpu_alloc *a = gb->alloc;
  if (gb->sym != NULL)
    (void)spc__sym_free(b->client, gb->sym, 0);
  a->free_mem |= gb->owned;
  if (--a->refs == 0)
    alloc_release(b->client, a);
  free(gb);
}
