/* Stream memory operations, as the driver defines them (cuda.h,
 * CUDA_MEMOP): a write of a 32- or 64-bit word in stream order (after the
 * stream's earlier work, SPCSIM_SLOW_STREAMS's delay included), and a
 * wait that holds the stream's later work until a condition holds on a
 * word. The word may be device memory (own, imported by CUDA IPC, pool)
 * or host memory the GPUs reach (cudaHostAlloc, cudaHostRegister); it is
 * the same memory other processes map (the memfd of an allocation, a
 * shared host mapping), so a trainer and the daemon signal each other
 * through it. A wait polls the word (a host store wakes no one) and
 * sleeps on a futex between looks, which a stream write wakes.
 *
 * Checked when queued, as CUDA does: the address must be aligned to the
 * word's size and lie in memory the stream's GPU may dereference
 * (CUDA_ERROR_INVALID_VALUE otherwise, and a rule: memop-misaligned,
 * memop-address-unmapped, access-from-device). Checked again when it
 * runs: memory released since is a device fault (sim_poison).
 *
 * A wait whose word no one writes blocks its stream forever, as on a
 * GPU; cudaStreamDestroy does not wait for such a stream
 * (sim_stream_blocked), and every wait still blocked at exit is named in
 * the leak report, so a process that leaves a stream stuck fails its
 * test instead of dying quietly. */
#include "sim.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The driver's flags (cuda.h). */
#define WAIT_GEQ 0x0u         /* CU_STREAM_WAIT_VALUE_GEQ: cyclic >= */
#define WAIT_EQ 0x1u          /* CU_STREAM_WAIT_VALUE_EQ */
#define WAIT_AND 0x2u         /* CU_STREAM_WAIT_VALUE_AND: (*addr & v) != 0 */
#define WAIT_NOR 0x3u         /* CU_STREAM_WAIT_VALUE_NOR: ~(*addr | v) != 0 */
#define WAIT_FLUSH (1u << 30) /* CU_STREAM_WAIT_VALUE_FLUSH */
#define WRITE_NO_BARRIER 0x1u /* CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER */

/* A queued op: what was asked, and the GPU whose stream runs it. */
typedef struct {
  sim_memop op;
  int dev;
} memop_run;

/* Waits blocked now, each on its worker's stack, for the exit report. */
typedef struct blocked_wait {
  struct blocked_wait *next;
  const memop_run *r;
} blocked_wait;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static blocked_wait *blocked;

static const char *const wait_names[] = {"GEQ", "EQ", "AND", "NOR"};

static uint64_t load_word(const sim_memop *o) {
  if (o->size == 4)
    return __atomic_load_n((const uint32_t *)(uintptr_t)o->addr,
                           __ATOMIC_ACQUIRE);
  return __atomic_load_n((const uint64_t *)(uintptr_t)o->addr,
                         __ATOMIC_ACQUIRE);
}

/* Whether wait o's condition holds for the word's value v. */
static int holds(const sim_memop *o, uint64_t v) {
  uint64_t mask = o->size == 4 ? 0xffffffffu : ~(uint64_t)0;
  switch (o->flags & 0x3u) {
  case WAIT_GEQ: /* (int32_t)(*addr - value) >= 0, or int64_t */
    return o->size == 4 ? (int32_t)(uint32_t)(v - o->value) >= 0
                        : (int64_t)(v - o->value) >= 0;
  case WAIT_EQ:
    return v == o->value;
  case WAIT_AND:
    return (v & o->value) != 0;
  default:
    return (~(v | o->value) & mask) != 0;
  }
}

/* Whether o's word is still mapped when the op runs; when not, the GPU
 * would fault on it: the process is poisoned. */
static int still_mapped(const memop_run *r, const char *what) {
  sim_map m;
  if (sim_lookup((const void *)(uintptr_t)r->op.addr, (uint64_t)r->op.size, &m))
    return 1;
  sim_poison("stream memory %s on GPU %d: the word at %p was released "
             "while the op was queued",
             what, r->dev, (void *)(uintptr_t)r->op.addr);
  return 0;
}

static void run_write(void *a, int *status) {
  const memop_run *r = a;
  const sim_memop *o = &r->op;
  if (*status == SIM_EILLEGAL || !still_mapped(r, "write"))
    return;
  /* By default the write is fenced after the stream's earlier writes
   * (__threadfence_system's order); the worker ran those already. */
  if (!(o->flags & WRITE_NO_BARRIER))
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (o->size == 4)
    __atomic_store_n((uint32_t *)(uintptr_t)o->addr, (uint32_t)o->value,
                     __ATOMIC_RELEASE);
  else
    __atomic_store_n((uint64_t *)(uintptr_t)o->addr, o->value,
                     __ATOMIC_RELEASE);
  /* Waiters in any process sleep on the word's first 4 bytes. */
  syscall(SYS_futex, (uint32_t *)(uintptr_t)o->addr, FUTEX_WAKE, INT_MAX, NULL,
          NULL, 0);
}

static void blocked_link(blocked_wait *b) {
  pthread_mutex_lock(&mu);
  b->next = blocked;
  blocked = b;
  pthread_mutex_unlock(&mu);
}

