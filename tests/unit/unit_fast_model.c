/* The fast path's protocol checker. The protocol's own code
 * (kernels/fast_sync.h: publish, the sleep/wake handshake, the drain's
 * in_op/closed handshake; kernels/fast_seg.h: the ring slot's put and
 * get, spk_fseg_said), built
 * with SPK_FAST_MODEL, runs in threads standing for ranks under a
 * deterministic scheduler: only one thread runs at a time, and at every
 * access to a shared word the scheduler picks, from a seeded generator,
 * which thread goes on or which buffered store reaches memory first.
 *
 * Weak memory, as far as this model goes. Stores: each thread has a store
 * buffer. A release (or stronger) store reaches memory only after every
 * store before it; relaxed and plain stores may overtake earlier relaxed
 * or plain ones to other addresses (never to the same bytes, nor an
 * earlier release: stronger than C11); a thread reads its own buffered
 * stores; an sc fence, any atomic read-modify-write (whatever its order)
 * and a futex call empty the buffer first. Loads: memory keeps its
 * history (every store that reached it, in order), and a relaxed or
 * plain load may read any state of a word since the thread's last
 * ordering point (an acquire or sc load, an acquire or sc fence, an RMW,
 * a futex call), as a load performed early would, but never one older
 * than what the thread already read or wrote there (coherence); an
 * acquire or sc load reads memory as it is now and is an ordering point.
 * An RMW weakened below sc is beyond it.
 *
 * Scenarios: rank 0 publishes op 1 while rank 1 waits for it (sleeping
 * if it must); a rank starts an op while the daemon drains; the daemon
 * breaks the segment while a rank waits (thread 0 is then the daemon);
 * rank 0 publishes one op more than its ring holds, reusing a slot once
 * rank 1 said it read it (invariant 1), in a ring of 2 (this build's
 * SPK_FSEG_RING). A run fails
 * on a lost wake-up (a thread asleep on the futex word with nothing left
 * to run or flush: every other thread done), on a reader that saw op 1
 * published but not what was written for it (a torn ring slot, or one
 * rewritten before it was read) or saw
 * the break but not its message, or on a daemon that found a rank idle
 * while it ran a fast op. The mutation
 * checks tell the model to drop rank 0's sc fence, to weaken its release
 * stores to relaxed, or its sc stores to release, or thread 1's acquire
 * loads to relaxed, in the code as written, and require the checker to
 * find each failure. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "fast_sync.h"

#ifndef SPK_FAST_MODEL
#error "build with -DSPK_FAST_MODEL"
#endif

enum { NT = 2, MAXBUF = 64, RUNS = 20000, MAXSEEN = 1024 };
enum { T_POINT, T_RUN, T_BLOCKED, T_DONE };

typedef struct {
  uint8_t *addr;
  size_t size;
  uint8_t *bytes;
  int ordered; /* release or stronger: after every earlier store */
} entry;

/* A store that reached memory: where, what was there before, when. */
typedef struct {
  uint8_t *addr;
  size_t size;
  uint8_t *old;
  uint64_t time;
} event;

/* The state of an 8-byte word a thread read or wrote last (coherence). */
typedef struct {
  const uint8_t *word;
  uint64_t time;
} seen;

typedef struct {
  pthread_t t;
  int state;
  uint32_t *word; /* T_BLOCKED: the futex word */
  entry buf[MAXBUF];
  int n;
  uint64_t ordered_at; /* memory's time at its last ordering point */
  seen seen[MAXSEEN];
  int nseen;
  void (*body)(int me);
} mthread;

