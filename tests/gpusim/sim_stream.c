/* Streams and events. Each stream has its own worker thread that runs
 * its operations in order, asynchronously to the host, so a missing
 * dependency shows as a wrong result or a violation rather than being
 * hidden by a synchronous simulation. Events live in a shared page (a
 * memfd for interprocess ones): record bumps a target, its stream marks
 * it complete, waiters (other streams, other processes) wait on a futex
 * for the target they saw.
 *
 * Default streams as CUDA defines them: the legacy default stream (NULL,
 * cudaStreamLegacy) of a device waits for the work already queued on
 * every blocking stream of that device (all but cudaStreamNonBlocking
 * ones), and work queued on a blocking stream waits for the work already
 * queued on the legacy stream. cudaStreamPerThread is a blocking stream
 * of its own per thread and device. Each stream counts the ops it queued
 * and finished (its progress); an implicit wait is an op that waits for
 * another stream's count.
 *
 * A stream blocked on something that may never come (a stream memory
 * wait on a word no one writes) is not waited for by cudaStreamDestroy,
 * which returns at once as CUDA's does: the stream stays listed
 * (destroyed, so neither destroyed again nor reported as a leak) for
 * device syncs and the legacy stream, its worker ends when it drains, and
 * a wait still unsatisfied at exit is in the leak report (sim_memop.c).
 *
 * After a device fault (sim_poison) the device runs nothing more: every op
 * still queued sees the sticky status and moves no data, records complete
 * no event, host syncs return the error at once. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct sim_op {
  struct sim_op *next;
  sim_op_fn fn;
  void *arg;
  int free_arg;
  uint64_t ticket; /* its place in its stream's progress */
} sim_op;

/* Ops a stream queued and finished. Never freed (kept reachable in a
 * list): an implicit wait of another stream may outlive the stream. */
typedef struct sim_progress {
  struct sim_progress *next;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t queued, done;
} sim_progress;

#define SIM_STREAM_NON_BLOCKING 0x1u /* cudaStreamNonBlocking */

struct sim_stream {
  struct sim_stream *next_all;
  int dev;
  unsigned flags;
  uint64_t delay_us;          /* SPCSIM_SLOW_STREAMS when it was made */
  int legacy;
  int per_thread; /* cudaStreamPerThread's: never destroyed by the user */
  sim_progress *prog;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sim_op *head, *tail;
  int busy, stop;
  int blocked;   /* its op waits outside the stream (sim_stream_blocked) */
  int destroyed; /* destroyed while blocked: kept, never freed */
  int status;    /* first failure of an op: sticky */
  pthread_t worker;
};

static int nevents;
int sim_events_alive(void);
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_stream *all_streams;
static sim_stream *legacy[SIM_MAX_DEV];
static sim_progress *all_progress;
static __thread sim_stream *per_thread[SIM_MAX_DEV];
static __thread sim_stream *running; /* a worker's own stream */

static sim_progress *progress_new(void) {
  sim_progress *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_mutex_lock(&all_mu);
  p->next = all_progress;
  all_progress = p;
  pthread_mutex_unlock(&all_mu);
  return p;
}

