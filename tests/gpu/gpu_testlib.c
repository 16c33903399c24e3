#include "gpu_testlib.h"

#include <check.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_internal.h"

int gpt_gpu_count(char *why, size_t len) {
#ifndef SPC_HAVE_CUDA
  snprintf(why, len, "built without CUDA");
  return 0;
#else
  int p[2];
  if (pipe(p) < 0) {
    snprintf(why, len, "pipe failed");
    return 0;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    char msg[200];
    cudaError_t e = cudaGetDeviceCount(&n);
    snprintf(msg, sizeof(msg), "%d %s", e == cudaSuccess ? n : 0,
             e == cudaSuccess ? "cudaGetDeviceCount found no device"
                              : cudaGetErrorString(e));
    ssize_t w = write(p[1], msg, strlen(msg) + 1);
    _exit(w > 0 ? 0 : 1);
  }
  close(p[1]);
  char buf[256] = "";
  ssize_t got = read(p[0], buf, sizeof(buf) - 1);
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  int n = 0, at = 0;
  if (got <= 0 || sscanf(buf, "%d %n", &n, &at) < 1) {
    snprintf(why, len, "the CUDA probe process failed");
    return 0;
  }
  if (n == 0)
    snprintf(why, len, "%s", buf + at);
  return n;
#endif
}

int gpt_require_gpu(void) {
  char why[200] = "";
  int n = gpt_gpu_count(why, sizeof(why));
  if (n > 0)
    return n;
  printf("skipped: no GPU (%s)\n", why);
  fflush(stdout);
  exit(77);
}

long long gpt_stat(const spt_daemon *d, const char *name) {
  return spt_daemon_stat(d, name);
}

void gpt_keep_log(const spt_daemon *d) {
  const char *keep = getenv("SPCOLL_GPU_LOGS");
  if (keep != NULL && strcmp(keep, "1") == 0)
    spt_daemon_dump_log(d);
}

void gpt_run_on_daemon(spt_daemon *d, const char *const *extra, int world,
                       spt_rank_fn fn, void *arg, int guard_s) {
  ck_assert_int_eq(spt_daemon_start(d, extra), 0);
  int failed = spt_run_ranks(world, fn, arg, guard_s);
  gpt_keep_log(d);
  if (failed)
    spt_daemon_dump_log(d);
  ck_assert_int_eq(spt_daemon_stop(d), 0);
  ck_assert_msg(failed == 0, "%d rank(s) failed", failed);
}

#ifdef SPC_HAVE_CUDA
static void CUDART_CB gate_fn(void *p) {
  gpt_held *h = p;
  while (!__atomic_load_n(&h->gate, __ATOMIC_ACQUIRE))
    usleep(1000);
}

int gpt_hold_flags(gpt_held *h, unsigned flags) {
  h->gate = 0;
  GPT_CUDA(cudaStreamCreateWithFlags(&h->s, flags));
  GPT_CUDA(cudaLaunchHostFunc(h->s, gate_fn, h));
  return 0;
}

int gpt_hold(gpt_held *h) { return gpt_hold_flags(h, cudaStreamNonBlocking); }

void gpt_open_gate(gpt_held *h) {
  __atomic_store_n(&h->gate, 1, __ATOMIC_RELEASE);
}
#endif

#ifdef SPC_HAVE_CUDA
#include <cuda.h>

/* The driver's virtual memory calls, looked up through the runtime. */
typedef struct {
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
                     const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                      unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
} vmm_fns;

static int vmm_entry(const char *sym, void **fn) {
  enum cudaDriverEntryPointQueryResult q;
  cudaError_t e =
      cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, &q);
  if (e == cudaSuccess && q == cudaDriverEntryPointSuccess && *fn != NULL)
    return 0;
  fprintf(stderr, "cudaGetDriverEntryPointByVersion(%s): %s, result %d\n",
          sym, cudaGetErrorString(e), (int)q);
  return 1;
}

static int vmm_load(vmm_fns *f) {
  return vmm_entry("cuMemCreate", (void **)&f->create) ||
         vmm_entry("cuMemRelease", (void **)&f->release) ||
         vmm_entry("cuMemAddressReserve", (void **)&f->reserve) ||
         vmm_entry("cuMemAddressFree", (void **)&f->addr_free) ||
         vmm_entry("cuMemMap", (void **)&f->map) ||
         vmm_entry("cuMemUnmap", (void **)&f->unmap) ||
         vmm_entry("cuMemSetAccess", (void **)&f->access);
}

#define GPT_CU(call)                                                         \
  do {                                                                       \
    CUresult r_ = (call);                                                    \
    if (r_ != CUDA_SUCCESS) {                                                \
      fprintf(stderr, "%s:%d: %s: CUDA driver error %d\n", __FILE__,         \
              __LINE__, #call, (int)r_);                                     \
      return 1;                                                              \
    }                                                                        \
  } while (0)

int gpt_vmm_alloc(int dev, size_t bytes, size_t chunk, void **p) {
  return gpt_vmm_alloc_as(dev, bytes, chunk,
                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, p);
}

int gpt_vmm_alloc_as(int dev, size_t bytes, size_t chunk, int handle_types,
                     void **p) {
  vmm_fns f;
  if (vmm_load(&f) || chunk == 0 || bytes % chunk != 0) {
    fprintf(stderr, "gpt_vmm_alloc(%zu bytes in chunks of %zu)\n", bytes,
            chunk);
    return 1;
  }
  GPT_CUDA(cudaSetDevice(dev));
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
  CUdeviceptr base = 0;
  GPT_CU(f.reserve(&base, bytes, 0, 0, 0));
  for (size_t off = 0; off < bytes; off += chunk) {
    CUmemGenericAllocationHandle h;
    GPT_CU(f.create(&h, chunk, &prop, 0));
    GPT_CU(f.map(base + off, chunk, 0, h, 0));
    GPT_CU(f.release(h)); /* the mapping keeps it */
  }
  CUmemAccessDesc a;
  memset(&a, 0, sizeof(a));
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = dev;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  GPT_CU(f.access(base, bytes, &a, 1));
  *p = (void *)(uintptr_t)base;
  return 0;
}

int gpt_vmm_free(void *p, size_t bytes, size_t chunk) {
  vmm_fns f;
  if (vmm_load(&f))
    return 1;
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)p;
  for (size_t off = 0; off < bytes; off += chunk)
    GPT_CU(f.unmap(base + off, chunk));
  GPT_CU(f.addr_free(base, bytes));
  return 0;
}
#endif