/* The model: what the scheduler knows. One run at a time. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mthread th[NT];
  int current;        /* the thread that may run */
  int abort_run;      /* a failure was found: every thread leaves */
  uint64_t rng;
  int drop_fences;    /* of thread 0 (the publisher) */
  int weaken_release; /* of thread 0: release stores become relaxed */
  int weaken_sc;      /* of thread 0: sc stores become release */
  int weaken_acquire; /* of thread 1: acquire loads become relaxed */
  event *log;         /* memory's history, oldest first */
  int nlog, caplog;
  uint64_t now;       /* memory's time: stores that reached it */
  int runs;           /* runs of the next exploration (RUNS) */
  uint64_t explored;  /* runs the last exploration made */
  int slept;          /* runs so far in which a thread slept on the word */
  char failure[160];
} M = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static __thread int self = -1;

static uint64_t rnd(void) {
  M.rng ^= M.rng << 13;
  M.rng ^= M.rng >> 7;
  M.rng ^= M.rng << 17;
  return M.rng;
}

static int overlaps(const entry *a, const entry *b) {
  return a->addr < b->addr + b->size && b->addr < a->addr + a->size;
}

/* Whether thread t's k-th buffered store may reach memory now. */
static int flushable(const mthread *t, int k) {
  if (t->buf[k].ordered)
    return k == 0;
  for (int i = 0; i < k; i++)
    if (t->buf[i].ordered || overlaps(&t->buf[i], &t->buf[k]))
      return 0;
  return 1;
}

static const uint8_t *word_of(const uint8_t *p) {
  return (const uint8_t *)((uintptr_t)p & ~(uintptr_t)7);
}

/* The thread's record of the word holding p (time 0: none yet). */
static seen *seen_of(mthread *t, const uint8_t *p) {
  const uint8_t *w = word_of(p);
  for (int i = 0; i < t->nseen; i++)
    if (t->seen[i].word == w)
      return &t->seen[i];
  ck_assert_int_lt(t->nseen, MAXSEEN);
  t->seen[t->nseen] = (seen){w, 0};
  return &t->seen[t->nseen++];
}

/* Thread t saw (read or wrote) the words of [p, p + n) as of time. */
static void saw(mthread *t, const uint8_t *p, size_t n, uint64_t time) {
  for (const uint8_t *q = p; q < p + n; q = word_of(q) + 8) {
    seen *s = seen_of(t, q);
    if (s->time < time)
      s->time = time;
  }
}

static void log_store(uint8_t *addr, size_t size) {
  if (M.nlog == M.caplog) {
    M.caplog = M.caplog ? 2 * M.caplog : 256;
    M.log = realloc(M.log, (size_t)M.caplog * sizeof(event));
    ck_assert_ptr_nonnull(M.log);
  }
  event *e = &M.log[M.nlog++];
  e->addr = addr;
  e->size = size;
  e->old = malloc(size);
  ck_assert_ptr_nonnull(e->old);
  memcpy(e->old, addr, size);
  e->time = ++M.now;
}

static void log_clear(void) {
  for (int i = 0; i < M.nlog; i++)
    free(M.log[i].old);
  M.nlog = 0;
  M.now = 0;
}

static void flush_one(mthread *t, int k) {
  entry e = t->buf[k];
  log_store(e.addr, e.size);
  memcpy(e.addr, e.bytes, e.size);
  saw(t, e.addr, e.size, M.now);
  free(e.bytes);
  memmove(&t->buf[k], &t->buf[k + 1], (size_t)(t->n - k - 1) * sizeof(entry));
  t->n--;
}

static void flush_all(mthread *t) {
  while (t->n > 0)
    flush_one(t, 0);
}

static void fail_locked(const char *why) {
  if (M.failure[0] == '\0')
    snprintf(M.failure, sizeof(M.failure), "%s", why);
  M.abort_run = 1;
  pthread_cond_broadcast(&M.cv);
}

/* Pick what happens next: a buffered store reaches memory (30% when one
 * can), or a thread waiting at a step runs. None left: the run is over,
 * or a thread sleeps with nothing that could wake it. Mutex held. */
