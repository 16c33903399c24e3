/* spcsim core: configuration from the environment, the rule report, the
 * per-thread current device and last error, the sticky error of a device
 * fault, device memory accounting (shared between processes through
 * SPCSIM_STATE), peer access, and the leak report at exit. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static sim_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static __thread int cur_dev;
static __thread int last_err;
static __thread int violations; /* rules this thread broke */
static int poisoned_pid; /* the process whose context a fault ended */
static uint64_t local_used[SIM_MAX_DEV];
/* SPCSIM_STATE: a file of SIM_MAX_DEV u64 (the bytes in use per GPU),
 * then one u64: injected faults marked "once" that have happened. */
static uint64_t *shared_used;
static uint64_t local_once;
static uint32_t peers[SIM_MAX_DEV]; /* bit t of peers[f]: f reaches t */
static pthread_mutex_t core_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t env_u64(const char *name, uint64_t def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0')
    return def;
  char *end;
  uint64_t x = strtoull(v, &end, 0);
  if (*end == 'G' || *end == 'g')
    x <<= 30;
  else if (*end == 'M' || *end == 'm')
    x <<= 20;
  return x;
}

/* SPCSIM_SLOW_STREAMS=PROG:US: every stream op of program PROG starts
 * US microseconds late, so a consumer in another process that does not
 * wait for PROG's streams reads too early nearly every time. Read as each
 * stream is made, so that one forked process of a program may set it for
 * its own streams alone. */
uint64_t sim_slow_streams(void) {
  const char *f = getenv("SPCSIM_SLOW_STREAMS");
  const char *colon = f ? strrchr(f, ':') : NULL;
  if (colon == NULL ||
      strncmp(f, program_invocation_short_name, (size_t)(colon - f)) != 0 ||
      program_invocation_short_name[colon - f] != '\0')
    return 0;
  return strtoull(colon + 1, NULL, 10);
}

/* SPCSIM_NO_STREAM_MEM_OPS=1: GPUs without stream memory operations
 * (cuStreamWriteValue32 and the rest); =v1: without their deprecated v1
 * API only (sim.h, SIM_MEMOPS_*). */
static int no_memops(void) {
  const char *v = getenv("SPCSIM_NO_STREAM_MEM_OPS");
  if (v == NULL || *v == '\0' || strcmp(v, "0") == 0)
    return SIM_MEMOPS_ALL;
  if (strcmp(v, "1") == 0)
    return SIM_MEMOPS_NONE;
  if (strcmp(v, "v1") == 0)
    return SIM_MEMOPS_NO_V1;
  fprintf(stderr, "spcsim: SPCSIM_NO_STREAM_MEM_OPS=%s: want 1 or v1\n", v);
  abort();
}

/* SPCSIM_NO_PEER=a-b,c-d: the pairs of GPUs without peer access, as on
 * a machine whose GPUs sit under different root complexes. */
static void no_peer(void) {
  const char *v = getenv("SPCSIM_NO_PEER");
  while (v != NULL && *v != '\0') {
    char *end;
    unsigned long a = strtoul(v, &end, 10);
    unsigned long b = *end == '-' ? strtoul(end + 1, &end, 10) : SIM_MAX_DEV;
    if (a >= SIM_MAX_DEV || b >= SIM_MAX_DEV || (*end != ',' && *end)) {
      fprintf(stderr, "spcsim: SPCSIM_NO_PEER=%s: want pairs a-b of GPU "
              "numbers below %d, comma separated\n", getenv("SPCSIM_NO_PEER"),
              SIM_MAX_DEV);
      abort();
    }
    cfg.nopeer[a] |= 1u << b;
    cfg.nopeer[b] |= 1u << a;
    v = *end == ',' ? end + 1 : end;
  }
}

static void cfg_init(void) {
  cfg.ndev = (int)env_u64("SPCSIM_GPUS", 1);
  if (cfg.ndev > SIM_MAX_DEV)
    cfg.ndev = SIM_MAX_DEV;
  cfg.mem_limit = env_u64("SPCSIM_GPU_MEM", (uint64_t)1 << 30);
  cfg.sms = (int)env_u64("SPCSIM_SMS", 4);
  no_peer();
  cfg.no_memops = no_memops();
  const char *st = getenv("SPCSIM_STATE");
  if (st != NULL && *st != '\0') {
    int fd = open(st, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    size_t len = (SIM_MAX_DEV + 1) * sizeof(uint64_t);
    if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
      fprintf(stderr,
              "spcsim: SPCSIM_STATE %s: open/ftruncate: %s; "
              "memory is counted per process\n",
              st, strerror(errno));
    } else {
      void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED)
        fprintf(stderr, "spcsim: mmap of SPCSIM_STATE %s: %s\n", st,
                strerror(errno));
      else
        shared_used = p;
    }
    if (fd >= 0)
      close(fd);
  }
}

