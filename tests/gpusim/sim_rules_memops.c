/* The rules suite's stream memory operations (cuStreamWriteValue32/64,
 * cuStreamWaitValue32/64, cuStreamBatchMemOp) and host memory
 * registration (cudaHostRegister), as CUDA defines them: on device memory
 * and on host memory the GPUs reach, within a process and across two;
 * the misuse each rule names; a stream left stuck. Registered by
 * sim_rules.c's main (sim_rules_memops). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_rules.h"

static void CUDART_CB mark(void *arg) {
  __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

/* Whether *flag became nonzero within ms milliseconds. */
static int set_within(const int *flag, int ms) {
  for (int i = 0; i < ms; i++) {
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE))
      return 1;
    usleep(1000);
  }
  return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);

/* The deprecated v1 API's plain entry point cuStreamWriteValue32 (what
 * torch looks up by name). */
static write32_fn v1_write32(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  write32_fn f;
  *(void **)&f = h ? dlsym(h, "cuStreamWriteValue32") : NULL;
  if (f == NULL)
    die("cuStreamWriteValue32");
  return f;
}

typedef struct {
  int size;
  unsigned flags;
  uint64_t value, before, after; /* the word: holds back, then lets go */
} wait_case;

/* Each condition, with a word that does not meet it and one that does;
 * the values tell apart a plain >= from the cyclic one, 32-bit NOR in
 * 64 bits, and a 64-bit word read as its low half. */
static const wait_case wait_cases[] = {
    {4, CU_STREAM_WAIT_VALUE_GEQ, 10, 9, 10},
    {4, CU_STREAM_WAIT_VALUE_GEQ, 0xfffffffe, 0xfffffffd, 1},
    {4, CU_STREAM_WAIT_VALUE_EQ, 7, 8, 7},
    {4, CU_STREAM_WAIT_VALUE_AND, 0x4, 0x3, 0x6},
    {4, CU_STREAM_WAIT_VALUE_NOR, 0xfffffff0, 0xf, 0x7},
    {8, CU_STREAM_WAIT_VALUE_GEQ, 1ull << 32, 0xffffffff, 1ull << 32},
    {8, CU_STREAM_WAIT_VALUE_GEQ, ~0ull - 1, ~0ull - 2, 1},
    {8, CU_STREAM_WAIT_VALUE_EQ, 0x500000007, 0x7, 0x500000007},
    {8, CU_STREAM_WAIT_VALUE_AND, 1ull << 40, 0xffffffff, 1ull << 40},
    {8, CU_STREAM_WAIT_VALUE_NOR, ~(1ull << 63), 1ull << 63, 0},
};

static void store_word(void *w, int size, uint64_t v) {
  if (size == 4)
    __atomic_store_n((uint32_t *)w, (uint32_t)v, __ATOMIC_RELEASE);
  else
    __atomic_store_n((uint64_t *)w, v, __ATOMIC_RELEASE);
}

/* The host stores into registered memory (no wake-up: the wait must
 * look again); case i waits through the batch call when batch. */
START_TEST(stream_wait_value_conditions) {
  drv_api cu = drv();
  int v92 = -1, v93 = -1, v122 = -1;
  OK(cu.attr(&v92, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0));
  OK(cu.attr(&v93, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 0));
  OK(cu.attr(&v122, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0));
  ck_assert(v92 == 1 && v93 == 1 && v122 == 1);
  uint64_t *word = aligned_alloc(4096, 4096);
  ck_assert_ptr_nonnull(word);
  OK(cudaHostRegister(word, 4096, cudaHostRegisterMapped));
  OK(v1_write32()(NULL, dptr(word), 0, 0)); /* the v1 API is there too */
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (size_t i = 0; i < sizeof(wait_cases) / sizeof(wait_cases[0]); i++) {
    const wait_case *c = &wait_cases[i];
    int done = 0, batch = i % 2 == 1;
    store_word(word, c->size, c->before);
    CUstreamBatchMemOpParams p;
    memset(&p, 0, sizeof(p));
    p.waitValue.operation = c->size == 4 ? CU_STREAM_MEM_OP_WAIT_VALUE_32
                                         : CU_STREAM_MEM_OP_WAIT_VALUE_64;
    p.waitValue.address = dptr(word);
    p.waitValue.value64 = c->value;
    if (c->size == 4)
      p.waitValue.value = (cuuint32_t)c->value;
    p.waitValue.flags = c->flags;
    if (batch)
      OK(cu.batch((CUstream)s, 1, &p, 0));
    else if (c->size == 4)
      OK(cu.wait32((CUstream)s, dptr(word), (cuuint32_t)c->value, c->flags));
    else
      OK(cu.wait64((CUstream)s, dptr(word), c->value, c->flags));
    OK(cudaLaunchHostFunc(s, mark, &done));
    ck_assert_msg(!set_within(&done, 30), "case %zu: the wait let go early", i);
    store_word(word, c->size, c->after);
    ck_assert_msg(set_within(&done, 5000), "case %zu: the wait held on", i);
    OK(cudaStreamSynchronize(s));
  }
  OK(cudaStreamDestroy(s));
  OK(cudaHostUnregister(word));
  free(word);
}
END_TEST

