/* One test per strict rule of spcsim: the misuse runs in a child process,
 * which the simulator must stop with SIGABRT after naming the rule on
 * stderr ("spcsim: RULE <id>: <call>: ..."); a child that survives its
 * misuse fails the test. Rules about return codes (the per-thread last
 * error, memory exhaustion) are checked as values. Runs only on the
 * simulator (tests/gpusim/simrun.sh); elsewhere it skips (exit 77).
 * Stream memory operations and host registration are in
 * sim_rules_memops.c, calls that may block in sim_rules_block.c, NCCL in
 * sim_rules_nccl.c, cuMem (VMM) memory and IPC across PID namespaces in
 * sim_rules_vmm.c and sim_rules_vmm_rules.c; the helpers they share are
 * declared in sim_rules.h. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_run.h"
#include "plan_cuda.h"
#include "sim_rules.h"

int child_reap(pid_t pid, int fd, const char *path, char *buf, size_t len) {
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ssize_t n = pread(fd, buf, len - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  return st;
}

/* Run scenario in a child with stderr in a file; 1 when it died of
 * SIGABRT after a line naming `rule`. */
pid_t child_start(char *path, int *fd_p) {
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    dup2(fd, 2);
  *fd_p = fd;
  return pid;
}

int rejected(void (*scenario)(void), const char *rule) {
  char path[] = "/tmp/spcsim-rule-XXXXXX";
  int fd;
  pid_t pid = child_start(path, &fd);
  if (pid == 0) {
    scenario();
    fprintf(stderr, "the scenario survived its misuse\n");
    _exit(0);
  }
  char buf[4096];
  int st = child_reap(pid, fd, path, buf, sizeof(buf));
  char want[128];
  snprintf(want, sizeof(want), "spcsim: RULE %s: ", rule);
  int ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, want);
  if (!ok)
    fprintf(stderr, "rule %s not enforced (status 0x%x), child said:\n%s\n",
            rule, st, buf);
  return ok;
}

void die(const char *what) {
  fprintf(stderr, "scenario setup failed: %s\n", what);
  _exit(3);
}

int expect(const char *what, int got, int want) {
  if (got == want)
    return 0;
  fprintf(stderr, "%s: got %d, want %d\n", what, got, want);
  return 1;
}

drv_api drv(void) {
  static const char *const names[] = {
      "cuMemAlloc_v2",          "cuCtxSynchronize",
      "cuStreamQuery",          "cuEventCreate",
      "cuDeviceGetAttribute",   "cuStreamWriteValue32_v2",
      "cuStreamWriteValue64_v2", "cuStreamWaitValue32_v2",
      "cuStreamWaitValue64_v2", "cuStreamBatchMemOp_v2"};
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    die(dlerror());
  void *f[sizeof(names) / sizeof(names[0])];
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if ((f[i] = dlsym(h, names[i])) == NULL)
      die(names[i]);
  drv_api d;
  _Static_assert(sizeof(d) == sizeof(f), "one pointer per name");
  memcpy(&d, f, sizeof(d));
  return d;
}

int in_child(int (*checks)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(checks());
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int run_anew(const char *var, const char *value, const char *checks) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv(var, value, 1);
    setenv("SIM_RULES_CHECKS", checks, 1);
    execl("/proc/self/exe", "sim_rules", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A helper process that owns what `make` makes and passes its handle up
 * a pipe, then lives until the scenario process is gone (EOF on hold). */
static void helper(void (*make)(void *h64), void *h64) {
  int up[2], hold[2];
  S(pipe(up));
  S(pipe(hold));
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    close(up[0]);
    close(hold[1]);
    char h[64];
    make(h);
    if (write(up[1], h, 64) != 64)
      _exit(3);
    char c;
    while (read(hold[0], &c, 1) > 0)
      ;
    _exit(0); /* no leak report: the scenario is what is judged */
  }
  close(up[1]);
  close(hold[0]);
  if (read(up[0], h64, 64) != 64)
    die("the helper's handle");
}

static void make_mem(void *h) {
  void *p;
  S(cudaMalloc(&p, 1 << 16));
  S(cudaIpcGetMemHandle((cudaIpcMemHandle_t *)h, p));
}

static void make_event(void *h) {
  cudaEvent_t e;
  S(cudaEventCreateWithFlags(&e,
                             cudaEventInterprocess | cudaEventDisableTiming));
  S(cudaIpcGetEventHandle((cudaIpcEventHandle_t *)h, e));
}

/* ---- CUDA IPC ------------------------------------------------------------ */

static void free_while_imported(void) {
  void *p;
  cudaIpcMemHandle_t h;
  S(cudaMalloc(&p, 1 << 16));
  S(cudaIpcGetMemHandle(&h, p));
  int up[2];
  S(pipe(up));
  if (fork() == 0) {
    void *q;
    S(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess));
    if (write(up[1], "x", 1) != 1)
      _exit(3);
    pause();
    _exit(0);
  }
  char c;
  if (read(up[0], &c, 1) != 1)
    die("importer");
  cudaFree(p); /* the importer still maps it */
}

