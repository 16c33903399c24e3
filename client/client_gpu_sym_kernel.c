/* Reductions and scaled copies on symmetric buffers: the GPU movers'
 * kernel (plan_kernel, daemon/gpu/plan_cuda.cu), which libspclient
 * carries as a fatbin (mk/gpu.mk) and loads with cuModuleLoadData, run on
 * the caller's stream over this rank's steps of the op's plan. So a
 * result is bitwise the daemon's (and the host mover's): the same kernel,
 * the same rank order. Its descriptors (kernels/gpu_desc.h) are made once
 * per op signature, in pinned host memory the GPU reads: no upload, and
 * nothing a later op rewrites while a queued launch may read it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_gpu.h"
#include "gpu_desc.h"

/* The fatbin's bytes (generated at build time; none without CUDA). */
extern const unsigned char spc__plan_fatbin[];
extern const unsigned long spc__plan_fatbin_len;

static int kernel_off(spc__gpu_dev *d, const char *why) {
  snprintf(d->kernel_why, sizeof(d->kernel_why), "%s", why);
  d->kernel_state = -1;
  return 0;
}

int spc__sym_kernel_ready(spc_client *c, const spc__cu_api *cu,
                          spc__gpu_dev *d) {
  if (d->kernel_state != 0)
    return d->kernel_state > 0;
  if (spc__plan_fatbin_len == 0)
    return kernel_off(d, "libspclient was built without CUDA (no kernel)");
  if (cu->ModuleLoadData == NULL || cu->ModuleGetFunction == NULL ||
      cu->LaunchKernel == NULL || cu->ModuleUnload == NULL ||
      cu->MemHostRegister == NULL || cu->MemHostUnregister == NULL ||
      cu->MemHostGetDevicePointer == NULL || cu->DeviceGetAttribute == NULL)
    return kernel_off(d, "the driver lacks cuModuleLoadData or "
                      "cuLaunchKernel");
  if (spc__gpu_push(c, cu, d->ctx) < 0)
    return kernel_off(d, "its context cannot be made current");
  spc__CUresult r = cu->ModuleLoadData(&d->module, spc__plan_fatbin);
  if (r == SPC__CUDA_SUCCESS)
    r = cu->ModuleGetFunction(&d->kernel, d->module, SPK_CU_KERNEL_NAME);
  if (r == SPC__CUDA_SUCCESS)
    r = cu->DeviceGetAttribute(&d->sms,
                               SPC__CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                               d->cudev);
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS) {
    char why[160];
    snprintf(why, sizeof(why), "loading the kernel (cuModuleLoadData, "
             "cuModuleGetFunction %s): %s", SPK_CU_KERNEL_NAME,
             spc__cu_str(cu, r));
    return kernel_off(d, why);
  }
  d->kernel_state = 1;
  return 1;
}

/* Pinned host memory of n bytes the GPU reads at *dev; NULL on failure. */
static void *pinned(const spc__cu_api *cu, size_t n, spc__CUdeviceptr *dev) {
  size_t len = (n + 4095) & ~(size_t)4095;
  void *p = NULL;
  if (posix_memalign(&p, 4096, len) != 0)
    return NULL;
  memset(p, 0, len);
  if (cu->MemHostRegister(p, len, SPC__CU_MEMHOSTREGISTER_PORTABLE |
                                      SPC__CU_MEMHOSTREGISTER_DEVICEMAP) !=
      SPC__CUDA_SUCCESS) {
    free(p);
    return NULL;
  }
  if (cu->MemHostGetDevicePointer(dev, p, 0) != SPC__CUDA_SUCCESS) {
    cu->MemHostUnregister(p);
    free(p);
    return NULL;
  }
  return p;
}

static void launch_fill(spk_claunch *L, const spk_plan *p) {
  L->dtype = (int32_t)p->dtype;
  L->scale = p->scale;
  L->red_op = p->red_op;
  L->world = p->world;
}