/* A write waits for the work queued before it on its stream (held here
 * by a host function); a wait on another stream holds that stream's
 * later work until the write. Device memory, 64-bit. */
START_TEST(stream_write_value_in_stream_order) {
  drv_api cu = drv();
  static order_t o;
  memset(&o, 0, sizeof(o));
  cudaStream_t a, b;
  uint64_t *w, got = 0;
  const uint64_t v = 0x123456789abull;
  OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  OK(cudaMalloc((void **)&w, 64));
  OK(cudaMemset(w, 0, 64));
  OK(cudaLaunchHostFunc(a, hold_a, &o));
  OK(cu.write64((CUstream)a, dptr(w), v, CU_STREAM_WRITE_VALUE_DEFAULT));
  OK(cu.wait64((CUstream)b, dptr(w), v, CU_STREAM_WAIT_VALUE_EQ));
  OK(cudaLaunchHostFunc(b, note_b, &o));
  int early = ran_within(&o, 200);
  __atomic_store_n(&o.go, 1, __ATOMIC_RELEASE);
  OK(cudaStreamSynchronize(a));
  OK(cudaStreamSynchronize(b));
  ck_assert_msg(!early && o.b_ran && o.b_saw,
                "the write did not wait for its stream's earlier work, or "
                "the wait did not hold its stream");
  OK(cudaMemcpy(&got, w, 8, cudaMemcpyDeviceToHost));
  ck_assert(got == v);
  OK(cudaFree(w));
  OK(cudaStreamDestroy(a));
  OK(cudaStreamDestroy(b));
}
END_TEST

/* One side of a ping-pong through two words, all on its stream: the
 * first writes ping and waits for pong, the other waits for ping and
 * writes pong. 0 when its stream got through within 5 s. */
static int ping_pong(void *ping, void *pong, int first) {
  drv_api cu = drv();
  cudaStream_t s;
  int done = 0;
  S(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (first) {
    S(cu.write32((CUstream)s, dptr(ping), 1, 0));
    S(cu.wait32((CUstream)s, dptr(pong), 2, CU_STREAM_WAIT_VALUE_EQ));
  } else {
    S(cu.wait32((CUstream)s, dptr(ping), 1, CU_STREAM_WAIT_VALUE_EQ));
    S(cu.write32((CUstream)s, dptr(pong), 2, CU_STREAM_WRITE_VALUE_DEFAULT));
  }
  S(cudaLaunchHostFunc(s, mark, &done));
  int ok = set_within(&done, 5000);
  if (ok)
    S(cudaStreamDestroy(s));
  return ok ? 0 : 1;
}

/* Device memory: a child allocates the words and exports them, this
 * process imports them (CUDA IPC); both streams signal each other. */
static void device_words_across_processes(void) {
  int up[2], down[2];
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char *w, c;
    cudaIpcMemHandle_t h;
    S(cudaMalloc((void **)&w, 4096));
    S(cudaMemset(w, 0, 4096));
    S(cudaIpcGetMemHandle(&h, w));
    if (write(up[1], &h, sizeof(h)) != (ssize_t)sizeof(h))
      _exit(3);
    int rc = ping_pong(w, w + 64, 0);
    if (read(down[0], &c, 1) != 1) /* the importer closed it */
      _exit(3);
    S(cudaFree(w));
    _exit(rc);
  }
  cudaIpcMemHandle_t h;
  char *w;
  ck_assert_int_eq(read(up[0], &h, sizeof(h)), (ssize_t)sizeof(h));
  OK(cudaIpcOpenMemHandle((void **)&w, h, cudaIpcMemLazyEnablePeerAccess));
  ck_assert_int_eq(ping_pong(w, w + 64, 1), 0);
  OK(cudaIpcCloseMemHandle(w));
  ck_assert_int_eq(write(down[1], "x", 1), 1);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the exporter's side failed (status 0x%x)", st);
}