static void blocked_unlink(blocked_wait *b) {
  pthread_mutex_lock(&mu);
  for (blocked_wait **p = &blocked; *p != NULL; p = &(*p)->next)
    if (*p == b) {
      *p = b->next;
      break;
    }
  pthread_mutex_unlock(&mu);
}

/* Holds the stream until the condition holds, the word is released (a
 * fault) or the process faulted elsewhere (its work is dropped). Sleeps
 * between looks grow from 20 us to 1 ms: a host store wakes no one. */
static void run_wait(void *a, int *status) {
  const memop_run *r = a;
  const sim_memop *o = &r->op;
  uint32_t *word = (uint32_t *)(uintptr_t)o->addr;
  if (*status == SIM_EILLEGAL || !still_mapped(r, "wait") ||
      holds(o, load_word(o)))
    return;
  blocked_wait b = {.r = r};
  blocked_link(&b);
  sim_stream_blocked(1);
  for (long ns = 20000;; ns = ns < 1000000 ? 2 * ns : 1000000) {
    uint32_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    if (holds(o, load_word(o)) || sim_sticky(SIM_OK) != SIM_OK)
      break;
    struct timespec ts = {0, ns};
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
    if (!still_mapped(r, "wait"))
      break;
  }
  sim_stream_blocked(0);
  blocked_unlink(&b);
}

/* SIM_OK when o is well formed for the driver (SIM_EINVAL, or
 * SIM_ENOTSUP for what the simulated GPU lacks). */
static int check_flags(const sim_memop *o) {
  if (o->size != 4 && o->size != 8)
    return SIM_EINVAL;
  if (o->kind == SIM_MEMOP_WRITE)
    return o->flags & ~WRITE_NO_BARRIER ? SIM_EINVAL : SIM_OK;
  if (o->flags & WAIT_FLUSH) /* CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES 0 */
    return SIM_ENOTSUP;
  return o->flags & ~0x3u ? SIM_EINVAL : SIM_OK;
}

/* SIM_OK when o may be queued on a stream of GPU dev; otherwise the
 * rule it breaks is reported and SIM_EINVAL returned (what CUDA says). */
static int check_address(const sim_memop *o, int dev, const char *call) {
  const void *p = (const void *)(uintptr_t)o->addr;
  sim_map m;
  if (o->addr % (uint64_t)o->size != 0) {
    sim_violation("memop-misaligned", call,
                  "a %d-bit stream memory operation at %p: the address "
                  "must be %d-byte aligned",
                  8 * o->size, p, o->size);
    return SIM_EINVAL;
  }
  if (!sim_lookup(p, (uint64_t)o->size, &m)) {
    sim_violation("memop-address-unmapped", call,
                  "%p is neither device memory nor host memory mapped for "
                  "the GPUs (cudaHostRegister, cudaHostAlloc): a stream "
                  "memory operation cannot reach it",
                  p);
    return SIM_EINVAL;
  }
  if (!sim_accessible(&m, dev)) {
    sim_check_access(p, (uint64_t)o->size, dev, call); /* names the rule */
    return SIM_EINVAL;
  }
  return SIM_OK;
}

int sim_memops(sim_stream *s, const sim_memop *ops, int n, const char *call) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  if (sim_cfg()->no_memops == SIM_MEMOPS_NONE)
    return SIM_ENOTSUP;
  s = sim_stream_resolve(s);
  if (s == NULL)
    return SIM_ENOMEM;
  int dev = sim_stream_dev(s);
  for (int i = 0; i < n; i++) {
    int rc = check_flags(&ops[i]);
    if (rc == SIM_OK)
      rc = check_address(&ops[i], dev, call);
    if (rc != SIM_OK)
      return rc;
  }
  for (int i = 0; i < n; i++) {
    memop_run *r = malloc(sizeof(*r));
    if (r == NULL)
      return SIM_ENOMEM; /* the ones before are queued: a batch that ran
                            out of memory is the simulator's failure */
    r->op = ops[i];
    r->dev = dev;
    int rc = sim_enqueue(
        s, ops[i].kind == SIM_MEMOP_WRITE ? run_write : run_wait, r, 1);
    if (rc != SIM_OK) {
      free(r);
      return rc;
    }
  }
  return SIM_OK;
}

void sim_memop_leaks(void) {
  pthread_mutex_lock(&mu);
  for (blocked_wait *b = blocked; b != NULL; b = b->next) {
    const sim_memop *o = &b->r->op;
    sim_map m;
    int mapped =
        sim_lookup((const void *)(uintptr_t)o->addr, (uint64_t)o->size, &m);
    sim_leak_note("a stream of GPU %d still waits for the %d-bit word at %p "
                  "(%s 0x%llx, it holds 0x%llx%s): nothing wrote it, the "
                  "stream is stuck",
                  b->r->dev, 8 * o->size, (void *)(uintptr_t)o->addr,
                  wait_names[o->flags & 0x3u], (unsigned long long)o->value,
                  mapped ? (unsigned long long)load_word(o) : 0ull,
                  mapped ? "" : ", released");
  }
  pthread_mutex_unlock(&mu);
}