static void progress_done(sim_progress *p, uint64_t ticket) {
  pthread_mutex_lock(&p->mu);
  p->done = ticket;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg) {
  sim_stream *s = arg;
  running = s;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->head == NULL && !s->stop)
      pthread_cond_wait(&s->cv, &s->mu);
    if (s->head == NULL && s->stop)
      break;
    sim_op *op = s->head;
    s->head = op->next;
    if (s->head == NULL)
      s->tail = NULL;
    s->busy = 1;
    int st = sim_sticky(s->status);
    pthread_mutex_unlock(&s->mu);
    sim_set_cur_dev(s->dev);
    /* Slow streams (SPCSIM_SLOW_STREAMS): a consumer that does not wait
     * for this stream reads too early nearly every time. */
    if (s->delay_us > 0)
      usleep((useconds_t)s->delay_us);
    op->fn(op->arg, &st);
    progress_done(s->prog, op->ticket);
    if (op->free_arg)
      free(op->arg);
    free(op);
    pthread_mutex_lock(&s->mu);
    if (s->status == SIM_OK)
      s->status = st;
    s->busy = 0;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static int stream_new(int dev, unsigned flags, int is_legacy,
                      sim_stream **s_p) {
  sim_stream *s = calloc(1, sizeof(*s));
  if (s == NULL || (s->prog = progress_new()) == NULL) {
    free(s);
    return SIM_ENOMEM;
  }
  s->dev = dev;
  s->flags = flags;
  s->legacy = is_legacy;
  s->delay_us = sim_slow_streams();
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  int e = pthread_create(&s->worker, NULL, worker_main, s);
  if (e != 0) {
    fprintf(stderr, "spcsim: pthread_create for a stream: %s\n", strerror(e));
    free(s);
    return SIM_ENOMEM;
  }
  if (!is_legacy) {
    pthread_mutex_lock(&all_mu);
    s->next_all = all_streams;
    all_streams = s;
    pthread_mutex_unlock(&all_mu);
  }
  *s_p = s;
  return SIM_OK;
}

int sim_stream_create(int dev, unsigned flags, sim_stream **s_p) {
  if (dev < 0 || dev >= sim_cfg()->ndev)
    return SIM_EDEVICE;
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  sim_ctx_touch(dev);
  return stream_new(dev, flags, 0, s_p);
}

/* This thread's cudaStreamPerThread on the current device. */
static sim_stream *per_thread_stream(void) {
  int dev = sim_cur_dev();
  if (per_thread[dev] == NULL && stream_new(dev, 0, 0, &per_thread[dev]) ==
                                     SIM_OK)
    per_thread[dev]->per_thread = 1;
  return per_thread[dev];
}

sim_stream *sim_stream_resolve(sim_stream *s) {
  /* NULL and cudaStreamLegacy (1): the legacy default stream. */
  if (s != NULL && (uintptr_t)s > 2)
    return s;
  if ((uintptr_t)s == 2)
    return per_thread_stream();
  int dev = sim_cur_dev();
  pthread_mutex_lock(&all_mu);
  sim_stream *l = legacy[dev];
  pthread_mutex_unlock(&all_mu);
  if (l != NULL)
    return l;
  sim_stream *n;
  if (stream_new(dev, 0, 1, &n) != SIM_OK)
    return NULL;
  pthread_mutex_lock(&all_mu);
  if (legacy[dev] == NULL) {
    legacy[dev] = n;
    n = NULL;
  }
  l = legacy[dev];
  pthread_mutex_unlock(&all_mu);
  if (n != NULL) { /* lost a race: stop ours */
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->worker, NULL);
    free(n);
  }
  return l;
}

int sim_stream_dev(sim_stream *s) { return sim_stream_resolve(s)->dev; }

int sim_stream_sync(sim_stream *s) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  s = sim_stream_resolve(s);
  if (s == NULL)
    return SIM_ENOMEM;
  pthread_mutex_lock(&s->mu);
  while (s->head != NULL || s->busy)
    pthread_cond_wait(&s->cv, &s->mu);
  int st = s->status;
  pthread_mutex_unlock(&s->mu);
  return st;
}

int sim_stream_query(sim_stream *s) {
  s = sim_stream_resolve(s);
  pthread_mutex_lock(&s->mu);
  int idle = s->head == NULL && !s->busy;
  pthread_mutex_unlock(&s->mu);
  return idle ? SIM_OK : SIM_ENOTREADY;
}

