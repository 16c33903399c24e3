/* libcuda.so.1's virtual memory management (cuMem*) on sim_vmm.c: the
 * argument checks of CUDA's driver API reference, each failing with the
 * code it lists, then the core. cuda.h maps none of these names to a
 * versioned symbol, so the plain names are the entry points (what torch
 * finds through dlsym or cudaGetDriverEntryPointByVersion, whose _v2
 * attempt finds nothing and falls back). Rule host-sync: cuMemUnmap and
 * cuMemSetAccess are documented synchronous; cuMemCreate, cuMemMap,
 * cuMemRelease and cuMemAddressFree change the GPUs' memory or page
 * tables, which CUDA does not promise to do without waiting for them, so
 * all six are flagged on a loop thread (sim_no_block). */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "cudrv.h"
#include "sim.h"

#define API __attribute__((visibility("default")))
#define C cudrv_result
#define PTR(p) ((void *)(uintptr_t)(p))

#define MAY_WAIT "may wait for the GPU"

/* A GPU as a location (CU_MEM_LOCATION_TYPE_DEVICE and its ordinal), or
 * -1 with the error in *rc: SIM_EINVAL for another kind of location (host
 * memory is not simulated), SIM_EDEVICE for no such GPU. */
static int location_dev(const CUmemLocation *l, int *rc) {
  if (l == NULL || l->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    *rc = SIM_EINVAL;
    return -1;
  }
  if (l->id < 0 || l->id >= sim_cfg()->ndev) {
    *rc = SIM_EDEVICE;
    return -1;
  }
  return l->id;
}

/* What cuMemCreate and cuMemGetAllocationGranularity accept: pinned
 * memory on one GPU (win32HandleMetaData must be zero off Windows). */
static int prop_dev(const CUmemAllocationProp *p, int *rc) {
  if (p == NULL || p->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      p->win32HandleMetaData != NULL) {
    *rc = SIM_EINVAL;
    return -1;
  }
  return location_dev(&p->location, rc);
}

/* Requested handle types: none or a POSIX file descriptor. Fabric and
 * Windows handles are not supported here (the GPUs say so in their
 * attributes); bits of no type are invalid. */
static int handle_types_rc(unsigned t) {
  const unsigned known =
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
      CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;
  if (t & ~known)
    return SIM_EINVAL;
  return t & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ? SIM_ENOTSUP
                                                                 : SIM_OK;
}

API CUresult cuMemGetAllocationGranularity(
    size_t *granularity, const CUmemAllocationProp *prop,
    CUmemAllocationGranularity_flags option) {
  int rc = SIM_OK;
  if (granularity == NULL || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                              option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return C(SIM_EINVAL);
  if (prop_dev(prop, &rc) < 0)
    return C(rc);
  *granularity = SIM_VMM_GRAN;
  return C(SIM_OK);
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                         const CUmemAllocationProp *prop,
                         unsigned long long flags) {
  sim_no_block("cuMemCreate", MAY_WAIT " (it allocates device memory)");
  int rc = SIM_OK;
  int dev = prop_dev(prop, &rc);
  if (handle == NULL || flags != 0)
    return C(SIM_EINVAL);
  if (dev < 0)
    return C(rc);
  rc = handle_types_rc((unsigned)prop->requestedHandleTypes);
  if (rc != SIM_OK)
    return C(rc);
  uint64_t h = 0;
  rc = sim_vmm_create(dev, size, (int)prop->requestedHandleTypes, &h);
  if (rc == SIM_OK)
    *handle = h;
  return C(rc);
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  sim_no_block("cuMemRelease", MAY_WAIT " (freeing device memory)");
  return C(sim_vmm_release(handle, "cuMemRelease"));
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
                                 size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags) {
  void *p = NULL;
  if (ptr == NULL || flags != 0)
    return C(SIM_EINVAL);
  int rc = sim_vmm_reserve(size, alignment, addr, &p);
  if (rc == SIM_OK)
    *ptr = (CUdeviceptr)(uintptr_t)p;
  return C(rc);
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  sim_no_block("cuMemAddressFree", MAY_WAIT " (it changes the GPUs' page "
                                            "tables)");
  return C(sim_vmm_addr_free(PTR(ptr), size, "cuMemAddressFree"));
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle,
                      unsigned long long flags) {
  sim_no_block("cuMemMap", MAY_WAIT " (it changes the GPUs' page tables)");
  if (flags != 0)
    return C(SIM_EINVAL);
  return C(sim_vmm_map(PTR(ptr), size, offset, handle));
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  sim_no_block("cuMemUnmap", "waits for the GPU (cuMemUnmap is synchronous)");
  return C(sim_vmm_unmap(PTR(ptr), size));
}

/* Every descriptor is checked before any is applied. */
API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
                            const CUmemAccessDesc *desc, size_t count) {
  sim_no_block("cuMemSetAccess", "waits for the GPU (cuMemSetAccess is "
                                 "synchronous)");
  sim_vmm_access a[SIM_MAX_DEV * 2];
  if (desc == NULL || count == 0 || count > SIM_MAX_DEV * 2)
    return C(SIM_EINVAL);
  for (size_t i = 0; i < count; i++) {
    int rc = SIM_OK, f = (int)desc[i].flags;
    a[i].dev = location_dev(&desc[i].location, &rc);
    a[i].flags = f;
    if (a[i].dev < 0)
      return C(rc);
    if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return C(SIM_EINVAL);
  }
  return C(sim_vmm_set_access(PTR(ptr), size, a, (int)count));
}

