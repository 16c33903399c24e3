/* spcoll-gpu-handover: what it costs to hand a GPU stream's order from one
 * process to another on the same GPU, the step every device op of spcolld
 * takes twice (trainer -> daemon before, daemon -> trainer after), and
 * whether the memory-sharing calls a daemon in another container needs work
 * on this machine. It prints numbers and verdicts; it asserts nothing.
 *
 * Two processes share GPU 0: P (the trainer) and D (the daemon). Per
 * iteration P's stream optionally runs a busy kernel (the trainer's own
 * work), then hands over; D's stream copies 64 KiB and hands back; P's
 * stream goes on only after that. Ways of handing over:
 *   alone     no second process: P copies itself (the floor)
 *   events    interprocess events, a host round trip per iteration (the
 *             way spcolld works today: the daemon queues its wait only
 *             after the client recorded, and the client its wait only
 *             after the daemon's answer)
 *   flag-host stream memory operations (cuStreamWriteValue32 /
 *             cuStreamWaitValue32) on a word of host memory both map;
 *             both sides queue every iteration up front: no host waits
 *   flag-dev  the same on a word of P's device memory D opened by IPC
 * Reported: us per iteration (wall time / iterations) and P's host time
 * to queue one iteration.
 *
 * Then: the device attributes that decide the path; a cuMem allocation
 * exported as a POSIX file descriptor, passed with SCM_RIGHTS and mapped
 * by D; and both kinds of handle tried from a process in a new PID
 * namespace (legacy IPC handles are said not to cross one). Exit 77
 * without a GPU. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define COPY_BYTES (64 << 10)
#define NSLOTS 16

/* Shared between P and D (an anonymous shared mapping made before fork). */
struct shared {
  volatile int go[NSLOTS];      /* host barrier per phase */
  volatile int ack[NSLOTS];
  volatile uint32_t ev_ready;   /* events variant: host counters */
  volatile uint32_t ev_done;
  cudaIpcMemHandle_t flag_mem;  /* flag-dev: P's device words */
  cudaIpcEventHandle_t ready_h, done_h;
  int iters, busy_ns;
  char pad[4096];
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int ck_rt(cudaError_t e, const char *what, int line) {
  if (e != cudaSuccess) {
    fprintf(stderr, "line %d: %s: %s\n", line, what, cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
static int ck_drv(CUresult r, const char *what, int line) {
  if (r != CUDA_SUCCESS) {
    const char *s = "?";
    cuGetErrorName(r, &s);
    fprintf(stderr, "line %d: %s: %s\n", line, what, s);
    return 1;
  }
  return 0;
}
#define RT(x) do { if (ck_rt((x), #x, __LINE__)) exit(1); } while (0)
#define DRV(x) do { if (ck_drv((x), #x, __LINE__)) exit(1); } while (0)

__global__ void spin(long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while ((long long)(t - t0) < ns);
}

static void barrier(struct shared *s, int me, int phase) {
  if (me == 0) {
    s->go[phase] = 1;
    while (!s->ack[phase]) {
    }
  } else {
    while (!s->go[phase]) {
    }
    s->ack[phase] = 1;
  }
  __sync_synchronize();
}

/* ---- P, the trainer -------------------------------------------------- */

struct pstate {
  cudaStream_t st;
  void *src, *dst;
  volatile uint32_t *hflags; /* [0] ready, [1] done, in the shared page */
  CUdeviceptr hdev;          /* hflags as the device sees them */
  CUdeviceptr dflags;        /* device words [0] ready, [1] done */
  cudaEvent_t ready, done;
};

static void p_busy(struct pstate *p, int busy_ns) {
  if (busy_ns > 0)
    spin<<<1, 1, 0, p->st>>>(busy_ns);
}

static double p_alone(struct pstate *p, int iters, int busy_ns) {
  RT(cudaStreamSynchronize(p->st));
  double t0 = now_us();
  for (int i = 0; i < iters; i++) {
    p_busy(p, busy_ns);
    RT(cudaMemcpyAsync(p->dst, p->src, COPY_BYTES, cudaMemcpyDeviceToDevice,
                       p->st));
  }
  RT(cudaStreamSynchronize(p->st));
  return (now_us() - t0) / iters;
}

/* Flags: P writes ready = i and waits for done >= i, D the mirror image;
 * values grow, so a word never needs resetting between iterations. */
static double p_flags(struct pstate *p, CUdeviceptr ready, CUdeviceptr done,
                      uint32_t base, int iters, int busy_ns, double *queue_us) {
  RT(cudaStreamSynchronize(p->st));
  double t0 = now_us(), q = 0;
  for (int i = 1; i <= iters; i++) {
    p_busy(p, busy_ns);
    double a = now_us();
    DRV(cuStreamWriteValue32((CUstream)p->st, ready, base + i, 0));
    DRV(cuStreamWaitValue32((CUstream)p->st, done, base + i,
                            CU_STREAM_WAIT_VALUE_GEQ));
    q += now_us() - a;
  }
  RT(cudaStreamSynchronize(p->st));
  *queue_us = q / iters;
  return (now_us() - t0) / iters;
}

static double p_events(struct pstate *p, struct shared *s, uint32_t base,
                       int iters, int busy_ns, double *queue_us) {
  RT(cudaStreamSynchronize(p->st));
  double t0 = now_us(), q = 0;
  for (int i = 1; i <= iters; i++) {
    p_busy(p, busy_ns);
    double a = now_us();
    RT(cudaEventRecord(p->ready, p->st));
    __sync_synchronize();
    s->ev_ready = base + i;
    while (s->ev_done != base + i) {
    }
    __sync_synchronize();
    RT(cudaStreamWaitEvent(p->st, p->done, 0));
    q += now_us() - a;
  }
  RT(cudaStreamSynchronize(p->st));
  *queue_us = q / iters;
  return (now_us() - t0) / iters;
}

/* ---- D, the daemon --------------------------------------------------- */

static void d_flags(cudaStream_t st, void *src, void *dst, CUdeviceptr ready,
                    CUdeviceptr done, uint32_t base, int iters) {
  for (int i = 1; i <= iters; i++) {
    DRV(cuStreamWaitValue32((CUstream)st, ready, base + i,
                            CU_STREAM_WAIT_VALUE_GEQ));
    RT(cudaMemcpyAsync(dst, src, COPY_BYTES, cudaMemcpyDeviceToDevice, st));
    DRV(cuStreamWriteValue32((CUstream)st, done, base + i, 0));
  }
  RT(cudaStreamSynchronize(st));
}

static void d_events(struct shared *s, cudaStream_t st, void *src, void *dst,
                     cudaEvent_t ready, cudaEvent_t done, uint32_t base,
                     int iters) {
  for (int i = 1; i <= iters; i++) {
    while (s->ev_ready != base + i) {
    }
    __sync_synchronize();
    RT(cudaStreamWaitEvent(st, ready, 0));
    RT(cudaMemcpyAsync(dst, src, COPY_BYTES, cudaMemcpyDeviceToDevice, st));
    RT(cudaEventRecord(done, st));
    __sync_synchronize();
    s->ev_done = base + i;
  }
  RT(cudaStreamSynchronize(st));
}

static const int busy_list[] = {0, 20000, 200000};
#define NBUSY 3

static void run_d(struct shared *s, void *page) {
  RT(cudaSetDevice(0));
  RT(cudaFree(0));
  cudaStream_t st;
  RT(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  void *src, *dst;
  RT(cudaMalloc(&src, COPY_BYTES));
  RT(cudaMalloc(&dst, COPY_BYTES));
  DRV(cuMemHostRegister(page, 4096, CU_MEMHOSTREGISTER_DEVICEMAP |
                                        CU_MEMHOSTREGISTER_PORTABLE));
  CUdeviceptr hdev;
  DRV(cuMemHostGetDevicePointer(&hdev, page, 0));
  barrier(s, 1, 0); /* P's handles are in s */
  void *dflags;
  RT(cudaIpcOpenMemHandle(&dflags, s->flag_mem,
                          cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t ready, done;
  RT(cudaIpcOpenEventHandle(&ready, s->ready_h));
  RT(cudaIpcOpenEventHandle(&done, s->done_h));
  uint32_t base = 0;
  int phase = 1;
  for (int b = 0; b < NBUSY; b++) {
    barrier(s, 1, phase++);
    d_events(s, st, src, dst, ready, done, base, s->iters);
    barrier(s, 1, phase++);
    d_flags(st, src, dst, hdev, hdev + 4, base, s->iters);
    barrier(s, 1, phase++);
    d_flags(st, src, dst, (CUdeviceptr)dflags, (CUdeviceptr)dflags + 4, base,
            s->iters);
    base += s->iters;
  }
  RT(cudaIpcCloseMemHandle(dflags));
}

static void run_p(struct shared *s, void *page, pid_t d) {
  struct pstate p;
  RT(cudaSetDevice(0));
  RT(cudaStreamCreateWithFlags(&p.st, cudaStreamNonBlocking));
  RT(cudaMalloc(&p.src, COPY_BYTES));
  RT(cudaMalloc(&p.dst, COPY_BYTES));
  DRV(cuMemHostRegister(page, 4096, CU_MEMHOSTREGISTER_DEVICEMAP |
                                        CU_MEMHOSTREGISTER_PORTABLE));
  DRV(cuMemHostGetDevicePointer(&p.hdev, page, 0));
  void *df;
  RT(cudaMalloc(&df, 4096));
  RT(cudaMemset(df, 0, 4096));
  p.dflags = (CUdeviceptr)df;
  RT(cudaIpcGetMemHandle(&s->flag_mem, df));
  RT(cudaEventCreateWithFlags(&p.ready, cudaEventInterprocess |
                                            cudaEventDisableTiming));
  RT(cudaEventCreateWithFlags(&p.done, cudaEventInterprocess |
                                           cudaEventDisableTiming));
  RT(cudaIpcGetEventHandle(&s->ready_h, p.ready));
  RT(cudaIpcGetEventHandle(&s->done_h, p.done));
  s->iters = 400;
  __sync_synchronize();
  barrier(s, 0, 0);
  printf("hand-over, 64 KiB copy per iteration, %d iterations, us per "
         "iteration (queue: P's host time to queue its part)\n", s->iters);
  printf("%-10s %8s %8s %8s %8s\n", "way", "busy_us", "iter_us", "over_us",
         "queue_us");
  uint32_t base = 0;
  int phase = 1;
  for (int b = 0; b < NBUSY; b++) {
    int busy = busy_list[b];
    double alone = p_alone(&p, s->iters, busy), q = 0;
    printf("%-10s %8d %8.1f %8s %8s\n", "alone", busy / 1000, alone, "-", "-");
    barrier(s, 0, phase++);
    double t = p_events(&p, s, base, s->iters, busy, &q);
    printf("%-10s %8d %8.1f %8.1f %8.1f\n", "events", busy / 1000, t,
           t - alone, q);
    barrier(s, 0, phase++);
    t = p_flags(&p, p.hdev, p.hdev + 4, base, s->iters, busy, &q);
    printf("%-10s %8d %8.1f %8.1f %8.1f\n", "flag-host", busy / 1000, t,
           t - alone, q);
    barrier(s, 0, phase++);
    t = p_flags(&p, p.dflags, p.dflags + 4, base, s->iters, busy, &q);
    printf("%-10s %8d %8.1f %8.1f %8.1f\n", "flag-dev", busy / 1000, t,
           t - alone, q);
    base += s->iters;
    fflush(stdout);
  }
  int st = 0;
  waitpid(d, &st, 0);
  printf("daemon side exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* ---- attributes ------------------------------------------------------ */

static void attributes(void) {
  static const struct { CUdevice_attribute a; const char *n; } at[] = {
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, "stream_mem_ops_v1(92)"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
       "64_bit_stream_mem_ops(122)"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR,
       "stream_wait_value_nor(123)"},
      {CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, "flush_remote_writes"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
       "host_pointer_for_registered_mem"},
      {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "vmm"},
      {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
       "posix_fd_handles"},
      {CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
       "mempool_handle_types"},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "sm_count"},
  };
  CUdevice dev;
  DRV(cuDeviceGet(&dev, 0));
  char name[128];
  DRV(cuDeviceGetName(name, sizeof(name), dev));
  int drv = 0;
  DRV(cuDriverGetVersion(&drv));
  printf("device 0: %s, driver API %d\n", name, drv);
  for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
    int v = -1;
    CUresult r = cuDeviceGetAttribute(&v, at[i].a, dev);
    printf("  %-34s %d%s\n", at[i].n, v, r == CUDA_SUCCESS ? "" : " (error)");
  }
}

/* ---- cuMem allocations across processes and PID namespaces ------------- */

/* A message of one buffer with room for one descriptor. */
static void msg_init(struct msghdr *m, struct iovec *iov, char *cbuf,
                     size_t clen) {
  memset(cbuf, 0, clen);
  memset(m, 0, sizeof(*m));
  m->msg_iov = iov;
  m->msg_iovlen = 1;
  m->msg_control = cbuf;
  m->msg_controllen = clen;
}

static int send_fd(int sock, int fd, const void *bytes, size_t n) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {(void *)bytes, n};
  struct msghdr m;
  msg_init(&m, &iov, cbuf, sizeof(cbuf));
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &m, 0) == (ssize_t)n ? 0 : -1;
}

static int recv_fd(int sock, void *bytes, size_t n) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {bytes, n};
  struct msghdr m;
  msg_init(&m, &iov, cbuf, sizeof(cbuf));
  if (recvmsg(sock, &m, MSG_WAITALL) != (ssize_t)n)
    return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (c == NULL || c->cmsg_type != SCM_RIGHTS)
    return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

struct offer {
  cudaIpcMemHandle_t legacy;
  size_t size;
  uint32_t pattern;
};

/* Allocation h mapped at a new address, readable and writable by GPU 0. */
static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size) {
  CUdeviceptr va;
  DRV(cuMemAddressReserve(&va, size, 0, 0, 0));
  DRV(cuMemMap(va, size, 0, h, 0));
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof(acc));
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DRV(cuMemSetAccess(va, size, &acc, 1));
  return va;
}

/* The importer: maps both handles it is sent and reads them back. */
static void importer(int sock, const char *who) {
  struct offer o;
  int fd = recv_fd(sock, &o, sizeof(o));
  if (fd < 0) {
    printf("%s: no descriptor received: %s\n", who, strerror(errno));
    return;
  }
  RT(cudaSetDevice(0));
  RT(cudaFree(0));
  uint32_t got = 0;
  void *lp = NULL;
  cudaError_t e = cudaIpcOpenMemHandle(&lp, o.legacy,
                                       cudaIpcMemLazyEnablePeerAccess);
  if (e == cudaSuccess) {
    RT(cudaMemcpy(&got, lp, 4, cudaMemcpyDeviceToHost));
    printf("%s: legacy IPC handle opened, read %s\n", who,
           got == o.pattern ? "the pattern" : "WRONG data");
    RT(cudaIpcCloseMemHandle(lp));
  } else {
    printf("%s: legacy IPC handle refused: %s\n", who, cudaGetErrorString(e));
    cudaGetLastError();
  }
  CUmemGenericAllocationHandle h;
  CUresult r = cuMemImportFromShareableHandle(
      &h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) {
    const char *s = "?";
    cuGetErrorName(r, &s);
    printf("%s: cuMem POSIX fd import refused: %s\n", who, s);
    return;
  }
  CUdeviceptr va = map_rw(h, o.size);
  DRV(cuMemcpyDtoH(&got, va + 4, 4));
  printf("%s: cuMem POSIX fd imported and mapped, read %s\n", who,
         got == o.pattern ? "the pattern" : "WRONG data");
  DRV(cuMemUnmap(va, o.size));
  DRV(cuMemAddressFree(va, o.size));
  DRV(cuMemRelease(h));
  close(fd);
}

/* The exporter: one legacy allocation and one cuMem allocation (POSIX fd
 * handle type), both filled with the pattern, offered on each socket. */
static void exporter(const int *socks, int nsocks) {
  RT(cudaSetDevice(0));
  RT(cudaFree(0));
  struct offer o;
  o.pattern = 0x5a17c0deu;
  void *lp;
  RT(cudaMalloc(&lp, 1 << 20));
  RT(cudaMemset(lp, 0, 1 << 20));
  RT(cudaMemcpy(lp, &o.pattern, 4, cudaMemcpyHostToDevice));
  RT(cudaIpcGetMemHandle(&o.legacy, lp));
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  DRV(cuMemGetAllocationGranularity(&gran, &prop,
                                    CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  o.size = gran;
  CUmemGenericAllocationHandle h;
  DRV(cuMemCreate(&h, o.size, &prop, 0));
  CUdeviceptr va = map_rw(h, o.size);
  DRV(cuMemsetD32(va, 0, o.size / 4));
  DRV(cuMemcpyHtoD(va + 4, &o.pattern, 4));
  int fd = -1;
  DRV(cuMemExportToShareableHandle(&fd, h,
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  printf("exporter: cuMem allocation of %zu bytes exported as fd %d\n", o.size,
         fd);
  fflush(stdout);
  for (int i = 0; i < nsocks; i++)
    if (send_fd(socks[i], fd, &o, sizeof(o)) != 0)
      printf("exporter: sendmsg: %s\n", strerror(errno));
  char c;
  for (int i = 0; i < nsocks; i++)
    if (read(socks[i], &c, 1) < 0) /* the importers are done */
      printf("exporter: read: %s\n", strerror(errno));
}

static void sharing(void) {
  int a[2], b[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) || socketpair(AF_UNIX, SOCK_STREAM, 0, b)) {
    perror("socketpair");
    return;
  }
  fflush(stdout);
  pid_t same = fork();
  if (same == 0) {
    importer(a[1], "same namespace");
    fflush(stdout);
    if (write(a[1], "x", 1) < 0) {
    }
    _exit(0);
  }
  pid_t ns = fork();
  if (ns == 0) {
    if (unshare(CLONE_NEWPID) != 0) {
      printf("new PID namespace: unshare: %s (not tried)\n", strerror(errno));
      fflush(stdout);
      struct offer o;
      int fd = recv_fd(b[1], &o, sizeof(o));
      if (fd >= 0)
        close(fd);
      if (write(b[1], "x", 1) < 0) {
      }
      _exit(0);
    }
    pid_t g = fork();
    if (g == 0) {
      /* A /proc of the new namespace, as a container has (CUDA reads
       * /proc/self; the parent's /proc shows other PIDs). */
      if (unshare(CLONE_NEWNS) != 0 ||
          mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
          mount("proc", "/proc", "proc", 0, NULL) != 0)
        printf("new PID namespace: no /proc of its own: %s\n",
               strerror(errno));
      importer(b[1], "new PID namespace");
      fflush(stdout);
      if (write(b[1], "x", 1) < 0) {
      }
      _exit(0);
    }
    int st;
    waitpid(g, &st, 0);
    _exit(0);
  }
  close(a[1]); /* an importer that dies then ends the exporter's read */
  close(b[1]);
  int socks[2] = {a[0], b[0]};
  exporter(socks, 2);
  int st;
  waitpid(same, &st, 0);
  waitpid(ns, &st, 0);
}

static int handover(void) {
  struct shared *s = (struct shared *)mmap(NULL, sizeof(struct shared),
                                           PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED || page == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(page, 0, 4096);
  pid_t d = fork();
  if (d < 0) {
    perror("fork");
    return 1;
  }
  if (d == 0) {
    run_d(s, page);
    _exit(0);
  }
  run_p(s, page, d);
  return 0;
}

/* Each part in a fresh process: CUDA must not be used by a child forked
 * after its parent initialised it, and the parts fork their own. */
int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "all";
  if (strcmp(what, "attrs") == 0) {
    DRV(cuInit(0));
    attributes();
    return 0;
  }
  if (strcmp(what, "sharing") == 0) {
    sharing();
    return 0;
  }
  if (strcmp(what, "handover") == 0)
    return handover();
  if (cuInit(0) != CUDA_SUCCESS) {
    printf("skipped: no CUDA driver or device\n");
    return 77;
  }
  int n = 0;
  if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
    printf("skipped: no CUDA device\n");
    return 77;
  }
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (k < 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self[k] = '\0';
  const char *parts[] = {"attrs", "handover", "sharing"};
  int rc = 0;
  for (int i = 0; i < 3; i++) {
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
      execl(self, self, parts[i], (char *)NULL);
      _exit(127);
    }
    int st = 0;
    waitpid(c, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("part %s: exit %d\n", parts[i],
             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      rc = 1;
    }
  }
  return rc;
}