static void schedule_locked(void) {
  while (!M.abort_run) {
    int runnable[NT], nr = 0, fl[NT * MAXBUF][2], nf = 0;
    for (int i = 0; i < NT; i++) {
      if (M.th[i].state == T_POINT)
        runnable[nr++] = i;
      for (int k = 0; k < M.th[i].n; k++)
        if (flushable(&M.th[i], k))
          fl[nf][0] = i, fl[nf][1] = k, nf++;
    }
    if (nf > 0 && (nr == 0 || rnd() % 10 < 3)) {
      int c = (int)(rnd() % (uint64_t)nf);
      flush_one(&M.th[fl[c][0]], fl[c][1]);
      continue;
    }
    if (nr > 0) {
      M.current = runnable[rnd() % (uint64_t)nr];
      M.th[M.current].state = T_RUN;
      pthread_cond_broadcast(&M.cv);
      return;
    }
    for (int i = 0; i < NT; i++)
      if (M.th[i].state == T_BLOCKED) {
        fail_locked("lost wake-up: a thread sleeps on the futex word and "
                    "nothing is left to wake it");
        return;
      }
    M.current = -1; /* every thread is done */
    pthread_cond_broadcast(&M.cv);
    return;
  }
}

static void leave_locked(void) {
  pthread_mutex_unlock(&M.mu);
  pthread_exit(NULL);
}

/* Wait until the scheduler hands this thread the run. Mutex held. */
static void await_turn_locked(void) {
  while (!M.abort_run && !(M.current == self && M.th[self].state == T_RUN))
    pthread_cond_wait(&M.cv, &M.mu);
  if (M.abort_run)
    leave_locked();
}

/* Every shared access begins here: another thread's steps, or flushes,
 * may come first. Returns with the mutex held. */
static void step(void) {
  pthread_mutex_lock(&M.mu);
  if (M.abort_run)
    leave_locked();
  M.th[self].state = T_POINT;
  schedule_locked();
  await_turn_locked();
}

/* Memory's [p, p + n) as it was at time (every later store undone). */
static void read_at(void *dst, const void *p, size_t n, uint64_t time) {
  const uint8_t *a = p;
  memcpy(dst, p, n);
  for (int i = M.nlog - 1; i >= 0 && M.log[i].time > time; i--) {
    const event *e = &M.log[i];
    for (size_t j = 0; j < e->size; j++)
      if (e->addr + j >= a && e->addr + j < a + n)
        ((uint8_t *)dst)[e->addr + j - a] = e->old[j];
  }
}

/* When a load of [p, p + n) by t reads memory: now when ordered, else any
 * time since its last ordering point and what it saw of those words. */
static uint64_t read_time(mthread *t, const uint8_t *p, size_t n,
                          int ordered) {
  if (ordered)
    return M.now;
  uint64_t lo = t->ordered_at;
  for (const uint8_t *q = p; q < p + n; q = word_of(q) + 8) {
    uint64_t s = seen_of(t, q)->time;
    lo = s > lo ? s : lo;
  }
  if (lo >= M.now || rnd() % 2 == 0)
    return M.now;
  return lo + rnd() % (M.now - lo + 1);
}

/* Read [p, p + n) as this thread sees it: memory at a time read_time
 * allows (ordered: now), then its own buffered stores over it, oldest
 * first. */
static void read_locked(void *dst, const void *p, size_t n, int ordered) {
  const uint8_t *a = p;
  mthread *t = &M.th[self];
  uint64_t time = read_time(t, a, n, ordered);
  read_at(dst, p, n, time);
  saw(t, a, n, time);
  for (int i = 0; i < t->n; i++) {
    entry *e = &t->buf[i];
    for (size_t j = 0; j < e->size; j++)
      if (e->addr + j >= a && e->addr + j < a + n)
        ((uint8_t *)dst)[e->addr + j - a] = e->bytes[j];
  }
}

static void buffer_locked(void *p, const void *bytes, size_t n, int ordered) {
  mthread *t = &M.th[self];
  if (t->n == MAXBUF)
    flush_all(t);
  entry *e = &t->buf[t->n++];
  e->addr = p;
  e->size = n;
  e->bytes = malloc(n);
  ck_assert_ptr_nonnull(e->bytes);
  memcpy(e->bytes, bytes, n);
  e->ordered = ordered;
}

