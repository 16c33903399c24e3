/* libnvidia-ml.so.1 for the simulator: the NVML entry points PyPI's torch
 * looks up (c10/cuda: its peer-to-peer checks and the fabric query of
 * expandable segments). torch asserts that nvmlInit_v2 and
 * nvmlDeviceGetHandleByPciBusId_v2 succeed, and calls the others through
 * pointers it does not check, so without this library expandable
 * segments crash on a null call. The simulated GPUs have no fabric, no
 * NVLink and no process accounting: those queries answer
 * NVML_ERROR_NOT_SUPPORTED, which torch handles (it warns and goes on).
 * Signatures are NVML's, with its opaque types as void pointers (no
 * nvml.h is installed to build against). */
#include <stdint.h>

#define API __attribute__((visibility("default")))

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2,
       NVML_ERROR_NOT_SUPPORTED = 3 };

/* The one device handle given out: NVML's handles are opaque. */
static const int sim_nvml_device;

API int nvmlInit_v2(void) { return NVML_SUCCESS; }

API int nvmlShutdown(void) { return NVML_SUCCESS; }

API int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
  if (bus == 0 || dev == 0)
    return NVML_ERROR_INVALID_ARGUMENT;
  *dev = (void *)&sim_nvml_device;
  return NVML_SUCCESS;
}

API int nvmlDeviceGetGpuFabricInfoV(void *dev, void *info) {
  (void)dev, (void)info;
  return NVML_ERROR_NOT_SUPPORTED;
}

API int nvmlDeviceGetComputeRunningProcesses(void *dev, unsigned *count,
                                             void *infos) {
  (void)dev, (void)count, (void)infos;
  return NVML_ERROR_NOT_SUPPORTED;
}

API int nvmlDeviceGetNvLinkRemoteDeviceType(void *dev, unsigned link,
                                            int *type) {
  (void)dev, (void)link, (void)type;
  return NVML_ERROR_NOT_SUPPORTED;
}

API int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *dev, unsigned link,
                                            void *pci) {
  (void)dev, (void)link, (void)pci;
  return NVML_ERROR_NOT_SUPPORTED;
}

API int nvmlSystemGetCudaDriverVersion_v2(int *version) {
  (void)version;
  return NVML_ERROR_NOT_SUPPORTED;
}

API const char *nvmlErrorString(int result) {
  return result == NVML_SUCCESS ? "Success"
         : result == NVML_ERROR_NOT_SUPPORTED ? "Not Supported"
                                              : "Unknown Error";
}