int spc__sym_kernel_plan(spc_client *c, spc__sym *s, const spk_plan *p,
                         uint8_t *const *bases, const spc__sym_key *k) {
  if (s->nlaunches == SPC__SYM_LAUNCHES)
    return 0;
  if (s->launches == NULL &&
      (s->launches = calloc(SPC__SYM_LAUNCHES, sizeof(*s->launches))) == NULL)
    return spc__fail(c, SPC_ENOMEM, "symmetric launches");
  const spc__cu_api *cu = spc__cu(c);
  spk_cdesc_list l[2];
  spk_err err = {0};
  uint64_t chunk = spk_cdesc_chunk_for(p->bytes, s->sms);
  spk_cdesc_list_init(&l[0], chunk);
  spk_cdesc_list_init(&l[1], chunk);
  int rc = SPK_OK;
  for (int ph = 0; rc == SPK_OK && ph < 2; ph++)
    rc = spk_cdesc_from_plan_to(&l[ph], p, bases, ph, s->rank, &err);
  spc__sym_launch *L = &s->launches[s->nlaunches];
  size_t at1 = (spk_cdesc_packed_size(&l[0]) + 255) & ~(size_t)255;
  spc__CUdeviceptr dev = 0;
  memset(L, 0, sizeof(*L));
  L->bytes = at1 + spk_cdesc_packed_size(&l[1]);
  int empty = l[0].n == 0 && l[1].n == 0; /* an op of no elements */
  if (rc == SPK_OK && !empty && spc__gpu_push(c, cu, s->ctx) == SPC_OK) {
    L->host = pinned(cu, L->bytes, &dev);
    spc__gpu_pop(cu);
  }
  /* Made or not, the slot is used: every rank's slots stay in step. */
  L->key = *k;
  L->failed = rc < 0 || (L->host == NULL && !empty);
  s->nlaunches++;
  if (rc == SPK_OK && !L->failed) {
    if (!empty) {
      spk_cdesc_pack(&l[0], L->host, dev, &L->launch[0]);
      spk_cdesc_pack(&l[1], (uint8_t *)L->host + at1, dev + at1,
                     &L->launch[1]);
    }
    launch_fill(&L->launch[0], p);
    launch_fill(&L->launch[1], p);
    L->mid = p->nreduces > 0 && p->nmoves > 0;
    L->bytes_in = 0;
    for (size_t i = 0; i < p->nreduces; i++)
      if (p->reduces[i].geo.dst_rank == (uint32_t)s->rank)
        L->bytes_in += spk_move_bytes(&p->reduces[i].geo);
    for (size_t i = 0; i < p->nmoves; i++)
      if (p->moves[i].dst_rank == (uint32_t)s->rank)
        L->bytes_in += spk_move_bytes(&p->moves[i]);
  }
  spk_cdesc_list_free(&l[0]);
  spk_cdesc_list_free(&l[1]);
  if (rc < 0)
    return spc__fail(c, SPC_ENOMEM, "%s", err.msg);
  if (L->failed)
    return spc__fail(c, SPC_ENOMEM, "%zu bytes of pinned descriptors",
                     L->bytes);
  return 1;
}

void spc__sym_kernel_unload(const spc__cu_api *cu, spc__gpu_dev *d) {
  spc__CUcontext prev;
  if (d->kernel_state > 0 && cu->CtxPushCurrent(d->ctx) == SPC__CUDA_SUCCESS) {
    (void)cu->ModuleUnload(d->module); /* at disconnect: nothing to add */
    (void)cu->CtxPopCurrent(&prev);
  }
  d->kernel_state = 0;
}

spc__CUresult spc__sym_kernel_run(const spc__cu_api *cu, const spc__sym *s,
                                  const spc__sym_launch *L, int ph,
                                  spc__CUstream st) {
  spk_claunch arg = L->launch[ph];
  if (arg.nchunks == 0)
    return SPC__CUDA_SUCCESS;
  uint64_t blocks = (uint64_t)(s->sms > 0 ? s->sms : 1) * 4;
  if (blocks > arg.nchunks)
    blocks = arg.nchunks;
  void *params[] = {&arg};
  return cu->LaunchKernel(s->fn, (unsigned)blocks, 1, 1, SPK_CU_THREADS, 1,
                          1, 0, st, params, NULL);
}

void spc__sym_kernel_free(const spc__cu_api *cu, spc__sym *s) {
  for (int i = 0; i < s->nlaunches; i++) {
    if (cu != NULL && s->launches[i].host != NULL)
      (void)cu->MemHostUnregister(s->launches[i].host);
    free(s->launches[i].host);
  }
  free(s->launches);
  s->launches = NULL;
  s->nlaunches = 0;
}