const sim_config *sim_cfg(void) {
  pthread_once(&cfg_once, cfg_init);
  return &cfg;
}

void sim_violation(const char *rule, const char *call, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* One write, so lines of concurrent processes do not interleave. */
  char line[1024];
  int n = snprintf(line, sizeof(line), "spcsim: RULE %s: %s: %s (pid %d)\n",
                   rule, call, msg, (int)getpid());
  if (write(2, line,
            n > 0 && (size_t)n < sizeof(line) ? (size_t)n : strlen(line)) < 0)
    (void)0; /* stderr gone: the abort below still says it */
  violations++;
  const char *on = getenv("SPCSIM_ON_VIOLATION");
  if (on != NULL && strcmp(on, "continue") == 0)
    return;
  abort();
}

int sim_violations_here(void) { return violations; }

void sim_poison(const char *fmt, ...) {
  int me = (int)getpid();
  int old = __atomic_load_n(&poisoned_pid, __ATOMIC_ACQUIRE);
  /* The first fault is the one said; a pid left by the parent of a fork
   * is another process's fault and is replaced. */
  if (old == me || !__atomic_compare_exchange_n(&poisoned_pid, &old, me, 0,
                                                __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE))
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr,
          "spcsim: GPU fault: %s: an illegal memory access; this process's "
          "CUDA context is lost, every later call fails with it (pid %d)\n",
          msg, me);
}

int sim_sticky(int e) {
  int p = __atomic_load_n(&poisoned_pid, __ATOMIC_ACQUIRE);
  return p != 0 && p == (int)getpid() ? SIM_EILLEGAL : e;
}

int sim_cur_dev(void) { return cur_dev; }
void sim_set_cur_dev(int dev) { cur_dev = dev; }

void sim_uuid(int dev, uint8_t out[16]) {
  /* Stable across processes: the same simulated GPU has one UUID. */
  static const uint8_t base[16] = {0x5c, 0x51, 0x3d, 0x00, 0xa1, 0x1c,
                                   0x4e, 0x57, 0x8e, 0x10, 0x00, 0x00,
                                   0x00, 0x00, 0x00, 0x00};
  memcpy(out, base, 16);
  out[15] = (uint8_t)dev;
}