START_TEST(ipc_free_while_imported) {
  ck_assert(rejected(free_while_imported, "ipc-free-while-imported"));
}
END_TEST

/* An importer that died holds nothing: the driver closes a process's
 * imports when it exits (a daemon killed under its clients). */
static int free_after_importer_died(void) {
  void *p;
  cudaIpcMemHandle_t h;
  int up[2], bad = 0;
  if (cudaMalloc(&p, 1 << 16) != cudaSuccess ||
      cudaIpcGetMemHandle(&h, p) != cudaSuccess || pipe(up) != 0)
    return 3;
  pid_t pid = fork();
  if (pid == 0) {
    void *q;
    if (cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) != 0 ||
        write(up[1], "x", 1) != 1)
      _exit(3);
    pause();
    _exit(0);
  }
  char c;
  if (pid < 0 || read(up[0], &c, 1) != 1)
    return 3;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  bad |= expect("cudaFree after the importer died", cudaFree(p),
                cudaSuccess);
  return bad;
}

START_TEST(ipc_dead_importer_holds_nothing) {
  ck_assert_int_eq(in_child(free_after_importer_died), 0);
}
END_TEST

static void unmap_not_close(void) {
  cudaIpcMemHandle_t h;
  void *q;
  helper(make_mem, &h);
  S(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess));
  munmap(q, 1 << 16);
}

START_TEST(ipc_unmap_not_close) {
  ck_assert(rejected(unmap_not_close, "ipc-unmap-not-close"));
}
END_TEST

static void open_own(void) {
  void *p, *q;
  cudaIpcMemHandle_t h;
  S(cudaMalloc(&p, 4096));
  S(cudaIpcGetMemHandle(&h, p));
  cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
}

START_TEST(ipc_open_own_process) {
  ck_assert(rejected(open_own, "ipc-open-own-process"));
}
END_TEST

/* A handle opened twice in one context is counted, as CUDA documents:
 * the same pointer both times, the mapping kept until the second close;
 * a third close is of nothing open. */
static void open_twice(void) {
  cudaIpcMemHandle_t h;
  void *q, *r;
  char byte;
  helper(make_mem, &h);
  S(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess));
  S(cudaIpcOpenMemHandle(&r, h, cudaIpcMemLazyEnablePeerAccess));
  if (q != r)
    die("a second open gave another pointer");
  S(cudaIpcCloseMemHandle(q));
  S(cudaMemcpy(&byte, r, 1, cudaMemcpyDeviceToHost)); /* still mapped */
  S(cudaIpcCloseMemHandle(r));
  cudaIpcCloseMemHandle(r);
}

START_TEST(ipc_open_twice_counts) {
  ck_assert(rejected(open_twice, "ipc-close-not-open"));
}
END_TEST

static void handle_of_pool(void) {
  void *p;
  cudaIpcMemHandle_t h;
  S(cudaMallocAsync(&p, 4096, 0));
  cudaIpcGetMemHandle(&h, p);
}

static void handle_inside(void) {
  void *p;
  cudaIpcMemHandle_t h;
  S(cudaMalloc(&p, 4096));
  cudaIpcGetMemHandle(&h, (char *)p + 256);
}

START_TEST(ipc_handle_not_allocation_base) {
  ck_assert(rejected(handle_of_pool, "ipc-handle-not-base"));
  ck_assert(rejected(handle_inside, "ipc-handle-not-base"));
}
END_TEST

/* ---- access across devices ---- */

/* Pool memory of GPU 0 sent to GPU 1 by NCCL, which in one process reads
 * it directly, with no cudaMemPoolSetAccess: defect 3 of issue 15. */
