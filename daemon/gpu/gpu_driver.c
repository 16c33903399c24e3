/* The CUDA driver's entry points, taken through the runtime
 * (cudaGetDriverEntryPointByVersion) so the daemon links libcudart alone
 * and a driver without a call is told apart from a failure. */
#include "gpu.h"

#ifdef SPC_HAVE_CUDA

#include <stdio.h>

void *spd_gpu_driver_entry(const char *sym, char *why, size_t len) {
  void *p = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
  cudaError_t e = cudaGetDriverEntryPointByVersion(sym, &p, 12000,
                                                   cudaEnableDefault, &q);
  if (e == cudaSuccess && q == cudaDriverEntryPointSuccess && p != NULL)
    return p;
  if (why != NULL && why[0] == '\0')
    snprintf(why, len, "the CUDA driver has no %s "
             "(cudaGetDriverEntryPointByVersion: %s, query result %d)", sym,
             cudaGetErrorString(e), (int)q);
  return NULL;
}

#endif