void sim_stream_blocked(int on) {
  sim_stream *s = running;
  if (s == NULL)
    return;
  pthread_mutex_lock(&s->mu);
  s->blocked = on;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

int sim_stream_destroy(sim_stream *s) {
  if (s == NULL || (uintptr_t)s <= 2 || s->legacy || s->per_thread)
    return SIM_EHANDLE;
  pthread_mutex_lock(&all_mu);
  sim_stream **p = &all_streams;
  while (*p != NULL && *p != s)
    p = &(*p)->next_all;
  if (*p == NULL || s->destroyed) {
    pthread_mutex_unlock(&all_mu);
    return SIM_EHANDLE;
  }
  *p = s->next_all;
  pthread_mutex_unlock(&all_mu);
  /* CUDA lets queued work finish after cudaStreamDestroy returns; the
   * worker drains it before it stops. A stream blocked outside itself
   * may never drain: it is listed again and left to its worker (see the
   * top). */
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  while ((s->head != NULL || s->busy) && !s->blocked)
    pthread_cond_wait(&s->cv, &s->mu);
  int stuck = s->head != NULL || s->busy;
  pthread_mutex_unlock(&s->mu);
  if (stuck) {
    pthread_mutex_lock(&all_mu);
    s->destroyed = 1;
    s->next_all = all_streams;
    all_streams = s;
    pthread_mutex_unlock(&all_mu);
    pthread_detach(s->worker);
    return SIM_OK;
  }
  pthread_join(s->worker, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  return SIM_OK;
}

static int push(sim_stream *s, sim_op_fn fn, void *arg, int free_arg) {
  sim_op *op = calloc(1, sizeof(*op));
  if (op == NULL)
    return SIM_ENOMEM;
  op->fn = fn;
  op->arg = arg;
  op->free_arg = free_arg;
  pthread_mutex_lock(&s->mu);
  pthread_mutex_lock(&s->prog->mu);
  op->ticket = ++s->prog->queued;
  pthread_mutex_unlock(&s->prog->mu);
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return SIM_OK;
}

typedef struct {
  sim_progress *p;
  uint64_t ticket;
} progress_wait;

static void run_progress_wait(void *a, int *status) {
  progress_wait *w = a;
  (void)status;
  pthread_mutex_lock(&w->p->mu);
  while (w->p->done < w->ticket)
    pthread_cond_wait(&w->p->cv, &w->p->mu);
  pthread_mutex_unlock(&w->p->mu);
}

/* Queue on s a wait for what `on` has queued so far, if it is not done. */
static int wait_for(sim_stream *s, sim_progress *on) {
  pthread_mutex_lock(&on->mu);
  uint64_t t = on->queued;
  int pending = on->done < t;
  pthread_mutex_unlock(&on->mu);
  if (!pending)
    return SIM_OK;
  progress_wait *w = malloc(sizeof(*w));
  if (w == NULL)
    return SIM_ENOMEM;
  w->p = on;
  w->ticket = t;
  int rc = push(s, run_progress_wait, w, 1);
  if (rc != SIM_OK)
    free(w);
  return rc;
}

static int blocking(const sim_stream *s) {
  return !s->legacy && !(s->flags & SIM_STREAM_NON_BLOCKING);
}

/* The implicit waits of an op queued on s (see the top of the file). */
static int order_default(sim_stream *s) {
  int rc = SIM_OK;
  pthread_mutex_lock(&all_mu);
  if (s->legacy) {
    for (sim_stream *x = all_streams; x != NULL && rc == SIM_OK;
         x = x->next_all)
      if (x->dev == s->dev && blocking(x))
        rc = wait_for(s, x->prog);
  } else if (blocking(s) && legacy[s->dev] != NULL) {
    rc = wait_for(s, legacy[s->dev]->prog);
  }
  pthread_mutex_unlock(&all_mu);
  return rc;
}

int sim_enqueue(sim_stream *s, sim_op_fn fn, void *arg, int free_arg) {
  if (sim_sticky(SIM_OK) != SIM_OK) /* the device takes no more work */
    return SIM_EILLEGAL;
  s = sim_stream_resolve(s);
  if (s == NULL)
    return SIM_ENOMEM;
  int rc = order_default(s);
  return rc != SIM_OK ? rc : push(s, fn, arg, free_arg);
}

int sim_device_sync(int dev) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  pthread_mutex_lock(&all_mu);
  int n = 0;
  for (sim_stream *s = all_streams; s != NULL; s = s->next_all)
    n += s->dev == dev;
  sim_stream **list = calloc((size_t)n + 1, sizeof(*list));
  n = 0;
  for (sim_stream *s = all_streams; list && s != NULL; s = s->next_all)
    if (s->dev == dev)
      list[n++] = s;
  pthread_mutex_unlock(&all_mu);
  if (list == NULL)
    return SIM_ENOMEM;
  /* Streams destroyed meanwhile are not waited for: a race the caller
   * made itself. */
  int st = SIM_OK;
  int cur = sim_cur_dev();
  sim_set_cur_dev(dev);
  int r = sim_stream_sync(NULL);
  sim_set_cur_dev(cur);
  st = r != SIM_OK ? r : st;
  for (int i = 0; i < n; i++) {
    r = sim_stream_sync(list[i]);
    st = r != SIM_OK ? r : st;
  }
  free(list);
  return st;
}

typedef struct {
  void (*cb)(void *, int, void *);
  void *arg;
  sim_stream *s;
} cb_op;

static void run_cb(void *a, int *status) {
  cb_op *c = a;
  c->cb(c->s, *status, c->arg);
}

int sim_stream_callback(sim_stream *s, void (*cb)(void *, int, void *),
                        void *arg) {
  cb_op *c = malloc(sizeof(*c));
  if (c == NULL)
    return SIM_ENOMEM;
  c->cb = cb;
  c->arg = arg;
  c->s = s;
  int rc = sim_enqueue(s, run_cb, c, 1);
  if (rc != SIM_OK) /* not queued (a faulted device): ours to free */
    free(c);
  return rc;
}

void sim_stream_leaks(void) {
  pthread_mutex_lock(&all_mu);
  for (sim_stream *s = all_streams; s != NULL; s = s->next_all)
    if (!s->per_thread && !s->destroyed)
      sim_leak_note("stream %p of GPU %d never destroyed", (void *)s,
                    s->dev);
  pthread_mutex_unlock(&all_mu);
  int n = sim_events_alive();
  if (n > 0)
    sim_leak_note("%d event(s) never destroyed", n);
}

/* ---- events ----------------------------------------------------------------
 */

#define EMAGIC 0x53504345u

typedef struct {
  uint32_t magic;
  uint32_t gen; /* futex word: bumped at every completion */
  uint64_t id;
  uint64_t recorded;  /* records so far (the last one's target) */
  uint64_t completed; /* highest target completed */
  int32_t importers, creator;
  int32_t dev, flags;
} ev_shared;

struct sim_event {
  ev_shared *sh;
  int fd; /* IPC: the memfd importers open */
  uint64_t ino;
  int imported;
  int refs;               /* the handle, + queued records/waits */
  struct timespec t_done; /* timing events: when the record completed */
};

/* pidns: the exporter's PID namespace (sim_pidns; 0: unknown). */
typedef struct {
  uint32_t magic;
  int32_t pid, fd, dev;
  uint64_t ino, id;
  uint64_t pidns;
  uint8_t pad[24];
} ipc_ev_handle;
_Static_assert(sizeof(ipc_ev_handle) == 64, "a CUDA IPC handle has 64 bytes");

static uint64_t ev_next_id = 1;

static void ev_unref(sim_event *e) {
  if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  if (e->fd >= 0 || e->imported) {
    syscall(SYS_munmap, e->sh, 4096);
    if (e->fd >= 0)
      close(e->fd);
  } else {
    free(e->sh);
  }
  free(e);
}

int sim_event_create(int dev, unsigned flags, sim_event **e_p,
                     const char *call) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  sim_ctx_touch(dev);
  if ((flags & SIM_EV_IPC) && !(flags & SIM_EV_NOTIMING)) {
    sim_violation("ipc-event-timing", call,
                  "an interprocess event must be "
                  "made with DisableTiming too (flags 0x%x)",
                  flags);
    return SIM_EINVAL;
  }
  sim_event *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return SIM_ENOMEM;
  e->fd = -1;
  e->refs = 1;
  if (flags & SIM_EV_IPC) {
    struct stat st;
    e->fd = memfd_create("spcsim-event", MFD_CLOEXEC);
    if (e->fd < 0 || ftruncate(e->fd, 4096) < 0 || fstat(e->fd, &st) < 0) {
      fprintf(stderr, "spcsim: memfd for an event: %s\n", strerror(errno));
      if (e->fd >= 0)
        close(e->fd);
      free(e);
      return SIM_ENOMEM;
    }
    e->ino = st.st_ino;
    e->sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0);
    if (e->sh == MAP_FAILED) {
      close(e->fd);
      free(e);
      return SIM_ENOMEM;
    }
  } else {
    e->sh = calloc(1, sizeof(ev_shared));
    if (e->sh == NULL) {
      free(e);
      return SIM_ENOMEM;
    }
  }
  e->sh->magic = EMAGIC;
  e->sh->id = ((uint64_t)getpid() << 32) |
              __atomic_fetch_add(&ev_next_id, 1, __ATOMIC_RELAXED);
  e->sh->creator = getpid();
  e->sh->dev = dev;
  e->sh->flags = (int32_t)flags;
  __atomic_add_fetch(&nevents, 1, __ATOMIC_RELAXED);
  *e_p = e;
  return SIM_OK;
}

