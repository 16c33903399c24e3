/* libspclient declares the few CUDA driver types, constants and entry
 * points it uses itself (client/client_gpu_cu.h), so it builds and runs
 * without CUDA. Where CUDA is found at build time this suite holds them
 * against cuda.h and the driver library's exported names. */
#include <check.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check_run.h"
#include "client_gpu_cu.h"
#include "spcoll.h"

#ifdef SPC_HAVE_CUDA
#include <cuda.h>

_Static_assert((int)SPC__CUDA_SUCCESS == (int)CUDA_SUCCESS &&
                   (int)SPC__CUDA_ERROR_NOT_READY ==
                       (int)CUDA_ERROR_NOT_READY &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_CONTEXT ==
                       (int)CU_POINTER_ATTRIBUTE_CONTEXT &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_MEMORY_TYPE ==
                       (int)CU_POINTER_ATTRIBUTE_MEMORY_TYPE &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_BUFFER_ID ==
                       (int)CU_POINTER_ATTRIBUTE_BUFFER_ID &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_IS_MANAGED ==
                       (int)CU_POINTER_ATTRIBUTE_IS_MANAGED &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL ==
                       (int)CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
                   (int)SPC__CU_MEMORYTYPE_DEVICE ==
                       (int)CU_MEMORYTYPE_DEVICE &&
                   (int)SPC__CU_EVENT_DISABLE_TIMING ==
                       (int)CU_EVENT_DISABLE_TIMING &&
                   (int)SPC__CU_EVENT_INTERPROCESS ==
                       (int)CU_EVENT_INTERPROCESS &&
                   (int)SPC__CU_MEMHOSTREGISTER_PORTABLE ==
                       (int)CU_MEMHOSTREGISTER_PORTABLE &&
                   (int)SPC__CU_MEMHOSTREGISTER_DEVICEMAP ==
                       (int)CU_MEMHOSTREGISTER_DEVICEMAP &&
                   (int)SPC__CU_STREAM_WAIT_VALUE_GEQ ==
                       (int)CU_STREAM_WAIT_VALUE_GEQ &&
                   (int)SPC__CU_STREAM_WRITE_VALUE_DEFAULT ==
                       (int)CU_STREAM_WRITE_VALUE_DEFAULT &&
                   (int)SPC__CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS ==
                       (int)CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
               "client_gpu_cu.h constants differ from cuda.h");
_Static_assert((int)SPC__CUDA_ERROR_INVALID_VALUE ==
                       (int)CUDA_ERROR_INVALID_VALUE &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE ==
                       (int)CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES ==
                       (int)CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_MAPPING_SIZE ==
                       (int)CU_POINTER_ATTRIBUTE_MAPPING_SIZE &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR ==
                       (int)CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR &&
                   (int)SPC__CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID ==
                       (int)CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID &&
                   (int)SPC__CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ==
                       (int)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
               "client_gpu_cu.h's cuMem constants differ from cuda.h");
_Static_assert((int)SPC__CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS ==
                       (int)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS &&
                   (int)SPC__CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ==
                       (int)CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT &&
                   sizeof(spc__CUDA_MEMCPY2D) == sizeof(CUDA_MEMCPY2D) &&
                   offsetof(spc__CUDA_MEMCPY2D, srcMemoryType) ==
                       offsetof(CUDA_MEMCPY2D, srcMemoryType) &&
                   offsetof(spc__CUDA_MEMCPY2D, srcDevice) ==
                       offsetof(CUDA_MEMCPY2D, srcDevice) &&
                   offsetof(spc__CUDA_MEMCPY2D, srcPitch) ==
                       offsetof(CUDA_MEMCPY2D, srcPitch) &&
                   offsetof(spc__CUDA_MEMCPY2D, dstMemoryType) ==
                       offsetof(CUDA_MEMCPY2D, dstMemoryType) &&
                   offsetof(spc__CUDA_MEMCPY2D, dstDevice) ==
                       offsetof(CUDA_MEMCPY2D, dstDevice) &&
                   offsetof(spc__CUDA_MEMCPY2D, dstPitch) ==
                       offsetof(CUDA_MEMCPY2D, dstPitch) &&
                   offsetof(spc__CUDA_MEMCPY2D, WidthInBytes) ==
                       offsetof(CUDA_MEMCPY2D, WidthInBytes) &&
                   offsetof(spc__CUDA_MEMCPY2D, Height) ==
                       offsetof(CUDA_MEMCPY2D, Height),
               "client_gpu_cu.h's CUDA_MEMCPY2D differs from cuda.h");
_Static_assert(sizeof(spc__CUipcMemHandle) == sizeof(CUipcMemHandle) &&
                   sizeof(spc__CUipcEventHandle) == sizeof(CUipcEventHandle) &&
                   sizeof(spc__CUuuid) == sizeof(CUuuid) &&
                   sizeof(spc__CUdeviceptr) == sizeof(CUdeviceptr) &&
                   sizeof(spc__CUdevice) == sizeof(CUdevice) &&
                   sizeof(spc__CUresult) == sizeof(CUresult) &&
                   sizeof(spc__CUmemGenericAllocationHandle) ==
                       sizeof(CUmemGenericAllocationHandle),
               "client_gpu_cu.h types differ from cuda.h");
#endif

/* Every entry point is exported by the driver under the name loaded. */
START_TEST(entry_points_exist) {
#if defined(SPC_HAVE_CUDA) && defined(SPC_CUDA_STUB)
  void *lib = dlopen(SPC_CUDA_STUB, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(lib != NULL, "dlopen(%s): %s", SPC_CUDA_STUB, dlerror());
#define CHECK_SYM(name, sym, args)                                           \
  ck_assert_msg(dlsym(lib, sym) != NULL, "%s lacks %s", SPC_CUDA_STUB, sym);
  SPC__CU_FUNCS(CHECK_SYM)
  SPC__CU_OPT_FUNCS(CHECK_SYM)
#undef CHECK_SYM
  dlclose(lib);
#elif defined(SPC_HAVE_CUDA)
  fprintf(stderr, "no driver stub (lib64/stubs/libcuda.so) under the CUDA "
          "toolkit: entry point names not checked\n");
#else
  fprintf(stderr, "built without CUDA: no cuda.h or driver to hold the "
          "declarations against\n");
#endif
}
END_TEST

/* Host buffers are not device memory; NULL arguments are refused. */
START_TEST(public_checks) {
  ck_assert_int_eq(spc_buffer_device(NULL), -1);
  void *base;
  size_t size;
  ck_assert_int_eq(spc_buffer_device_range(NULL, &base, &size), SPC_EINVAL);
  ck_assert_int_eq(spc_gpu_probe(NULL), SPC_EINVAL);
  ck_assert_int_eq(spc_buffer_register_device(NULL, NULL, 0, NULL),
                   SPC_EINVAL);
  ck_assert_int_eq(spc_buffer_alloc_device(NULL, 0, 1, NULL), SPC_EINVAL);
  ck_assert_int_eq(spc_wait_on_stream(NULL, NULL), SPC_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("client_cuda_abi");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, entry_points_exist);
  tcase_add_test(tc, public_checks);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
