/* Device memory made with CUDA's virtual memory management (cuMemCreate
 * and cuMemMap: torch's expandable segments, NCCL's own buffers), which
 * legacy IPC handles cannot share. Each physical allocation under a
 * buffer is exported as a POSIX file descriptor and sent with the
 * registration (proto: BufRegister.vmm_sizes); descriptors also reach a
 * daemon in another PID namespace, where legacy handles cannot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_gpu.h"

static int attr(const spc__cu_api *cu, void *out, int which, uint64_t p) {
  return cu->PointerGetAttribute(out, which, (spc__CUdeviceptr)p);
}

/* The mapping that holds address a, and the physical allocation there,
 * which must be on `device`. */
static int chunk_at(spc_client *c, const spc__cu_api *cu, uint64_t a,
                    int device, spc__gpu_chunk *ch) {
  unsigned long long base = 0, block = 0, types = 0;
  size_t size = 0;
  int dev = -1;
  spc__CUresult r = attr(cu, &base,
                         SPC__CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, a);
  if (r == SPC__CUDA_SUCCESS)
    r = attr(cu, &dev, SPC__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a);
  if (r == SPC__CUDA_SUCCESS)
    r = attr(cu, &size, SPC__CU_POINTER_ATTRIBUTE_MAPPING_SIZE, a);
  if (r == SPC__CUDA_SUCCESS)
    r = attr(cu, &block, SPC__CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, a);
  if (r == SPC__CUDA_SUCCESS)
    r = attr(cu, &types, SPC__CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, a);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuPointerGetAttribute(0x%llx) of cuMem "
                     "memory (mapping, block id, handle types): %s",
                     (unsigned long long)a, spc__cu_str(cu, r));
  if (!(types & SPC__CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return spc__fail(c, SPC_EINVAL, "the cuMem allocation at 0x%llx was "
                     "created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR "
                     "in its requestedHandleTypes (allowed types 0x%llx): "
                     "it cannot be shared with spcolld",
                     (unsigned long long)a, types);
  if (dev != device)
    return spc__fail(c, SPC_EINVAL, "the cuMem allocation at 0x%llx is on "
                     "CUDA device %d, the buffer's first on %d: one buffer "
                     "is memory of one GPU", (unsigned long long)a, dev,
                     device);
  if (size == 0 || base > a || a - base >= size)
    return spc__fail(c, SPC_EDEVICE, "the driver places 0x%llx in a mapping "
                     "of %zu bytes at 0x%llx", (unsigned long long)a, size,
                     base);
  *ch = (spc__gpu_chunk){base, size, block};
  return SPC_OK;
}

int spc__gpu_vmm_chunks(spc_client *c, const spc__cu_api *cu, uint64_t p,
                        size_t size, int device, spc__gpu_chunk *out,
                        int *n_p) {
  int n = 0;
  if (size == 0 || size > UINT64_MAX - p)
    return spc__fail(c, SPC_EINVAL, "%zu bytes at 0x%llx: not a range of "
                     "memory", size, (unsigned long long)p);
  for (uint64_t a = p; a < p + size; a = out[n - 1].base + out[n - 1].size) {
    if (n == SPK_VMM_MAX_CHUNKS)
      return spc__fail(c, SPC_EINVAL, "%zu bytes at 0x%llx span more than "
                       "%d cuMem allocations, the most one buffer may: "
                       "register it in parts", size, (unsigned long long)p,
                       SPK_VMM_MAX_CHUNKS);
    int rc = chunk_at(c, cu, a, device, &out[n]);
    if (rc < 0)
      return rc;
    n++;
  }
  *n_p = n;
  return SPC_OK;
}

int spc__gpu_vmm_export(spc_client *c, const spc__cu_api *cu,
                        const spc__gpu_chunk *ch, int n, int *fds) {
  if (cu->MemRetainAllocationHandle == NULL ||
      cu->MemExportToShareableHandle == NULL || cu->MemRelease == NULL)
    return spc__fail(c, SPC_EUNSUPPORTED, "the CUDA driver lacks "
                     "cuMemRetainAllocationHandle / "
                     "cuMemExportToShareableHandle / cuMemRelease: cuMem "
                     "memory cannot be shared");
  for (int i = 0; i < n; i++) {
    spc__CUmemGenericAllocationHandle h = 0;
    int fd = -1;
    spc__CUresult r =
        cu->MemRetainAllocationHandle(&h, (void *)(uintptr_t)ch[i].base);
    if (r == SPC__CUDA_SUCCESS) {
      r = cu->MemExportToShareableHandle(
          &fd, h, SPC__CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      cu->MemRelease(h);
    }
    if (r != SPC__CUDA_SUCCESS || fd < 0) {
      int rc = spc__fail(c, SPC_EDEVICE, "exporting the cuMem allocation at "
                         "0x%llx as a file descriptor "
                         "(cuMemRetainAllocationHandle, "
                         "cuMemExportToShareableHandle): %s",
                         (unsigned long long)ch[i].base, spc__cu_str(cu, r));
      while (i > 0)
        close(fds[--i]);
      return rc;
    }
    fds[i] = fd;
  }
  return SPC_OK;
}

int spc__gpu_vmm_covers(const spc__gpu_alloc *a, const spc__gpu_chunk *ch,
                        int n) {
  for (int j = 0; j + n <= a->nchunks; j++) {
    if (a->chunks[j].base != ch[0].base)
      continue;
    for (int k = 0; k < n; k++)
      if (memcmp(&a->chunks[j + k], &ch[k], sizeof(*ch)) != 0)
        return 0;
    return 1;
  }
  return 0;
}