static void pool_across(void) {
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  cudaStream_t s[2];
  void *a, *b;
  S(ncclCommInitAll(comms, 2, devs));
  for (int i = 0; i < 2; i++) {
    S(cudaSetDevice(i));
    S(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  }
  S(cudaMallocAsync(&a, 4096, s[0]));
  S(cudaMallocAsync(&b, 4096, s[1]));
  S(ncclGroupStart());
  S(ncclSend(a, 4096, ncclUint8, 1, comms[0], s[0]));
  S(ncclRecv(b, 4096, ncclUint8, 0, comms[1], s[1]));
  S(ncclGroupEnd());
  cudaStreamSynchronize(s[0]);
  cudaStreamSynchronize(s[1]);
}

START_TEST(pool_memory_from_another_device) {
  ck_assert(rejected(pool_across, "access-from-device"));
}
END_TEST

void queue_copy(void *descs, void *src, void *dst, cudaStream_t s) {
  spk_cdesc d;
  memset(&d, 0, sizeof(d));
  d.src = (uint64_t)(uintptr_t)src;
  d.dst = (uint64_t)(uintptr_t)dst;
  d.run = d.piece = 64;
  d.rows = d.rows_per_chunk = d.nchunks = 1;
  d.kind = SPK_CU_COPY;
  d.vec = d.esize = 1;
  S(cudaMemcpy(descs, &d, sizeof(d), cudaMemcpyHostToDevice));
  spk_claunch L;
  memset(&L, 0, sizeof(L));
  L.descs = descs;
  L.ndesc = L.nchunks = 1;
  L.dtype = SPK_U8;
  L.world = 1;
  char msg[256];
  if (spk_cuda_launch(&L, 1, s, msg, sizeof(msg)) < 0)
    die(msg);
}

/* The plan kernel copying 64 bytes on GPU 0 (s0_p: its stream), its
 * descriptor in the memory pool of GPU desc_dev (descs_p, on stream
 * sd_p); src holds pattern. */
static void copy_setup(int desc_dev, const unsigned char *pattern,
                       cudaStream_t *sd_p, cudaStream_t *s0_p, void **descs_p,
                       void **src_p, void **dst_p) {
  S(cudaSetDevice(desc_dev));
  S(cudaStreamCreateWithFlags(sd_p, cudaStreamNonBlocking));
  S(cudaMallocAsync(descs_p, sizeof(spk_cdesc), *sd_p));
  S(cudaSetDevice(0));
  S(cudaStreamCreateWithFlags(s0_p, cudaStreamNonBlocking));
  S(cudaMalloc(src_p, 64));
  S(cudaMalloc(dst_p, 64));
  S(cudaMemcpy(*src_p, pattern, 64, cudaMemcpyHostToDevice));
  S(cudaStreamSynchronize(*sd_p));
}

/* The plan kernel's 64-byte copy, descriptor in GPU desc_dev's pool;
 * got: what arrived. */
static int plan_copy(int desc_dev, unsigned char *got) {
  cudaStream_t sd, s0;
  void *descs, *src, *dst;
  unsigned char pattern[64];
  for (int i = 0; i < 64; i++)
    pattern[i] = (unsigned char)(i * 7 + 1);
  copy_setup(desc_dev, pattern, &sd, &s0, &descs, &src, &dst);
  queue_copy(descs, src, dst, s0);
  S(cudaStreamSynchronize(s0));
  S(cudaMemcpy(got, dst, 64, cudaMemcpyDeviceToHost));
  S(cudaFreeAsync(descs, sd));
  S(cudaStreamSynchronize(sd));
  S(cudaFree(src));
  S(cudaFree(dst));
  S(cudaStreamDestroy(sd));
  S(cudaStreamDestroy(s0));
  return memcmp(got, pattern, 64) == 0 ? 0 : -1;
}

START_TEST(plan_kernel_runs_from_its_own_source) {
  unsigned char got[64];
  ck_assert_int_eq(plan_copy(0, got), 0);
}
END_TEST

static void kernel_reads_other_pool(void) {
  unsigned char got[64];
  plan_copy(1, got);
}

START_TEST(kernel_reading_another_devices_pool) {
  ck_assert(rejected(kernel_reads_other_pool, "access-from-device"));
}
END_TEST

/* ---- sticky errors ----------------------------------------------------------
 * A device fault (an illegal address) ends the process's CUDA context:
 * the launch itself succeeded, the fault shows on the next calls, every
 * one of them, runtime and driver, in every thread, and reading the
 * error does not clear it. */

static void *read_last_error(void *arg) {
  *(int *)arg = (int)cudaGetLastError();
  return NULL;
}

/* The calls after the fault (the stream s ran the faulting kernel). */
static int sticky_checks(cudaStream_t s, void *src) {
  const int ill = cudaErrorIllegalAddress;
  drv_api cu = drv();
  void *p;
  unsigned char host[64];
  cudaStream_t s2;
  cudaEvent_t e;
  CUdeviceptr dp;
  CUevent ce;
  int other = 0;
  pthread_t t;
  int bad = expect("cudaStreamSynchronize", cudaStreamSynchronize(s), ill) +
            expect("cudaGetLastError", cudaGetLastError(), ill) +
            expect("cudaGetLastError again", cudaGetLastError(), ill) +
            expect("cudaPeekAtLastError", cudaPeekAtLastError(), ill) +
            expect("cudaMalloc", cudaMalloc(&p, 64), ill) +
            expect("cudaMemcpy", cudaMemcpy(host, src, 64,
                                            cudaMemcpyDeviceToHost), ill) +
            expect("cudaStreamCreate", cudaStreamCreate(&s2), ill) +
            expect("cudaEventCreate", cudaEventCreate(&e), ill) +
            expect("cudaDeviceSynchronize", cudaDeviceSynchronize(), ill) +
            expect("cudaStreamQuery", cudaStreamQuery(s), ill) +
            expect("cuMemAlloc", cu.mem_alloc(&dp, 64),
                   CUDA_ERROR_ILLEGAL_ADDRESS) +
            expect("cuCtxSynchronize", cu.ctx_sync(),
                   CUDA_ERROR_ILLEGAL_ADDRESS) +
            expect("cuStreamQuery", cu.stream_query((CUstream)s),
                   CUDA_ERROR_ILLEGAL_ADDRESS) +
            expect("cuEventCreate", cu.event_create(&ce, 0),
                   CUDA_ERROR_ILLEGAL_ADDRESS);
  if (pthread_create(&t, NULL, read_last_error, &other) != 0)
    die("pthread_create");
  pthread_join(t, NULL);
  bad += expect("cudaGetLastError in another thread", other, ill);
  bad += expect("cudaGetLastError at the end", cudaGetLastError(), ill);
  return bad ? 1 : 0;
}

/* A fault injected into the first launch (SPCSIM_FAULT_LAUNCH); the
 * launch call itself succeeds, as an asynchronous fault does. */
static int injected_fault(void) {
  unsigned char pattern[64] = {1};
  cudaStream_t sd, s0;
  void *descs, *src, *dst;
  setenv("SPCSIM_FAULT_LAUNCH", "sim_rules:1", 1);
  copy_setup(0, pattern, &sd, &s0, &descs, &src, &dst);
  queue_copy(descs, src, dst, s0);
  return sticky_checks(s0, src);
}

/* An access the simulator refuses, let through (SPCSIM_ON_VIOLATION=
 * continue): the kernel faults instead of running, as on a GPU. */
static int refused_access_faults(void) {
  unsigned char pattern[64] = {1};
  cudaStream_t sd, s0;
  void *descs, *src, *dst;
  setenv("SPCSIM_ON_VIOLATION", "continue", 1);
  copy_setup(1, pattern, &sd, &s0, &descs, &src, &dst);
  queue_copy(descs, src, dst, s0); /* descriptor in GPU 1's pool */
  return sticky_checks(s0, src);
}

START_TEST(device_fault_is_sticky) {
  ck_assert_msg(in_child(injected_fault) == 0,
                "an injected fault was not sticky (stderr says which call)");
  ck_assert_msg(in_child(refused_access_faults) == 0,
                "a refused access did not fault the context");
  /* Another process is untouched: the same copy runs. */
  unsigned char got[64];
  ck_assert_int_eq(plan_copy(0, got), 0);
}
END_TEST

/* The first launch of a process, with SPCSIM_FAULT_LAUNCH=sim_rules:1:once:
 * 1 when it faulted, 0 when it ran, 2 when something else failed. */
static int first_launch_faults_once(void) {
  unsigned char pattern[64] = {1};
  cudaStream_t sd, s0;
  void *descs, *src, *dst;
  setenv("SPCSIM_FAULT_LAUNCH", "sim_rules:1:once", 1);
  copy_setup(0, pattern, &sd, &s0, &descs, &src, &dst);
  queue_copy(descs, src, dst, s0);
  cudaError_t e = cudaStreamSynchronize(s0);
  return e == cudaErrorIllegalAddress ? 1 : e == cudaSuccess ? 0 : 2;
}

/* ":once": of two processes (sharing SPCSIM_STATE, as the suites' do),
 * only the first meets the fault. */
START_TEST(fault_once_on_the_machine) {
  if (getenv("SPCSIM_STATE") == NULL)
    return; /* per process then: nothing to see */
  ck_assert_int_eq(in_child(first_launch_faults_once), 1);
  ck_assert_int_eq(in_child(first_launch_faults_once), 0);
}
END_TEST

/* The faulted child's two device buffers of 64 bytes (after_a_fault). */
static void *fault_src, *fault_dst;

/* In a child: the process's first launch faults (its context is lost),
 * `then` runs with the faulted stream and gives the exit status; the
 * child must exit 0, else the test fails saying `why`. */
static void after_a_fault(int (*then)(cudaStream_t s0), const char *why) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    unsigned char pattern[64] = {1};
    cudaStream_t sd, s0;
    void *descs, *src, *dst;
    setenv("SPCSIM_FAULT_LAUNCH", "sim_rules:1", 1);
    copy_setup(0, pattern, &sd, &s0, &descs, &src, &dst);
    queue_copy(descs, src, dst, s0);
    fault_src = src;
    fault_dst = dst;
    exit(then(s0));
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the faulted process exited with %#x (%s)", st, why);
}

