/* The CUDA driver, loaded at run time (no link-time CUDA dependency), and
 * the client's GPU state: its devices' primary contexts and events
 * (client_gpu.c registers device memory). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_gpu.h"

/* ---- the driver --------------------------------------------------------- */

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static spc__cu_api cu_api;
static const spc__cu_api *cu_loaded;
static char cu_why[256];

static void cu_load(void) {
  const char *path = getenv("SPCOLL_LIBCUDA");
  if (path == NULL || path[0] == '\0')
    path = "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    snprintf(cu_why, sizeof(cu_why), "no CUDA driver: dlopen(%s): %s", path,
             dlerror());
    return;
  }
#define SPC__CU_LOAD(name, sym, args)                                        \
  *(void **)&cu_api.name = dlsym(lib, sym);                                  \
  if (cu_api.name == NULL) {                                                 \
    snprintf(cu_why, sizeof(cu_why), "the CUDA driver %s lacks %s", path,    \
             sym);                                                           \
    return;                                                                  \
  }
  SPC__CU_FUNCS(SPC__CU_LOAD)
#undef SPC__CU_LOAD
#define SPC__CU_LOAD_OPT(name, sym, args)                                    \
  *(void **)&cu_api.name = dlsym(lib, sym);
  SPC__CU_OPT_FUNCS(SPC__CU_LOAD_OPT)
#undef SPC__CU_LOAD_OPT
  spc__CUresult r = cu_api.Init(0);
  if (r != SPC__CUDA_SUCCESS) {
    /* The library stays loaded: its handle is the process's either way. */
    snprintf(cu_why, sizeof(cu_why), "cuInit failed: %s",
             spc__cu_str(&cu_api, r));
    return;
  }
  cu_loaded = &cu_api;
}

const char *spc__cu_str(const spc__cu_api *cu, spc__CUresult r) {
  static __thread char buf[64];
  const char *s = NULL;
  if (cu != NULL && cu->GetErrorString != NULL &&
      cu->GetErrorString(r, &s) == SPC__CUDA_SUCCESS && s != NULL)
    return s;
  snprintf(buf, sizeof(buf), "CUDA driver error %d", r);
  return buf;
}

const spc__cu_api *spc__cu_if_loaded(void) {
  return cu_loaded;
}

const spc__cu_api *spc__cu(spc_client *c) {
  pthread_once(&cu_once, cu_load);
  if (cu_loaded == NULL) {
    if (c != NULL)
      spc__fail(c, SPC_EUNSUPPORTED, "%s", cu_why);
    else
      snprintf(spc__connect_error(), 512, "%s", cu_why);
  }
  return cu_loaded;
}

int spc_gpu_probe(int *ndev_p) {
  if (ndev_p == NULL)
    return SPC_EINVAL;
  const spc__cu_api *cu = spc__cu(NULL);
  if (cu == NULL)
    return SPC_EUNSUPPORTED;
  int n = 0;
  spc__CUresult r = cu->DeviceGetCount(&n);
  if (r != SPC__CUDA_SUCCESS || n == 0) {
    snprintf(spc__connect_error(), 512, "no CUDA device: cuDeviceGetCount: "
             "%s, %d devices", spc__cu_str(cu, r), n);
    return SPC_EUNSUPPORTED;
  }
  *ndev_p = n;
  return SPC_OK;
}

int spc__gpu_push(spc_client *c, const spc__cu_api *cu, spc__CUcontext ctx) {
  spc__CUresult r = cu->CtxPushCurrent(ctx);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuCtxPushCurrent: %s",
                     spc__cu_str(cu, r));
  return SPC_OK;
}

void spc__gpu_pop(const spc__cu_api *cu) {
  spc__CUcontext ignored;
  cu->CtxPopCurrent(&ignored);
}

/* ---- per-client state --------------------------------------------------- */

/* spc_client->gpu, made on first use; NULL (said) if it cannot be. */
static spc__gpu_client *gpu_client(spc_client *c) {
  if (c->gpu == NULL) {
    c->gpu = calloc(1, sizeof(spc__gpu_client));
    if (c->gpu == NULL)
      spc__fail(c, SPC_ENOMEM, "calloc of the client's GPU state failed");
  }
  return c->gpu;
}

int spc__gpu_begin(spc_client *c, const spc__cu_api **cu_p,
                   spc__gpu_client **g_p) {
  *cu_p = spc__cu(c);
  if (*cu_p == NULL)
    return SPC_EUNSUPPORTED;
  *g_p = gpu_client(c);
  return *g_p != NULL ? SPC_OK : SPC_ENOMEM;
}

int spc__gpu_dev_get(spc_client *c, int device, spc__gpu_dev **d_p) {
  const spc__cu_api *cu;
  spc__gpu_client *g;
  int rc = spc__gpu_begin(c, &cu, &g);
  if (rc < 0)
    return rc;
  for (int i = 0; i < g->ndevs; i++)
    if (g->devs[i].device == device) {
      *d_p = &g->devs[i];
      return SPC_OK;
    }
  spc__gpu_dev *p = realloc(g->devs, (size_t)(g->ndevs + 1) * sizeof(*p));
  if (p == NULL)
    return spc__fail(c, SPC_ENOMEM, "realloc of device states failed");
  g->devs = p;
  spc__gpu_dev *d = &g->devs[g->ndevs];
  memset(d, 0, sizeof(*d));
  d->device = device;
  spc__CUresult r = cu->DeviceGet(&d->cudev, device);
  if (r == SPC__CUDA_SUCCESS)
    r = cu->DevicePrimaryCtxRetain(&d->ctx, d->cudev);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "CUDA device %d: cuDeviceGet / "
                     "cuDevicePrimaryCtxRetain: %s", device,
                     spc__cu_str(cu, r));
  g->ndevs++;
  *d_p = d;
  return SPC_OK;
}

void spc__gpu_client_free(spc_client *c) {
  spc__gpu_client *g = c->gpu;
  if (g == NULL)
    return;
  const spc__cu_api *cu = cu_loaded;
  for (int i = 0; cu != NULL && i < g->ndevs; i++) {
    spc__gpu_dev *d = &g->devs[i];
    for (int k = 0; k < d->nev; k++) {
      cu->EventDestroy(d->ready[k]);
      cu->EventDestroy(d->done[k]);
    }
    spc__sym_kernel_unload(cu, d);
    cu->DevicePrimaryCtxRelease(d->cudev);
  }
  while (g->allocs != NULL) {
    spc__gpu_alloc *a = g->allocs;
    g->allocs = a->next;
    free(a->chunks);
    free(a);
  }
  free(g->devs);
  free(g);
  c->gpu = NULL;
}