int sim_event_destroy(sim_event *e, const char *call) {
  if (e == NULL)
    return SIM_EHANDLE;
  if (!e->imported && e->fd >= 0) {
    int imp = __atomic_load_n(&e->sh->importers, __ATOMIC_ACQUIRE);
    if (imp > 0)
      sim_violation("ipc-event-destroyed-while-imported", call,
                    "event %llx "
                    "is still open in %d other process(es) through "
                    "cudaIpcOpenEventHandle",
                    (unsigned long long)e->sh->id, imp);
  }
  if (e->imported)
    __atomic_sub_fetch(&e->sh->importers, 1, __ATOMIC_ACQ_REL);
  __atomic_sub_fetch(&nevents, 1, __ATOMIC_RELAXED);
  ev_unref(e);
  return SIM_OK;
}

typedef struct {
  sim_event *e;
  uint64_t target;
} ev_op;

static void futex_wake(uint32_t *w) {
  syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void run_record(void *a, int *status) {
  ev_op *o = a;
  if (*status == SIM_EILLEGAL) { /* a dead device completes nothing */
    ev_unref(o->e);
    return;
  }
  ev_shared *sh = o->e->sh;
  clock_gettime(CLOCK_MONOTONIC, &o->e->t_done);
  uint64_t c = __atomic_load_n(&sh->completed, __ATOMIC_ACQUIRE);
  while (c < o->target &&
         !__atomic_compare_exchange_n(&sh->completed, &c, o->target, 0,
                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    ;
  __atomic_add_fetch(&sh->gen, 1, __ATOMIC_ACQ_REL);
  futex_wake(&sh->gen);
  ev_unref(o->e);
}

int sim_event_record(sim_event *e, sim_stream *s) {
  ev_op *o = malloc(sizeof(*o));
  if (o == NULL)
    return SIM_ENOMEM;
  o->e = e;
  o->target = __atomic_add_fetch(&e->sh->recorded, 1, __ATOMIC_ACQ_REL);
  __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
  int rc = sim_enqueue(s, run_record, o, 1);
  if (rc != SIM_OK) {
    ev_unref(e);
    free(o);
  }
  return rc;
}

/* Until the event reaches target, or this process's device faulted (its
 * work is dropped: nothing is waited for any more). */
static void wait_target(ev_shared *sh, uint64_t target) {
  for (;;) {
    uint32_t g = __atomic_load_n(&sh->gen, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&sh->completed, __ATOMIC_ACQUIRE) >= target ||
        sim_sticky(SIM_OK) != SIM_OK)
      return;
    /* Bounded waits: the other side may be a process that died. */
    struct timespec ts = {0, 50 * 1000 * 1000};
    syscall(SYS_futex, &sh->gen, FUTEX_WAIT, g, &ts, NULL, 0);
  }
}

static void run_wait(void *a, int *status) {
  ev_op *o = a;
  (void)status;
  wait_target(o->e->sh, o->target);
  ev_unref(o->e);
}

int sim_stream_wait(sim_stream *s, sim_event *e) {
  uint64_t t = __atomic_load_n(&e->sh->recorded, __ATOMIC_ACQUIRE);
  if (t == 0)
    return SIM_OK; /* never recorded: nothing to wait for (CUDA's rule) */
  ev_op *o = malloc(sizeof(*o));
  if (o == NULL)
    return SIM_ENOMEM;
  o->e = e;
  o->target = t;
  __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
  int rc = sim_enqueue(s, run_wait, o, 1);
  if (rc != SIM_OK) {
    ev_unref(e);
    free(o);
  }
  return rc;
}

int sim_event_sync(sim_event *e) {
  wait_target(e->sh, __atomic_load_n(&e->sh->recorded, __ATOMIC_ACQUIRE));
  return sim_sticky(SIM_OK);
}

int sim_event_query(sim_event *e) {
  return __atomic_load_n(&e->sh->completed, __ATOMIC_ACQUIRE) >=
                 __atomic_load_n(&e->sh->recorded, __ATOMIC_ACQUIRE)
             ? SIM_OK
             : SIM_ENOTREADY;
}

int sim_event_elapsed(float *ms, sim_event *a, sim_event *b) {
  if ((a->sh->flags | b->sh->flags) & SIM_EV_NOTIMING)
    return SIM_EHANDLE;
  if (sim_event_query(a) != SIM_OK || sim_event_query(b) != SIM_OK)
    return SIM_ENOTREADY;
  *ms = (float)((b->t_done.tv_sec - a->t_done.tv_sec) * 1e3 +
                (b->t_done.tv_nsec - a->t_done.tv_nsec) / 1e6);
  return SIM_OK;
}

int sim_event_ipc_get(sim_event *e, sim_handle64 *hout, const char *call) {
  if (e->fd < 0 || e->imported) {
    sim_violation("ipc-event-flags", call,
                  "event %llx was not made with "
                  "the Interprocess flag (or is itself imported)",
                  (unsigned long long)e->sh->id);
    return SIM_EHANDLE;
  }
  ipc_ev_handle h = {.magic = EMAGIC,
                     .pid = getpid(),
                     .fd = e->fd,
                     .dev = e->sh->dev,
                     .ino = e->ino,
                     .id = e->sh->id,
                     .pidns = sim_pidns()};
  memcpy(hout, &h, sizeof(h));
  return SIM_OK;
}

int sim_event_ipc_open(const sim_handle64 *hin, sim_event **e_p,
                       const char *call) {
  sim_ctx_touch(sim_cur_dev());
  ipc_ev_handle h;
  memcpy(&h, hin, sizeof(h));
  if (h.magic != EMAGIC)
    return SIM_EHANDLE;
  /* As memory handles (sim_ipc.c): only in the exporter's PID namespace,
   * checked before its pid is read. */
  if (sim_ipc_pidns_differs(h.pidns, "event", call))
    return SIM_EMAPFAIL;
  if (h.pid == getpid()) {
    sim_violation("ipc-open-own-process", call,
                  "event %llx was made by "
                  "this process",
                  (unsigned long long)h.id);
    return SIM_EINVAL;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_ino != h.ino) {
    if (fd >= 0)
      close(fd);
    return SIM_EHANDLE;
  }
  ev_shared *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (sh == MAP_FAILED)
    return SIM_EHANDLE;
  if (sh->magic != EMAGIC || sh->id != h.id) {
    syscall(SYS_munmap, sh, 4096);
    return SIM_EHANDLE;
  }
  sim_event *e = calloc(1, sizeof(*e));
  if (e == NULL) {
    syscall(SYS_munmap, sh, 4096);
    return SIM_ENOMEM;
  }
  e->sh = sh;
  e->fd = -1;
  e->imported = 1;
  e->refs = 1;
  __atomic_add_fetch(&sh->importers, 1, __ATOMIC_ACQ_REL);
  __atomic_add_fetch(&nevents, 1, __ATOMIC_RELAXED);
  *e_p = e;
  return SIM_OK;
}

int sim_events_alive(void) {
  return __atomic_load_n(&nevents, __ATOMIC_RELAXED);
}