static int exit_with_leaks_fatal(cudaStream_t s0) {
  setenv("SPCSIM_LEAKS_FATAL", "1", 1); /* read at exit */
  return cudaStreamSynchronize(s0) == cudaErrorIllegalAddress ? 0 : 3;
}

/* A process that faulted while holding device memory and then exits
 * normally, with leaks fatal: the leak report is said, not counted (a
 * lost context can release nothing; CUDA takes it back at exit). */
START_TEST(lost_context_leaks_not_counted) {
  after_a_fault(exit_with_leaks_fatal, "98: its leaks were counted");
}
END_TEST

static int sync_on_the_main_thread(cudaStream_t s0) {
  if (cudaStreamSynchronize(s0) != cudaErrorIllegalAddress)
    return 3;
  setenv("SPCSIM_FORBID_SYNC", "1", 1);
  return cudaStreamSynchronize(s0) == cudaErrorIllegalAddress ? 0 : 4;
}

/* A lost context waits for nothing: a synchronize on the main thread
 * returns the sticky error at once, and is no host-sync wait (the
 * daemon's last resort for a stream that takes no callback). */
START_TEST(lost_context_calls_do_not_block) {
  after_a_fault(sync_on_the_main_thread, "a host-sync rule stop: the "
                "synchronize of a lost context was flagged");
}
END_TEST