uint64_t spk_model_load(const void *p, size_t size, int mo) {
  step();
  if (self == 1 && M.weaken_acquire && mo == __ATOMIC_ACQUIRE)
    mo = __ATOMIC_RELAXED;
  int ordered = mo == __ATOMIC_ACQUIRE || mo == __ATOMIC_SEQ_CST;
  uint64_t v = 0;
  read_locked(&v, p, size, ordered);
  if (ordered)
    M.th[self].ordered_at = M.now;
  pthread_mutex_unlock(&M.mu);
  return v;
}

void spk_model_store(void *p, size_t size, uint64_t v, int mo) {
  step();
  if (self == 0 && M.weaken_release && mo == __ATOMIC_RELEASE)
    mo = __ATOMIC_RELAXED;
  if (self == 0 && M.weaken_sc && mo == __ATOMIC_SEQ_CST)
    mo = __ATOMIC_RELEASE;
  buffer_locked(p, &v, size, mo == __ATOMIC_RELEASE || mo == __ATOMIC_SEQ_CST);
  if (mo == __ATOMIC_SEQ_CST)
    flush_all(&M.th[self]);
  pthread_mutex_unlock(&M.mu);
}

uint64_t spk_model_add(void *p, size_t size, uint64_t v, int mo) {
  (void)mo;
  step();
  flush_all(&M.th[self]);
  uint64_t now = 0; /* little-endian: the word's bytes are now's low ones */
  memcpy(&now, p, size);
  now += v;
  if (size < sizeof(now))
    now &= (UINT64_C(1) << (8 * size)) - 1;
  log_store(p, size);
  memcpy(p, &now, size);
  saw(&M.th[self], p, size, M.now);
  M.th[self].ordered_at = M.now;
  pthread_mutex_unlock(&M.mu);
  return now;
}

void spk_model_fence(int mo) {
  step();
  int dropped = self == 0 && M.drop_fences;
  if (mo == __ATOMIC_SEQ_CST && !dropped)
    flush_all(&M.th[self]);
  if ((mo == __ATOMIC_SEQ_CST || mo == __ATOMIC_ACQUIRE ||
       mo == __ATOMIC_ACQ_REL) && !dropped)
    M.th[self].ordered_at = M.now;
  pthread_mutex_unlock(&M.mu);
}

void spk_model_copy_in(void *dst, const void *src, size_t n) {
  step();
  buffer_locked(dst, src, n, 0);
  pthread_mutex_unlock(&M.mu);
}

void spk_model_copy_out(void *dst, const void *src, size_t n) {
  step();
  /* word by word: a plain copy may read each at another time */
  for (size_t o = 0; o < n;) {
    size_t k = 8 - (((uintptr_t)src + o) & 7);
    k = k < n - o ? k : n - o;
    read_locked((uint8_t *)dst + o, (const uint8_t *)src + o, k, 0);
    o += k;
  }
  pthread_mutex_unlock(&M.mu);
}

/* FUTEX_WAIT and FUTEX_WAKE as the kernel does them, without the
 * client's timeout (so that a lost wake-up shows): the call empties the
 * caller's buffer; a wait sleeps only while the word holds w. */
static void model_futex_wait(void *arg, uint32_t *word, uint32_t w) {
  (void)arg;
  step();
  flush_all(&M.th[self]);
  M.th[self].ordered_at = M.now;
  if (*word == w) {
    M.slept++;
    M.th[self].state = T_BLOCKED;
    M.th[self].word = word;
    schedule_locked();
    await_turn_locked();
    M.th[self].ordered_at = M.now; /* the wake-up is a full barrier too */
  }
  pthread_mutex_unlock(&M.mu);
}