/* Host memory: one shared mapping, registered by each process. */
static void host_words_across_processes(void) {
  char *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  ck_assert_ptr_ne(w, MAP_FAILED);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    S(cudaHostRegister(w, 4096, cudaHostRegisterMapped));
    int rc = ping_pong(w, w + 64, 0);
    S(cudaHostUnregister(w));
    _exit(rc);
  }
  OK(cudaHostRegister(w, 4096, cudaHostRegisterDefault));
  ck_assert_int_eq(ping_pong(w, w + 64, 1), 0);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the other process's side failed (status 0x%x)", st);
  OK(cudaHostUnregister(w));
  ck_assert_int_eq(munmap(w, 4096), 0);
}

START_TEST(stream_memops_across_processes) {
  device_words_across_processes();
  host_words_across_processes();
}
END_TEST

static void misaligned_write32(void) {
  char *p;
  S(cudaMalloc((void **)&p, 64));
  drv().write32(NULL, dptr(p + 2), 1, 0);
}

static void misaligned_wait64(void) {
  char *p;
  S(cudaMalloc((void **)&p, 64));
  drv().wait64(NULL, dptr(p + 4), 1, CU_STREAM_WAIT_VALUE_GEQ);
}

START_TEST(stream_memop_misaligned) {
  ck_assert(rejected(misaligned_write32, "memop-misaligned"));
  ck_assert(rejected(misaligned_wait64, "memop-misaligned"));
}
END_TEST

/* Pageable memory never registered: no GPU can reach it. */
static void unmapped_write(void) {
  static uint32_t word;
  drv().write32(NULL, dptr(&word), 1, 0);
}

START_TEST(stream_memop_on_unmapped_host_memory) {
  ck_assert(rejected(unmapped_write, "memop-address-unmapped"));
}
END_TEST

/* What the calls return for what they refuse (the rules let through);
 * a batch with one bad entry queues none. */