static void CUDART_CB never_cb(cudaStream_t s, cudaError_t e, void *arg) {
  (void)s, (void)e, (void)arg;
}

static void CUDART_CB never_host(void *arg) {
  (void)arg;
}

static int work_refused(cudaStream_t s0) {
  if (cudaStreamSynchronize(s0) != cudaErrorIllegalAddress)
    return 3;
  int bad = 0;
  bad |= cudaStreamAddCallback(s0, never_cb, NULL, 0) == cudaSuccess;
  bad |= cudaLaunchHostFunc(s0, never_host, NULL) == cudaSuccess;
  bad |= cudaMemcpyAsync(fault_dst, fault_src, 64, cudaMemcpyDeviceToDevice,
                         s0) == cudaSuccess;
  bad |= cudaMemsetAsync(fault_dst, 0, 64, s0) == cudaSuccess;
  bad |= cudaMemcpy2DAsync(fault_dst, 16, fault_src, 16, 16, 4,
                           cudaMemcpyDeviceToDevice, s0) == cudaSuccess;
  return bad ? 4 : 0;
}

/* A lost context takes no more work: callbacks, host functions, copies
 * and sets each fail with the sticky error and keep nothing (under ASan
 * the child's exit reports what they kept: the daemon's faulted
 * cudaStreamAddCallback leaked its record so). */
START_TEST(lost_context_refuses_work) {
  after_a_fault(work_refused, "3: no sticky error; 4: work accepted; "
                "else, under ASan: LeakSanitizer found what was kept");
}
END_TEST

/* ---- events ---- */

static void ipc_event_timing(void) {
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventInterprocess);
}

START_TEST(ipc_event_without_disable_timing) {
  ck_assert(rejected(ipc_event_timing, "ipc-event-timing"));
}
END_TEST

static void event_destroyed_while_imported(void) {
  cudaEvent_t e;
  cudaIpcEventHandle_t h;
  S(cudaEventCreateWithFlags(&e,
                             cudaEventInterprocess | cudaEventDisableTiming));
  S(cudaIpcGetEventHandle(&h, e));
  int up[2];
  S(pipe(up));
  if (fork() == 0) {
    cudaEvent_t o;
    S(cudaIpcOpenEventHandle(&o, h));
    if (write(up[1], "x", 1) != 1)
      _exit(3);
    pause();
    _exit(0);
  }
  char c;
  if (read(up[0], &c, 1) != 1)
    die("importer");
  cudaEventDestroy(e);
}

START_TEST(ipc_event_destroyed_while_imported) {
  ck_assert(rejected(event_destroyed_while_imported,
                     "ipc-event-destroyed-while-imported"));
}
END_TEST

/* The importer side works across processes: a wait on an event recorded
 * in another process holds the stream until it completes. */