static void model_futex_wake(uint32_t *word) {
  step();
  flush_all(&M.th[self]);
  M.th[self].ordered_at = M.now;
  for (int i = 0; i < NT; i++)
    if (M.th[i].state == T_BLOCKED && M.th[i].word == word)
      M.th[i].state = T_POINT;
  pthread_mutex_unlock(&M.mu);
}

/* ---- the scenario: rank 0 publishes op 1, rank 1 waits for it -------- */

#define STAGE 4096
static uint8_t *seg;

static spk_fseg_hdr *hdr(void) { return (spk_fseg_hdr *)seg; }
static spk_fseg_rank *rank_area(int r) {
  return spk_fseg_rank_of(seg, STAGE, r);
}

static spk_fseg_desc want(void) {
  spk_fseg_desc d;
  memset(&d, 0, sizeof(d));
  d.seq = 1;
  d.eligible = 1;
  d.op = 7;
  d.dtype = 3;
  return d;
}

/* Rank 0: op 1's descriptor into its ring slot, then pub(published, 1),
 * then FUTEX_WAKE if a sleeper was seen (client_fast_wait.c). */
static void publisher(int me) {
  spk_fseg_rank *a = rank_area(me);
  spk_fseg_desc d = want();
  spk_fseg_desc_put(&a->ring[1 % SPK_FSEG_RING], &d, sizeof(d));
  if (spk_fsync_publish(hdr(), a, &a->published, 1))
    model_futex_wake(&hdr()->wake);
}

static int published_look(void *arg) {
  (void)arg;
  return spk_fseg_said(rank_area(0), offsetof(spk_fseg_rank, published)) >= 1;
}

/* Rank 1: looks, sleeps while op 1 is not published (wait_for's last
 * resort), then reads the slot as a reader does after its acquire. */
static void waiter(int me) {
  (void)me;
  while (!published_look(NULL) &&
         !spk_fsync_sleep(hdr(), published_look, model_futex_wait, NULL))
    ;
  spk_fseg_desc got, w = want();
  spk_fseg_desc_get(&got, &rank_area(0)->ring[1 % SPK_FSEG_RING]);
  if (got.seq != w.seq || got.op != w.op || got.eligible != w.eligible ||
      got.dtype != w.dtype) {
    pthread_mutex_lock(&M.mu);
    fail_locked("torn ring slot: op 1 seen published, its slot not yet "
                "written");
    pthread_mutex_unlock(&M.mu);
  }
}

/* ---- the drain: a rank starts an op while the daemon closes ---------- */

static int inside; /* ghost: the rank runs a fast op (only one thread runs
                    * at a time, so it is read without the model) */
static int saw_closed, saw_busy; /* runs where the rank saw closed, where
                                  * the daemon saw the rank busy */

/* Rank 0, as spc__fast_run and runs_here: in_op, the look at closed; a
 * fast op only when not closed. */
static void drain_rank(int me) {
  spk_fseg_rank *a = rank_area(me);
  spk_fsync_op_enter(a);
  if (!spk_fsync_closed(hdr())) {
    inside = 1;
    (void)SPK_LOAD(&a->published, __ATOMIC_ACQUIRE); /* the op's work */
  } else {
    saw_closed++;
  }
  inside = 0;
  spk_fsync_op_leave(a);
}

/* The daemon, as its fast row's group_drain and group_busy: closed, then
 * the look at the rank; not busy means drained. */
static void drain_daemon(int me) {
  (void)me;
  spk_fsync_close(hdr());
  int busy = spk_fsync_rank_busy(rank_area(0));
  saw_busy += busy;
  if (!busy && inside) {
    pthread_mutex_lock(&M.mu);
    fail_locked("drained while a rank runs a fast op: neither saw the "
                "other (invariant 6)");
    pthread_mutex_unlock(&M.mu);
  }
}

/* ---- the break: the daemon breaks while a rank waits ---------------- */

#define BREAK_MSG "op 1 timed out after 3.0 s: rank 0 never published it"

