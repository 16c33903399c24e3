/* The rules suite's part on calls that may block (rule host-sync) and on
 * the contexts a program makes (sim_rules.c runs it). */
#include <check.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_rules.h"

/* ---- host-sync: calls that may block, on a loop thread --------------------
 * A program told never to block (spcolld: SPCSIM_FORBID_SYNC) makes, on
 * its main thread (its event loop's), one call that may block the host
 * on the GPU or on other ranks: rejected, one scenario per call. Setup
 * comes before forbid(), as some of it blocks too. The same calls on
 * another thread pass (blocking_calls_off_the_main_thread). */

static void forbid(void) { setenv("SPCSIM_FORBID_SYNC", "1", 1); }

static void *drv_sym(const char *name) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *f = h != NULL ? dlsym(h, name) : NULL;
  if (f == NULL)
    die(name);
  return f;
}

static void b_device_sync(void) {
  forbid();
  cudaDeviceSynchronize();
}

static void b_stream_sync(void) {
  cudaStream_t s;
  S(cudaStreamCreate(&s));
  forbid();
  cudaStreamSynchronize(s);
}

static void b_event_sync(void) {
  cudaEvent_t e;
  S(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  forbid();
  cudaEventSynchronize(e);
}

static void b_free(void) {
  void *p;
  S(cudaMalloc(&p, 4096));
  forbid();
  cudaFree(p);
}

static void b_free_host(void) {
  void *p;
  S(cudaMallocHost(&p, 4096));
  forbid();
  cudaFreeHost(p);
}

static void b_memcpy(void) {
  void *p;
  char h[64] = {0};
  S(cudaMalloc(&p, sizeof(h)));
  forbid();
  cudaMemcpy(p, h, sizeof(h), cudaMemcpyHostToDevice);
}

static void b_memset(void) {
  void *p;
  S(cudaMalloc(&p, 4096));
  forbid();
  cudaMemset(p, 0, 4096);
}

static void b_memcpy_to_symbol(void) {
  static int symbol;
  int v = 1;
  forbid();
  cudaMemcpyToSymbol(&symbol, &v, sizeof(v), 0, cudaMemcpyHostToDevice);
}

static void b_cu_ctx_sync(void) {
  forbid();
  drv().ctx_sync();
}

static void b_cu_event_sync(void) {
  CUevent e;
  S(drv().event_create(&e, CU_EVENT_DISABLE_TIMING));
  CUresult (*sync)(CUevent) = drv_sym("cuEventSynchronize");
  forbid();
  sync(e);
}

static void b_cu_mem_free(void) {
  CUdeviceptr p;
  S(cudaSetDevice(0));
  S(drv().mem_alloc(&p, 4096));
  CUresult (*mem_free)(CUdeviceptr) = drv_sym("cuMemFree_v2");
  forbid();
  mem_free(p);
}

static void b_cu_mem_free_host(void) {
  void *p;
  S(cudaMallocHost(&p, 4096));
  CUresult (*free_host)(void *) = drv_sym("cuMemFreeHost");
  forbid();
  free_host(p);
}

static void b_cu_memset(void) {
  void *p;
  S(cudaMalloc(&p, 4096));
  CUresult (*memset8)(CUdeviceptr, unsigned char, size_t) =
      drv_sym("cuMemsetD8_v2");
  forbid();
  memset8(dptr(p), 0, 4096);
}

static void b_nccl_init_all(void) {
  ncclComm_t c[2];
  forbid();
  ncclCommInitAll(c, 2, NULL);
}

static void b_nccl_destroy(void) {
  ncclComm_t c[2];
  S(ncclCommInitAll(c, 2, NULL));
  S(ncclCommDestroy(c[1]));
  forbid();
  ncclCommDestroy(c[0]);
}

static void b_nccl_abort(void) {
  ncclComm_t c[2];
  S(ncclCommInitAll(c, 2, NULL));
  S(ncclCommDestroy(c[1]));
  forbid();
  ncclCommAbort(c[0]);
}

/* Not simulated (they fail), but flagged first. */
static void b_nccl_init_rank(void) {
  ncclComm_t c;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  forbid();
  ncclCommInitRank(&c, 2, id, 0);
}

static void b_nccl_init_rank_config(void) {
  ncclComm_t c;
  ncclUniqueId id;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; /* blocking by default */
  memset(&id, 0, sizeof(id));
  forbid();
  ncclCommInitRankConfig(&c, 2, id, 0, &cfg);
}

static void b_nccl_init_rank_scalable(void) {
  ncclComm_t c;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  forbid();
  ncclCommInitRankScalable(&c, 2, 0, 1, &id, NULL);
}

static void b_nccl_split(void) {
  ncclComm_t c[2], sub;
  S(ncclCommInitAll(c, 2, NULL));
  forbid();
  ncclCommSplit(c[0], 0, 0, &sub, NULL);
}

static void b_nccl_shrink(void) {
  ncclComm_t c[2], sub;
  int drop = 1;
  S(ncclCommInitAll(c, 2, NULL));
  forbid();
  ncclCommShrink(c[0], &drop, 1, &sub, NULL, NCCL_SHRINK_DEFAULT);
}

static void b_nccl_finalize(void) {
  ncclComm_t c[2];
  S(ncclCommInitAll(c, 2, NULL));
  forbid();
  ncclCommFinalize(c[0]);
}

typedef struct {
  const blocking_case *cases;
  int n;
} case_list;

static void *run_cases(void *arg) {
  const case_list *l = arg;
  for (int i = 0; i < l->n; i++) {
    unsetenv("SPCSIM_FORBID_SYNC"); /* the setup is allowed anywhere */
    l->cases[i].scenario();
  }
  return NULL;
}

/* The rule is the main thread's: every one of those calls on another
 * thread (libuv's pool, in spcolld) passes. */
int blocking_elsewhere(const blocking_case *cases, int n) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    case_list l = {cases, n};
    pthread_t t;
    if (pthread_create(&t, NULL, run_cases, &l) != 0)
      die("pthread_create");
    _exit(pthread_join(t, NULL) == 0 ? 0 : 1);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const blocking_case blocking[] = {
    {"cudaDeviceSynchronize", b_device_sync},
    {"cudaStreamSynchronize", b_stream_sync},
    {"cudaEventSynchronize", b_event_sync},
    {"cudaFree", b_free},
    {"cudaFreeHost", b_free_host},
    {"cudaMemcpy", b_memcpy},
    {"cudaMemset", b_memset},
    {"cudaMemcpyToSymbol", b_memcpy_to_symbol},
    {"cuCtxSynchronize", b_cu_ctx_sync},
    {"cuEventSynchronize", b_cu_event_sync},
    {"cuMemFree", b_cu_mem_free},
    {"cuMemFreeHost", b_cu_mem_free_host},
    {"cuMemsetD8", b_cu_memset},
    {"ncclCommInitAll", b_nccl_init_all},
    {"ncclCommDestroy", b_nccl_destroy},
    {"ncclCommAbort", b_nccl_abort},
    {"ncclCommInitRank", b_nccl_init_rank},
    {"ncclCommInitRankConfig", b_nccl_init_rank_config},
    {"ncclCommInitRankScalable", b_nccl_init_rank_scalable},
    {"ncclCommSplit", b_nccl_split},
    {"ncclCommShrink", b_nccl_shrink},
    {"ncclCommFinalize", b_nccl_finalize},
};
#define NBLOCKING ((int)(sizeof(blocking) / sizeof(blocking[0])))

/* A loop test: _i is the scenario. */
START_TEST(host_sync_in_a_program_that_must_not_block) {
  ck_assert_msg(rejected(blocking[_i].scenario, "host-sync"),
                "%s on the main thread was not flagged", blocking[_i].call);
}
END_TEST

START_TEST(blocking_calls_off_the_main_thread) {
  ck_assert_int_eq(blocking_elsewhere(blocking, NBLOCKING), 0);
}
END_TEST

/* Contexts: a process makes one on a GPU only when a call needs it there,
 * and the log says which (device properties need none). */
START_TEST(contexts_only_where_used) {
  char path[] = "/tmp/spcsim-ctx-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("SPCSIM_CONTEXT_LOG", path, 1);
    struct cudaDeviceProp prop;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
      _exit(2);
    for (int d = 0; d < n; d++)
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess)
        _exit(3);
    void *p;
    if (cudaSetDevice(1) != cudaSuccess || cudaMalloc(&p, 64) != cudaSuccess ||
        cudaFree(p) != cudaSuccess)
      _exit(4);
    _exit(0);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  int p, d, lines = 0, dev = -1;
  while (fscanf(f, "%d %d", &p, &d) == 2)
    lines++, dev = d;
  fclose(f);
  unlink(path);
  ck_assert_int_eq(lines, 1);
  ck_assert_int_eq(dev, 1);
}
END_TEST

void sim_rules_block(TCase *tc) {
  tcase_add_loop_test(tc, host_sync_in_a_program_that_must_not_block, 0,
                      NBLOCKING);
  tcase_add_test(tc, blocking_calls_off_the_main_thread);
  tcase_add_test(tc, contexts_only_where_used);
}