START_TEST(ipc_event_orders_across_processes) {
  cudaIpcEventHandle_t h;
  helper(make_event, &h);
  cudaEvent_t e;
  OK(cudaIpcOpenEventHandle(&e, h));
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaStreamWaitEvent(s, e, 0)); /* never recorded: no wait */
  OK(cudaStreamSynchronize(s));
  OK(cudaEventDestroy(e));
  OK(cudaStreamDestroy(s));
}
END_TEST

/* ---- the last error ---- */

static void *other_thread(void *arg) {
  *(int *)arg = (int)cudaGetLastError();
  return NULL;
}

START_TEST(last_error_is_per_thread_and_cleared_on_read) {
  ck_assert_int_ne((int)cudaSetDevice(1000), 0);
  int other = -1;
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, other_thread, &other), 0);
  pthread_join(t, NULL);
  ck_assert_int_eq(other, (int)cudaSuccess); /* not that thread's error */
  ck_assert_int_eq((int)cudaPeekAtLastError(), (int)cudaErrorInvalidDevice);
  ck_assert_int_eq((int)cudaGetLastError(), (int)cudaErrorInvalidDevice);
  ck_assert_int_eq((int)cudaGetLastError(), (int)cudaSuccess);
  /* A later success does not clear it: only reading does. */
  ck_assert_int_ne((int)cudaSetDevice(1000), 0);
  OK(cudaSetDevice(0));
  ck_assert_int_eq((int)cudaGetLastError(), (int)cudaErrorInvalidDevice);
}
END_TEST

/* ---- copies ---- */

static void pageable_async(void) {
  setenv("SPCSIM_FORBID_PAGEABLE_ASYNC", "1", 1);
  void *d;
  char *h = malloc(4096);
  if (h == NULL)
    die("malloc");
  S(cudaMalloc(&d, 4096));
  cudaMemcpyAsync(d, h, 4096, cudaMemcpyHostToDevice, 0);
}

START_TEST(pageable_async_copy_synchronizes) {
  ck_assert(rejected(pageable_async, "pageable-async-copy"));
}
END_TEST

/* ---- memory ---- */

/* Device memory is one budget across processes (SPCSIM_STATE): what a
 * helper holds is not there for this process; exhaustion is an error
 * code, loud on stderr, and the process goes on. */
START_TEST(device_memory_exhaustion) {
  size_t total = (size_t)1 << 30;
  struct cudaDeviceProp p;
  OK(cudaGetDeviceProperties(&p, 0));
  total = p.totalGlobalMem;
  void *a = NULL, *b = NULL;
  ck_assert_int_eq((int)cudaMalloc(&a, total + 1),
                   (int)cudaErrorMemoryAllocation);
  ck_assert_int_eq((int)cudaGetLastError(), (int)cudaErrorMemoryAllocation);
  OK(cudaMalloc(&a, total / 2 + 4096));
  int up[2];
  OK(pipe(up));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    void *c = NULL;
    int rc = cudaMalloc(&c, total / 2 + 4096);
    _exit(rc == cudaErrorMemoryAllocation ? 0 : 1);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "another process got memory this one holds");
  OK(cudaFree(a));
  OK(cudaMalloc(&b, total / 2 + 4096));
  OK(cudaFree(b));
  close(up[0]);
  close(up[1]);
}
END_TEST

/* cudaFree waits for the device before it unmaps (as CUDA's does):
 * torch's empty_cache frees segments right after queueing copies from
 * them. The copy is held behind a host function so it is still queued
 * when the source is freed; without the wait it reads unmapped memory. */
static void hold(void *arg) {
  usleep(100 * 1000); /* keeps the copy queued; not a timing check */
  *(volatile int *)arg = 1;
}

/* A copy from memory made by alloc (device or pinned), held behind a host
 * function, is still queued when free runs; free must wait for it. */
static void free_waits(cudaError_t (*alloc)(void **, size_t),
                       cudaError_t (*free_fn)(void *), enum cudaMemcpyKind k,
                       const char *call) {
  enum { N = 1 << 20 };
  unsigned char *src, *dst, *got = malloc(N);
  ck_assert_ptr_nonnull(got);
  volatile int held = 0;
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(alloc((void **)&src, N));
  OK(cudaMalloc((void **)&dst, N));
  memset(got, 0x5a, N);
  OK(cudaMemcpy(src, got, N, cudaMemcpyDefault));
  memset(got, 0, N);
  OK(cudaLaunchHostFunc(s, hold, (void *)&held));
  OK(cudaMemcpyAsync(dst, src, N, k, s));
  OK(free_fn(src));
  ck_assert_msg(held == 1, "%s returned before queued work ran", call);
  OK(cudaMemcpy(got, dst, N, cudaMemcpyDeviceToHost));
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(got[i], 0x5a);
  OK(cudaFree(dst));
  OK(cudaStreamDestroy(s));
  free(got);
}