/* The daemon, as its fast row's group_break: the message, broken, the
 * wake. */
static void break_daemon(int me) {
  (void)me;
  spk_fsync_break(hdr(), -7, BREAK_MSG);
  model_futex_wake(&hdr()->wake);
}

static int broken_look(void *arg) {
  (void)arg;
  return spk_fsync_broken(hdr()) != 0;
}

/* A rank waiting for an op nobody publishes, as wait_for: each look
 * also at broken (spc__fast_broken), sleeping in between; then the
 * message it reports must be the daemon's, whole. */
static void break_rank(int me) {
  (void)me;
  while (!broken_look(NULL) &&
         !spk_fsync_sleep(hdr(), broken_look, model_futex_wait, NULL))
    ;
  char m[SPK_FSEG_MSG];
  spk_fsync_broken_msg(hdr(), m);
  if (strncmp(m, BREAK_MSG, sizeof(m)) != 0) {
    pthread_mutex_lock(&M.mu);
    fail_locked("torn break: broken seen, its message not yet written");
    pthread_mutex_unlock(&M.mu);
  }
}

/* ---- ring-slot reuse: a writer two slots ahead of its reader ------- */

enum { REUSE_OPS = SPK_FSEG_RING + 1 };

typedef struct {
  int area;      /* whose counter */
  size_t field;  /* which */
  uint64_t v;    /* the value it must reach */
} said_wait;

static int said_look(void *arg) {
  said_wait *w = arg;
  return spk_fseg_said(rank_area(w->area), w->field) >= w->v;
}

/* wait_for's last resort: looks, sleeping in between. */
static void await_said(int area, size_t field, uint64_t v) {
  said_wait w = {area, field, v};
  while (!said_look(&w) &&
         !spk_fsync_sleep(hdr(), said_look, model_futex_wait, &w))
    ;
}

/* Rank 0 publishes ops 1..RING+1; op RING+1 goes into op 1's slot only
 * once the reader said it read op 1 (spk_fsync_slot_needs). */
static void reuse_writer(int me) {
  spk_fseg_rank *a = rank_area(me);
  for (uint64_t s = 1; s <= REUSE_OPS; s++) {
    uint64_t need = spk_fsync_slot_needs(s, 0, 1, 1);
    if (need != 0)
      await_said(1, offsetof(spk_fseg_rank, consumed), need);
    spk_fseg_desc d;
    memset(&d, 0, sizeof(d));
    d.seq = s, d.eligible = 1, d.op = (int32_t)(100 + s), d.dtype = (uint32_t)s;
    spk_fseg_desc_put(&a->ring[s % SPK_FSEG_RING], &d, sizeof(d));
    if (spk_fsync_publish(hdr(), a, &a->published, s))
      model_futex_wake(&hdr()->wake);
  }
}

/* Rank 1 reads each op's slot after its acquire of published, says so
 * (read_descs), and ends the op with a publish of consumed. */
static void reuse_reader(int me) {
  spk_fseg_rank *a = rank_area(me);
  for (uint64_t s = 1; s <= REUSE_OPS; s++) {
    await_said(0, offsetof(spk_fseg_rank, published), s);
    spk_fseg_desc got;
    spk_fseg_desc_get(&got, &rank_area(0)->ring[s % SPK_FSEG_RING]);
    if (got.seq != s || got.op != (int32_t)(100 + s) ||
        got.dtype != (uint32_t)s) {
      pthread_mutex_lock(&M.mu);
      fail_locked("ring slot rewritten before its reader read it");
      pthread_mutex_unlock(&M.mu);
      return;
    }
    if (spk_fsync_read_descs(hdr(), a, s))
      model_futex_wake(&hdr()->wake);
    if (spk_fsync_publish(hdr(), a, &a->consumed, s))
      model_futex_wake(&hdr()->wake);
  }
}