API CUresult cuMemGetAccess(unsigned long long *flags,
                            const CUmemLocation *location, CUdeviceptr ptr) {
  int rc = SIM_OK, f = 0;
  int dev = location_dev(location, &rc);
  if (flags == NULL)
    return C(SIM_EINVAL);
  if (dev < 0)
    return C(rc);
  rc = sim_vmm_get_access(PTR(ptr), dev, &f);
  if (rc == SIM_OK)
    *flags = (unsigned long long)f;
  return C(rc);
}

API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle,
                                         void *addr) {
  uint64_t h = 0;
  if (handle == NULL)
    return C(SIM_EINVAL);
  int rc = sim_vmm_retain(addr, &h);
  if (rc == SIM_OK)
    *handle = h;
  return C(rc);
}

API CUresult cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
  int dev = 0, types = 0;
  if (prop == NULL)
    return C(SIM_EINVAL);
  int rc = sim_vmm_props(handle, &dev, &types);
  if (rc != SIM_OK)
    return C(rc);
  memset(prop, 0, sizeof(*prop));
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = (CUmemAllocationHandleType)types;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = dev;
  return C(SIM_OK);
}

/* A POSIX file descriptor (an int at shareableHandle) the caller owns,
 * for an allocation made asking for that type; CUDA's reference names
 * no code for one made without it: CUDA_ERROR_INVALID_VALUE, the code
 * it lists for bad arguments. Other types: not supported here. */
API CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                          CUmemGenericAllocationHandle handle,
                                          CUmemAllocationHandleType type,
                                          unsigned long long flags) {
  int fd = -1;
  if (shareableHandle == NULL || flags != 0)
    return C(SIM_EINVAL);
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return C(SIM_ENOTSUP);
  int rc = sim_vmm_export_fd(handle, &fd);
  if (rc == SIM_OK)
    memcpy(shareableHandle, &fd, sizeof(fd));
  return C(rc);
}

/* osHandle is the descriptor itself (as an integer in a pointer, CUDA's
 * convention for POSIX descriptors); the caller may close it after. */
API CUresult
cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                               void *osHandle, CUmemAllocationHandleType type) {
  uint64_t h = 0;
  if (handle == NULL)
    return C(SIM_EINVAL);
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return C(SIM_ENOTSUP);
  int rc = sim_vmm_import_fd((int)(intptr_t)osHandle, &h,
                             "cuMemImportFromShareableHandle");
  if (rc == SIM_OK)
    *handle = h;
  return C(rc);
}