static cudaError_t malloc_device(void **p, size_t n) {
  return cudaMalloc(p, n);
}

static cudaError_t malloc_host(void **p, size_t n) {
  return cudaMallocHost(p, n);
}

START_TEST(free_waits_for_queued_work) {
  free_waits(malloc_device, cudaFree, cudaMemcpyDeviceToDevice, "cudaFree");
}
END_TEST

/* cudaFreeHost synchronizes too (pinned memory). */
START_TEST(free_host_waits_for_queued_work) {
  free_waits(malloc_host, cudaFreeHost, cudaMemcpyHostToDevice,
             "cudaFreeHost");
}
END_TEST

/* ---- default streams ------------------------------------------------------
 * A host function A on stream `first` holds it until the test lets go;
 * B on stream `second`, queued after A, notes whether A had finished.
 * B ran while A held its stream: `second` does not wait for `first`. */

void CUDART_CB hold_a(void *arg) {
  order_t *o = arg;
  while (!__atomic_load_n(&o->go, __ATOMIC_ACQUIRE))
    usleep(1000);
  __atomic_store_n(&o->a_done, 1, __ATOMIC_RELEASE);
}

void CUDART_CB note_b(void *arg) {
  order_t *o = arg;
  o->b_saw = __atomic_load_n(&o->a_done, __ATOMIC_ACQUIRE);
  __atomic_store_n(&o->b_ran, 1, __ATOMIC_RELEASE);
}

int ran_within(order_t *o, int ms) {
  for (int i = 0; i < ms; i++) {
    if (__atomic_load_n(&o->b_ran, __ATOMIC_ACQUIRE))
      return 1;
    usleep(1000);
  }
  return __atomic_load_n(&o->b_ran, __ATOMIC_ACQUIRE);
}

/* 1: B waited for A (it did not run while A held, and saw A done). */
static int waits(cudaStream_t first, cudaStream_t second) {
  static order_t o;
  memset(&o, 0, sizeof(o));
  OK(cudaLaunchHostFunc(first, hold_a, &o));
  OK(cudaLaunchHostFunc(second, note_b, &o));
  int early = ran_within(&o, 200);
  __atomic_store_n(&o.go, 1, __ATOMIC_RELEASE);
  OK(cudaDeviceSynchronize());
  return !early && o.b_ran && o.b_saw;
}

START_TEST(legacy_stream_waits_for_blocking_streams) {
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  ck_assert_msg(waits(s, 0), "the NULL stream did not wait for a stream");
  ck_assert_msg(waits(s, cudaStreamLegacy),
                "cudaStreamLegacy did not wait for a stream");
  ck_assert_msg(waits(0, s), "a stream did not wait for the NULL stream");
  ck_assert_msg(waits(cudaStreamPerThread, 0),
                "the NULL stream did not wait for cudaStreamPerThread");
  OK(cudaStreamDestroy(s));
}
END_TEST

START_TEST(non_blocking_streams_do_not_wait) {
  cudaStream_t n;
  OK(cudaStreamCreateWithFlags(&n, cudaStreamNonBlocking));
  static order_t o;
  memset(&o, 0, sizeof(o));
  OK(cudaLaunchHostFunc(n, hold_a, &o));
  OK(cudaLaunchHostFunc(0, note_b, &o));
  /* B must run while A holds n: a wait for it would never end. */
  int ran = ran_within(&o, 5000);
  __atomic_store_n(&o.go, 1, __ATOMIC_RELEASE);
  OK(cudaDeviceSynchronize());
  ck_assert_msg(ran && !o.b_saw, "the NULL stream waited for a "
                "cudaStreamNonBlocking stream");
  OK(cudaStreamDestroy(n));
}
END_TEST

/* ---- topology ---------------------------------------------------------------
 * GPUs 0 and 1 without peer access (SPCSIM_NO_PEER=0-1), 0 and 2 with:
 * what CUDA answers there. The simulator reads its topology when it is
 * loaded, so these run in a process of their own (run_anew). */