static void *thread_main(void *p) {
  int me = (int)(intptr_t)p;
  self = me;
  pthread_mutex_lock(&M.mu);
  await_turn_locked();
  pthread_mutex_unlock(&M.mu);
  M.th[me].body(me);
  pthread_mutex_lock(&M.mu);
  M.th[me].state = T_DONE;
  schedule_locked(); /* nothing when the run was aborted */
  pthread_mutex_unlock(&M.mu);
  return NULL;
}

/* One run with this seed: 1 when it failed (M.failure says why). */
typedef void (*body_fn)(int me);
static body_fn bodies[NT];

static int run_once(uint64_t seed) {
  memset(seg, 0, spk_fseg_size(NT, STAGE));
  spk_fseg_init(hdr(), NT, STAGE, 0);
  pthread_mutex_lock(&M.mu);
  M.rng = seed * 0x9e3779b97f4a7c15ull + 1;
  M.abort_run = 0;
  M.current = -1;
  inside = 0;
  log_clear();
  for (int i = 0; i < NT; i++) {
    M.th[i].state = T_POINT;
    M.th[i].n = 0;
    M.th[i].ordered_at = 0;
    M.th[i].nseen = 0;
    M.th[i].body = bodies[i];
  }
  for (int i = 0; i < NT; i++)
    ck_assert_int_eq(pthread_create(&M.th[i].t, NULL, thread_main,
                                    (void *)(intptr_t)i), 0);
  schedule_locked();
  pthread_mutex_unlock(&M.mu);
  for (int i = 0; i < NT; i++)
    pthread_join(M.th[i].t, NULL);
  for (int i = 0; i < NT; i++) {
    for (int k = 0; k < M.th[i].n; k++)
      free(M.th[i].buf[k].bytes);
    M.th[i].n = 0;
  }
  return M.abort_run;
}

/* What a mutation check weakens (thread 0's fences and stores, thread
 * 1's acquires). */
typedef struct {
  int drop_fences, weaken_release, weaken_sc, weaken_acquire;
} mutation;

/* n runs, or a quarter of them in the sanitizers' build (make check's
 * second pass, SPC_SANITIZED): there the model's own code is what is
 * checked, the protocol's interleavings already were. */
static uint64_t runs_of(uint64_t n) {
  const char *san = getenv("SPC_SANITIZED");
  return san != NULL && strcmp(san, "1") == 0 ? n / 4 : n;
}

/* RUNS seeded runs (a mutation's: up to its first failure): how many
 * failed; the first failure's reason kept. */
static int explore(body_fn b0, body_fn b1, mutation m) {
  int mutated = m.drop_fences || m.weaken_release || m.weaken_sc ||
                m.weaken_acquire;
  bodies[0] = b0, bodies[1] = b1;
  M.weaken_sc = m.weaken_sc;
  seg = calloc(1, spk_fseg_size(NT, STAGE));
  ck_assert_ptr_nonnull(seg);
  M.drop_fences = m.drop_fences;
  M.weaken_release = m.weaken_release;
  M.weaken_acquire = m.weaken_acquire;
  M.failure[0] = '\0';
  M.slept = 0;
  int failed = 0;
  uint64_t s;
  uint64_t runs = runs_of(M.runs > 0 ? (uint64_t)M.runs : RUNS);
  M.runs = 0;
  for (s = 1; s <= runs && !(mutated && failed); s++)
    failed += run_once(s);
  M.explored = s - 1;
  free(seg);
  log_clear();
  free(M.log);
  M.log = NULL;
  M.caplog = 0;
  if (getenv("SPK_MODEL_SAY"))
    fprintf(stderr, "drop_fences %d weaken_release %d weaken_sc %d "
            "weaken_acquire %d: %d of %llu runs failed%s%s; a thread slept "
            "in %d\n", m.drop_fences, m.weaken_release, m.weaken_sc,
            m.weaken_acquire, failed, (unsigned long long)M.explored,
            failed ? ": " : "", M.failure, M.slept);
  return failed;
}