int sim_dev_reserve(int dev, uint64_t bytes) {
  const sim_config *c = sim_cfg();
  uint64_t *u = shared_used ? &shared_used[dev] : &local_used[dev];
  uint64_t old = __atomic_load_n(u, __ATOMIC_RELAXED);
  do {
    if (old + bytes > c->mem_limit || old + bytes < old) {
      fprintf(stderr,
              "spcsim: simulated GPU %d out of memory: %llu bytes "
              "asked, %llu of %llu in use\n",
              dev, (unsigned long long)bytes, (unsigned long long)old,
              (unsigned long long)c->mem_limit);
      return SIM_ENOMEM;
    }
  } while (!__atomic_compare_exchange_n(u, &old, old + bytes, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  return SIM_OK;
}

void sim_attr_unmodelled(const char *call, int attr) {
  static uint8_t said[512]; /* both enums stay below 512 */
  pthread_mutex_lock(&core_mu);
  int first = attr < 0 || attr >= 512 || !said[attr];
  if (attr >= 0 && attr < 512)
    said[attr] = 1;
  pthread_mutex_unlock(&core_mu);
  if (first)
    fprintf(stderr, "spcsim: %s: attribute %d not simulated: 0\n", call, attr);
}

uint64_t sim_dev_used(int dev) {
  uint64_t *u = shared_used ? &shared_used[dev] : &local_used[dev];
  return __atomic_load_n(u, __ATOMIC_ACQUIRE);
}

void sim_dev_unreserve(int dev, uint64_t bytes) {
  uint64_t *u = shared_used ? &shared_used[dev] : &local_used[dev];
  __atomic_sub_fetch(u, bytes, __ATOMIC_ACQ_REL);
}

void sim_ctx_touch(int dev) {
  static uint32_t made; /* bit d: this process has a context on GPU d */
  pthread_mutex_lock(&core_mu);
  int first = dev >= 0 && dev < SIM_MAX_DEV && !((made >> dev) & 1u);
  if (first)
    made |= 1u << dev;
  pthread_mutex_unlock(&core_mu);
  const char *path = getenv("SPCSIM_CONTEXT_LOG");
  if (!first || path == NULL || *path == '\0')
    return;
  char line[48];
  int n = snprintf(line, sizeof(line), "%d %d\n", (int)getpid(), dev);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  /* One short O_APPEND write: lines of concurrent processes stay whole. */
  if (fd < 0 || write(fd, line, (size_t)n) != n)
    fprintf(stderr, "spcsim: SPCSIM_CONTEXT_LOG %s: %s\n", path,
            strerror(errno));
  if (fd >= 0)
    close(fd);
}

int sim_applies_here(const char *var) {
  const char *f = getenv(var);
  return f != NULL &&
         (strcmp(f, "1") == 0 || strcmp(f, program_invocation_short_name) == 0);
}

/* The main thread is the one whose thread id is the process id (also in
 * a forked child: the thread that forked is its main thread). A process
 * whose context is lost (sim_poison) waits for nothing: every call
 * returns its sticky error at once, as on a GPU. */
void sim_no_block(const char *call, const char *how) {
  if (sim_sticky(0) == 0 && sim_applies_here("SPCSIM_FORBID_SYNC") &&
      (pid_t)syscall(SYS_gettid) == getpid())
    sim_violation("host-sync", call, "%s %s on its main thread, which "
                  "runs its event loop and must never block (make the call "
                  "on a worker thread, uv_queue_work; wait with a stream "
                  "callback or an event query)",
                  program_invocation_short_name, how);
}

/* Whether an injection marked ":once" may happen here: the first to
 * claim it, across the processes sharing SPCSIM_STATE (without it, per
 * process). */
static int claim_once(void) {
  uint64_t *w = shared_used ? &shared_used[SIM_MAX_DEV] : &local_once;
  uint64_t none = 0;
  return __atomic_compare_exchange_n(w, &none, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

/* Whether this is the Nth call counted by *count, for var=PROGRAM:N
 * naming this program (counted only then). PROGRAM:N:once: only in the
 * first process of PROGRAM to reach its Nth call (a transient fault: the
 * process started after it does not meet it again). */
static int nth_call(const char *var, int *count) {
  const char *f = getenv(var);
  const char *colon = f ? strchr(f, ':') : NULL;
  if (colon == NULL ||
      strncmp(f, program_invocation_short_name, (size_t)(colon - f)) != 0 ||
      program_invocation_short_name[colon - f] != '\0')
    return 0;
  sim_cfg(); /* SPCSIM_STATE mapped */
  pthread_mutex_lock(&core_mu);
  int n = ++*count;
  pthread_mutex_unlock(&core_mu);
  if (n != atoi(colon + 1))
    return 0;
  return strstr(colon + 1, ":once") == NULL || claim_once();
}

int sim_launch_should_fail(void) {
  static int launches;
  return nth_call("SPCSIM_FAIL_LAUNCH", &launches);
}

int sim_launch_should_fault(void) {
  static int launches;
  return nth_call("SPCSIM_FAULT_LAUNCH", &launches);
}

int sim_peer_possible(int from, int to) {
  return from == to || !((sim_cfg()->nopeer[from] >> to) & 1u);
}

int sim_peer_enabled(int from, int to) {
  pthread_mutex_lock(&core_mu);
  int on = from == to || (peers[from] >> to) & 1u;
  pthread_mutex_unlock(&core_mu);
  return on;
}

int sim_peer_enable(int from, int to) {
  if (!sim_peer_possible(from, to))
    return SIM_ENOPEER;
  pthread_mutex_lock(&core_mu);
  int was = (peers[from] >> to) & 1u;
  peers[from] |= 1u << to;
  pthread_mutex_unlock(&core_mu);
  return was ? SIM_EPEERON : SIM_OK;
}

int sim_set_last(int e) {
  if (e != SIM_OK)
    last_err = e;
  return e;
}

int sim_get_last(int clear) {
  int e = last_err;
  if (clear)
    last_err = SIM_OK;
  return sim_sticky(e);
}

/* ---- leak report ----------------------------------------------------------
 */

static int leaks;

void sim_leak_note(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "spcsim: leak: %s (pid %d)\n", msg, (int)getpid());
  leaks++;
}

void sim_mem_leaks(void);
void sim_stream_leaks(void);
void sim_memop_leaks(void);
void sim_vmm_leaks(void);

/* At exit: what the process still holds of the simulated GPUs, and the
 * stream memory waits still unsatisfied (a stream left stuck). With
 * SPCSIM_LEAKS_FATAL=1 (or =the program's name: only that program) a
 * non-empty report turns the exit status into 98, so a test that ends
 * leaking fails. Not in a process whose context a fault ended: it can
 * release nothing (every call fails), and CUDA takes it all back when the
 * process exits. */
static void leak_report(void) {
  sim_mem_leaks();
  sim_stream_leaks();
  sim_memop_leaks();
  sim_vmm_leaks();
  if (leaks > 0 && sim_sticky(SIM_OK) != SIM_OK) {
    fprintf(stderr, "spcsim: %d leak(s) at exit not counted: this "
            "process's context was lost, so it could release nothing "
            "(pid %d)\n", leaks, (int)getpid());
    return;
  }
  if (leaks > 0 && sim_applies_here("SPCSIM_LEAKS_FATAL")) {
    fprintf(stderr, "spcsim: %d leak(s) at exit (pid %d)\n", leaks,
            (int)getpid());
    _exit(98);
  }
}

__attribute__((constructor)) static void sim_init(void) {
  sim_cfg();
  atexit(leak_report);
}