static int no_peer_checks(void) {
  int ok01 = -1, ok10 = -1, ok02 = -1;
  cudaMemPool_t p1, p2;
  struct cudaMemAccessDesc d = {{cudaMemLocationTypeDevice, 0},
                                cudaMemAccessFlagsProtReadWrite};
  int bad = expect("cudaDeviceCanAccessPeer(0, 1) rc",
                   cudaDeviceCanAccessPeer(&ok01, 0, 1), cudaSuccess) +
            expect("cudaDeviceCanAccessPeer(0, 1)", ok01, 0) +
            expect("cudaDeviceCanAccessPeer(1, 0) rc",
                   cudaDeviceCanAccessPeer(&ok10, 1, 0), cudaSuccess) +
            expect("cudaDeviceCanAccessPeer(1, 0)", ok10, 0) +
            expect("cudaDeviceCanAccessPeer(0, 2) rc",
                   cudaDeviceCanAccessPeer(&ok02, 0, 2), cudaSuccess) +
            expect("cudaDeviceCanAccessPeer(0, 2)", ok02, 1) +
            expect("cudaSetDevice(0)", cudaSetDevice(0), cudaSuccess) +
            expect("cudaDeviceEnablePeerAccess(1)",
                   cudaDeviceEnablePeerAccess(1, 0),
                   cudaErrorPeerAccessUnsupported) +
            expect("cudaGetLastError", cudaGetLastError(),
                   cudaErrorPeerAccessUnsupported) +
            expect("cudaDeviceEnablePeerAccess(2)",
                   cudaDeviceEnablePeerAccess(2, 0), cudaSuccess) +
            expect("cudaDeviceGetDefaultMemPool(1)",
                   cudaDeviceGetDefaultMemPool(&p1, 1), cudaSuccess) +
            expect("cudaMemPoolSetAccess(GPU 1's pool for GPU 0)",
                   cudaMemPoolSetAccess(p1, &d, 1), cudaErrorInvalidValue) +
            expect("cudaDeviceGetDefaultMemPool(2)",
                   cudaDeviceGetDefaultMemPool(&p2, 2), cudaSuccess) +
            expect("cudaMemPoolSetAccess(GPU 2's pool for GPU 0)",
                   cudaMemPoolSetAccess(p2, &d, 1), cudaSuccess);
  return bad ? 1 : 0;
}

START_TEST(gpus_without_peer_access) {
  ck_assert_msg(run_anew("SPCSIM_NO_PEER", "0-1", "nopeer") == 0,
                "the checks of GPUs without peer access failed");
}
END_TEST

int main(void) {
  if (dlsym(RTLD_DEFAULT, "sim_cfg") == NULL) {
    printf("skipped: not running on spcsim (tests/gpusim/simrun.sh)\n");
    return 77;
  }
  const char *checks = getenv("SIM_RULES_CHECKS");
  if (checks != NULL)
    return strcmp(checks, "nopeer") == 0       ? no_peer_checks()
           : strcmp(checks, "nomemops") == 0   ? no_memops_checks()
           : strcmp(checks, "nomemopsv1") == 0 ? no_v1_memops_checks()
           : strcmp(checks, "vmmnopeer") == 0  ? vmm_no_peer_checks()
                                               : 2;
  Suite *s = suite_create("spcsim_rules");
  TCase *tc = tcase_create("rules");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, ipc_free_while_imported);
  tcase_add_test(tc, ipc_dead_importer_holds_nothing);
  tcase_add_test(tc, ipc_unmap_not_close);
  tcase_add_test(tc, ipc_open_own_process);
  tcase_add_test(tc, ipc_open_twice_counts);
  tcase_add_test(tc, ipc_handle_not_allocation_base);
  tcase_add_test(tc, pool_memory_from_another_device);
  tcase_add_test(tc, plan_kernel_runs_from_its_own_source);
  tcase_add_test(tc, kernel_reading_another_devices_pool);
  tcase_add_test(tc, device_fault_is_sticky);
  tcase_add_test(tc, fault_once_on_the_machine);
  tcase_add_test(tc, lost_context_leaks_not_counted);
  tcase_add_test(tc, lost_context_calls_do_not_block);
  tcase_add_test(tc, lost_context_refuses_work);
  tcase_add_test(tc, ipc_event_without_disable_timing);
  tcase_add_test(tc, ipc_event_destroyed_while_imported);
  tcase_add_test(tc, ipc_event_orders_across_processes);
  tcase_add_test(tc, last_error_is_per_thread_and_cleared_on_read);
  tcase_add_test(tc, pageable_async_copy_synchronizes);
  sim_rules_block(tc);
  sim_rules_nccl(tc);
  tcase_add_test(tc, device_memory_exhaustion);
  tcase_add_test(tc, free_waits_for_queued_work);
  tcase_add_test(tc, free_host_waits_for_queued_work);
  tcase_add_test(tc, legacy_stream_waits_for_blocking_streams);
  tcase_add_test(tc, non_blocking_streams_do_not_wait);
  sim_rules_memops(tc);
  sim_rules_vmm(tc);
  tcase_add_test(tc, gpus_without_peer_access);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