/* The scenario (b0, b1) as written: no run fails; must_sleep: and some
 * run put a thread to sleep (the handshake ran both ways). */
static void holds(body_fn b0, body_fn b1, int must_sleep) {
  int failed = explore(b0, b1, (mutation){0});
  ck_assert_msg(failed == 0, "%d of %llu runs failed: %s", failed,
                (unsigned long long)M.explored,
                M.failure);
  ck_assert_msg(!must_sleep || M.slept > 0, "no run put a thread to sleep");
}

/* The scenario with its code weakened as m tells: some run fails,
 * saying `what`. */
static void caught(body_fn b0, body_fn b1, mutation m, const char *what) {
  int failed = explore(b0, b1, m);
  ck_assert_msg(failed > 0, "no run of %llu found %s (drop_fences %d, "
                "weaken_release %d, weaken_sc %d, weaken_acquire %d)",
                (unsigned long long)M.explored,
                what, m.drop_fences, m.weaken_release, m.weaken_sc,
                m.weaken_acquire);
  ck_assert_msg(strstr(M.failure, what) != NULL, "%s", M.failure);
}

START_TEST(protocol_as_written_holds) { holds(publisher, waiter, 1); }
END_TEST

START_TEST(dropped_publisher_fence_is_caught) {
  caught(publisher, waiter, (mutation){.drop_fences = 1}, "lost wake-up");
}
END_TEST

START_TEST(weakened_publish_release_is_caught) {
  caught(publisher, waiter, (mutation){.weaken_release = 1},
         "torn ring slot");
}
END_TEST

/* The reader's side: its acquire of published weakened, its reads of
 * the slot may be performed before it. */
START_TEST(weakened_wait_acquire_is_caught) {
  caught(publisher, waiter, (mutation){.weaken_acquire = 1},
         "torn ring slot");
}
END_TEST

START_TEST(drain_as_written_holds) {
  saw_closed = saw_busy = 0;
  holds(drain_rank, drain_daemon, 0);
  /* not vacuous: both sides of the handshake were seen */
  ck_assert_msg(saw_closed > 0 && saw_busy > 0, "rank saw closed in %d "
                "runs, daemon saw it busy in %d", saw_closed, saw_busy);
}
END_TEST

START_TEST(weakened_in_op_store_is_caught) {
  caught(drain_rank, drain_daemon, (mutation){.weaken_sc = 1},
         "drained while");
}
END_TEST

START_TEST(break_as_written_holds) { holds(break_daemon, break_rank, 1); }
END_TEST

START_TEST(weakened_break_release_is_caught) {
  caught(break_daemon, break_rank, (mutation){.weaken_release = 1},
         "torn break");
}
END_TEST

START_TEST(weakened_broken_acquire_is_caught) {
  caught(break_daemon, break_rank, (mutation){.weaken_acquire = 1},
         "torn break");
}
END_TEST

/* Fewer runs: each is three ops long. No mutation is shown here: a
 * reader's missing fence is covered by its next publish's wake, which
 * is the protocol's own answer (kernels/fast_sync.h, read_descs). */
START_TEST(ring_reuse_as_written_holds) {
  M.runs = 5000;
  holds(reuse_writer, reuse_reader, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fast_model");
  TCase *tc = tcase_create("protocol");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, protocol_as_written_holds);
  tcase_add_test(tc, dropped_publisher_fence_is_caught);
  tcase_add_test(tc, weakened_publish_release_is_caught);
  tcase_add_test(tc, weakened_wait_acquire_is_caught);
  tcase_add_test(tc, drain_as_written_holds);
  tcase_add_test(tc, weakened_in_op_store_is_caught);
  tcase_add_test(tc, break_as_written_holds);
  tcase_add_test(tc, weakened_break_release_is_caught);
  tcase_add_test(tc, weakened_broken_acquire_is_caught);
  tcase_add_test(tc, ring_reuse_as_written_holds);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