START_TEST(stream_memop_refusals) {
  setenv("SPCSIM_ON_VIOLATION", "continue", 1);
  drv_api cu = drv();
  const int inval = CUDA_ERROR_INVALID_VALUE;
  static uint32_t pageable;
  uint32_t *w, got = 5;
  OK(cudaMalloc((void **)&w, 64));
  OK(cudaMemset(w, 0, 64));
  CUstreamBatchMemOpParams p[2];
  memset(p, 0, sizeof(p));
  p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p[0].writeValue.address = dptr(w);
  p[0].writeValue.value = 9;
  p[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  p[1].waitValue.address = dptr(w) + 1;
  int bad =
      expect("misaligned", cu.write32(NULL, dptr(w) + 2, 1, 0), inval) +
      expect("pageable", cu.write32(NULL, dptr(&pageable), 1, 0), inval) +
      expect("wait flags 0x7", cu.wait32(NULL, dptr(w), 1, 0x7), inval) +
      expect("write flags 0x2", cu.write32(NULL, dptr(w), 1, 0x2), inval) +
      expect("wait flush",
             cu.wait32(NULL, dptr(w), 0, CU_STREAM_WAIT_VALUE_FLUSH),
             CUDA_ERROR_NOT_SUPPORTED) +
      expect("batch of 256", cu.batch(NULL, 256, p, 0), inval) +
      expect("batch flags", cu.batch(NULL, 1, p, 1), inval) +
      expect("batch, second misaligned", cu.batch(NULL, 2, p, 0), inval) +
      expect(
          "no memory barrier",
          cu.write32(NULL, dptr(w), 3, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
          CUDA_SUCCESS);
  OK(cudaStreamSynchronize(NULL));
  OK(cudaMemcpy(&got, w, 4, cudaMemcpyDeviceToHost));
  bad += expect("the word (the batch wrote nothing)", (int)got, 3);
  ck_assert_int_eq(bad, 0);
  OK(cudaFree(w));
}
END_TEST

/* SPCSIM_NO_STREAM_MEM_OPS=1 (in a process of its own, run_anew): the
 * attributes read 0 and the calls are not supported. */
int no_memops_checks(void) {
  drv_api cu = drv();
  int v92 = -1, v93 = -1, v122 = -1;
  uint32_t *w;
  CUstreamBatchMemOpParams p;
  memset(&p, 0, sizeof(p));
  const int ns = CUDA_ERROR_NOT_SUPPORTED;
  S(cudaMalloc((void **)&w, 64));
  p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p.writeValue.address = dptr(w);
  int bad =
      expect("attribute 92 rc",
             cu.attr(&v92, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0),
             0) +
      expect("CAN_USE_STREAM_MEM_OPS_V1", v92, 0) +
      expect("attribute 93 rc",
             cu.attr(&v93, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1,
                     0),
             0) +
      expect("CAN_USE_64_BIT_STREAM_MEM_OPS_V1", v93, 0) +
      expect(
          "attribute 122 rc",
          cu.attr(&v122, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0),
          0) +
      expect("CAN_USE_64_BIT_STREAM_MEM_OPS", v122, 0) +
      expect("cuStreamWriteValue32", cu.write32(NULL, dptr(w), 1, 0), ns) +
      expect("cuStreamWriteValue64", cu.write64(NULL, dptr(w), 1, 0), ns) +
      expect("cuStreamWaitValue32", cu.wait32(NULL, dptr(w), 0, 0), ns) +
      expect("cuStreamWaitValue64", cu.wait64(NULL, dptr(w), 0, 0), ns) +
      expect("cuStreamBatchMemOp", cu.batch(NULL, 1, &p, 0), ns);
  S(cudaFree(w));
  return bad ? 1 : 0;
}

/* SPCSIM_NO_STREAM_MEM_OPS=v1, a driver without the deprecated v1 API
 * (loaded without NVreg_EnableStreamMemOPs=1, the usual case): its
 * attributes read 0 and its plain entry points are not supported, while
 * the _v2 ones and the current attributes work. */
int no_v1_memops_checks(void) {
  drv_api cu = drv();
  int v92 = -1, v122 = -1;
  uint32_t *w, got = 0;
  S(cudaMalloc((void **)&w, 64));
  S(cudaMemset(w, 0, 64));
  int bad =
      expect("attribute 92 rc",
             cu.attr(&v92, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0),
             0) +
      expect("CAN_USE_STREAM_MEM_OPS_V1", v92, 0) +
      expect(
          "attribute 122 rc",
          cu.attr(&v122, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0),
          0) +
      expect("CAN_USE_64_BIT_STREAM_MEM_OPS", v122, 1) +
      expect("cuStreamWriteValue32 (v1)", v1_write32()(NULL, dptr(w), 1, 0),
             CUDA_ERROR_NOT_SUPPORTED) +
      expect("cuStreamWriteValue32_v2", cu.write32(NULL, dptr(w), 2, 0), 0);
  S(cudaMemcpy(&got, w, 4, cudaMemcpyDeviceToHost));
  bad += expect("the word", (int)got, 2);
  S(cudaFree(w));
  return bad ? 1 : 0;
}

START_TEST(gpus_without_stream_memops) {
  ck_assert_msg(run_anew("SPCSIM_NO_STREAM_MEM_OPS", "1", "nomemops") == 0,
                "the checks of GPUs without stream memory operations failed");
  ck_assert_msg(run_anew("SPCSIM_NO_STREAM_MEM_OPS", "v1", "nomemopsv1") == 0,
                "the checks of a driver without the v1 API failed");
}
END_TEST

/* A stream left waiting on a word no one writes: cudaStreamDestroy
 * returns (CUDA's does), and the exit's leak report names the wait, so
 * the process fails (SPCSIM_LEAKS_FATAL); released, nothing is left.
 * 0 (stderr clean) or 98 with the wait named, else 1. */
static int stuck_at_exit(int release) {
  char path[] = "/tmp/spcsim-stuck-XXXXXX";
  int fd;
  pid_t pid = child_start(path, &fd);
  if (pid == 0) {
    setenv("SPCSIM_LEAKS_FATAL", "1", 1);
    drv_api cu = drv();
    cudaStream_t s;
    uint32_t *w, one = 1;
    int done = 0;
    S(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    S(cudaMalloc((void **)&w, 64));
    S(cudaMemset(w, 0, 64));
    S(cu.wait32((CUstream)s, dptr(w), 1, CU_STREAM_WAIT_VALUE_EQ));
    S(cudaLaunchHostFunc(s, mark, &done));
    usleep(20 * 1000); /* the wait has begun (not needed: it may queue) */
    S(cudaStreamDestroy(s));
    if (!release)
      exit(0); /* the leak report runs */
    S(cudaMemcpy(w, &one, 4, cudaMemcpyHostToDevice));
    if (!set_within(&done, 5000))
      _exit(4);
    S(cudaFree(w));
    exit(0);
  }
  char buf[4096];
  int st = child_reap(pid, fd, path, buf, sizeof(buf));
  int named = strstr(buf, "still waits for the 32-bit word") != NULL;
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if ((code == 0 && !named) || (code == 98 && named))
    return code;
  fprintf(stderr, "stuck_at_exit(%d): status %d, child said:\n%s\n", release,
          code, buf);
  return 1;
}

START_TEST(stream_left_waiting_fails_at_exit) {
  ck_assert_int_eq(stuck_at_exit(0), 98);
  ck_assert_int_eq(stuck_at_exit(1), 0);
}
END_TEST

/* ---- host memory registration ---- */

START_TEST(host_register_as_cuda_does) {
  char *buf = aligned_alloc(4096, 8192);
  void *d = NULL;
  ck_assert_ptr_nonnull(buf);
  OK(cudaHostRegister(buf, 8192, cudaHostRegisterMapped));
  ck_assert_int_eq(cudaHostRegister(buf + 4096, 100, 0),
                   cudaErrorHostMemoryAlreadyRegistered);
  OK(cudaHostGetDevicePointer(&d, buf + 16, 0));
  ck_assert_ptr_eq(d, buf + 16); /* unified addressing */
  ck_assert_int_eq(cudaHostUnregister(buf + 16),
                   cudaErrorHostMemoryNotRegistered);
  OK(cudaHostUnregister(buf));
  ck_assert_int_eq(cudaHostGetDevicePointer(&d, buf, 0), cudaErrorInvalidValue);
  void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(gone, MAP_FAILED);
  ck_assert_int_eq(munmap(gone, 4096), 0);
  ck_assert_int_eq(cudaHostRegister(gone, 4096, 0), cudaErrorInvalidValue);
  cudaGetLastError();
  free(buf);
}
END_TEST

static void unmap_registered(void) {
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    die("mmap");
  S(cudaHostRegister(p, 4096, cudaHostRegisterDefault));
  munmap(p, 4096);
}

START_TEST(unmap_of_registered_memory) {
  ck_assert(rejected(unmap_registered, "unmap-registered-memory"));
}
END_TEST

void sim_rules_memops(TCase *tc) {
  tcase_add_test(tc, stream_wait_value_conditions);
  tcase_add_test(tc, stream_write_value_in_stream_order);
  tcase_add_test(tc, stream_memops_across_processes);
  tcase_add_test(tc, stream_memop_misaligned);
  tcase_add_test(tc, stream_memop_on_unmapped_host_memory);
  tcase_add_test(tc, stream_memop_refusals);
  tcase_add_test(tc, gpus_without_stream_memops);
  tcase_add_test(tc, stream_left_waiting_fails_at_exit);
  tcase_add_test(tc, host_register_as_cuda_does);
  tcase_add_test(tc, unmap_of_registered_memory);
}
