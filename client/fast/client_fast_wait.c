/* The fast path's waits (see client_fast.c): spin briefly, then yield,
 * then sleep on the segment's futex word; the daemon marks the segment
 * broken (and wakes everyone) when the group breaks, and a waiter that
 * sleeps long checks that the daemon is there. */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client_fast_internal.h"
#include "fast_sync.h"

/* How long a waiter spins before yielding, and when it sleeps: the
 * policy is in client_fast_tune.h, its bounds in f->tune. The spin is
 * bounded in time, not in rounds. Halving it on any yield (rather than
 * only on one that gave the CPU away) would lock a quiet node into
 * yielding: a short spin misses, the miss shortens the spin. */
void spc__fast_wait_init(spc_fast *f, int world) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int over = cpus > 0 && world > cpus;
  f->wait.over = over;
  f->wait.spin_ns = over ? f->tune.fast_over_spin_ns
                         : f->tune.fast_spin_max_ns;
  f->wait.spin_max = f->wait.spin_ns;
  f->wait.mid_ns = over ? 0 : f->hdr->mid_spin_ns;
}

uint64_t spc__fast_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Store a counter of this rank (me) and wake whoever waits on it. */
void spc__fast_publish(spk_fseg_hdr *h, spk_fseg_rank *me, uint64_t *word,
                       uint64_t v) {
  if (spk_fsync_publish(h, me, word, v))
    syscall(SYS_futex, &h->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

void spc__fast_read_descs(spk_fseg_hdr *h, spk_fseg_rank *me, uint64_t s) {
  if (spk_fsync_read_descs(h, me, s))
    syscall(SYS_futex, &h->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Rank r published op v: its lines say so, for a repeat in lines, or
 * its polled line does. `peek`: while the lines say it is not yet, the
 * polled line is not read: reading it would take it from its writer,
 * which the next publish must take back. */
static int published(const spc_fast *f, int r, uint64_t v, int peek) {
  int st = spc__fast_lines_state(f, r, v);
  if (st == SPC_LINES_READY)
    return 1;
  if (st == SPC_LINES_NOT_YET && peek)
    return 0;
  return spk_fseg_said(spc__fast_rank(f, r), FIELD(published)) >= v;
}

static int all_at(const spc_fast *f, int world, size_t field, uint64_t v,
                  int peek) {
  for (int r = 0; r < world; r++)
    if (field == FIELD(published) ? !published(f, r, v, peek)
                                  : spk_fseg_said(spc__fast_rank(f, r),
                                                  field) < v)
      return 0;
  return 1;
}

int spc__fast_all_at_least(const spc_fast *f, int world, size_t field,
                           uint64_t v) {
  return all_at(f, world, field, v, 0);
}

void spc__fast_flush(spc_group *g) {
  spc_fast *f = g->fast;
  if (f->pending == 0)
    return;
  spk_fseg_rank *me = spc__fast_rank(f, g->rank);
  SPK_STORE(&me->consumed, f->pending, __ATOMIC_RELEASE);
  spc__fast_publish(f->hdr, me, &me->fdone, f->pending);
  f->pending = 0;
}

int spc__fast_broken(spc_group *g) {
  spk_fseg_hdr *h = g->fast->hdr;
  int st = spk_fsync_broken(h);
  if (st == 0)
    return SPC_OK;
  char m[SPK_FSEG_MSG];
  spk_fsync_broken_msg(h, m);
  /* The daemon is being replaced (upgrade.c): the connection is to end
   * as if it had gone (spc__hangup_take), so that the next op reconnects
   * even where no op of this client needs the daemon. */
  if (st == SPC_ERESTARTED)
    g->client->hangup = 1;
  return spc__fail(g->client, st, "%.*s", SPK_FSEG_MSG, m);
}

void spc__fast_leave(spc_group *g) {
  spk_fseg_hdr *h = g->fast != NULL ? g->fast->hdr : NULL;
  if (h == NULL || spk_fsync_broken(h) != 0)
    return;
  spk_fsync_break(h, SPC_ERESTARTED, "spcolld went away, and a rank of the "
                  "group left its shared segment to rejoin the new daemon");
  syscall(SYS_futex, &h->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* The daemon marks the segment broken on every failure it sees; the one
 * it cannot report is its own death, which the socket tells. Without it
 * (a restart) the segment's ops go on, since they need no daemon; a rank
 * that died meanwhile has nobody to say so, so a wait fails once the
 * daemon has been gone for the op timeout. The connection is to end
 * (c->hangup): the next op that needs the daemon reconnects. */
static int daemon_alive(spc_client *c) {
  if (!c->lost && !c->hangup) {
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    if (n <= 0 || !(p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
      return SPC_OK;
    c->hangup = 1;
  }
  uint64_t now = spc__fast_now_ns();
  if (c->gone_ns == 0)
    c->gone_ns = now;
  int64_t limit_ms = spc__op_limit_ms(c);
  if (now - c->gone_ns < (uint64_t)limit_ms * 1000000u)
    return SPC_OK;
  return spc__fail(c, SPC_ERESTARTED, "spcolld went away, and a "
                   "shared-memory op waited %lld ms (the op timeout) for the "
                   "other ranks without it", (long long)limit_ms);
}

/* Where a wait stands between its looks at the client (wait_for): the
 * poll count, the clock of its spin and first yield, its yields, and
 * whether a yield gave the CPU away. */
typedef struct {
  unsigned i, yields;
  uint64_t t0, y_first;
  int shared, relocate;
} wait_state;

/* What wait_for ends with: every rank there, or what the client must
 * look into (with its lock held): the segment broke, the futex call
 * failed (errno in err), or a sleep ran out, so the daemon may be gone. */
enum { WAIT_DONE, WAIT_BROKEN, WAIT_FUTEX, WAIT_SLEPT };

static int wait_for(spc_group *g, size_t field, uint64_t v, wait_state *st,
                    int *err);

/* The daemon's watchdog sees which ranks wait (daemon/fast/fast_watch.c).
 * The wait itself touches nothing of the client, so the client's lock is
 * released around it (spc_client_set_wait_lock); what it ends with is
 * looked into with the lock held. */
int spc__fast_wait_all(spc_group *g, size_t field, uint64_t v) {
  spk_fseg_rank *me = spc__fast_rank(g->fast, g->rank);
  if (all_at(g->fast, g->world, field, v, 1))
    return SPC_OK;
  /* Others may wait for this rank to be done as this one waits for them:
   * say so before waiting (see pending; nothing is pending while this
   * rank waits in its op's publish or reduce phase). A rank that waits
   * elsewhere (in another group, on the daemon, outside spcoll) holds
   * nobody's ring slot: read_descs said it was done with the op's
   * descriptors as the op ended. */
  spc__fast_flush(g);
  SPK_STORE(&me->waiting, 1, __ATOMIC_RELEASE);
  wait_state st = {.relocate = g->fast->wait.relocate};
  g->fast->wait.relocate = 0;
  g->fast->wait.waits++;
  int rc;
  for (;;) {
    int err = 0, released = spc__wait_release(g);
    int w = wait_for(g, field, v, &st, &err);
    if (released)
      spc__wait_take(g);
    if (w == WAIT_DONE)
      rc = SPC_OK;
    else if (w == WAIT_BROKEN)
      rc = spc__fast_broken(g);
    else if (w == WAIT_FUTEX)
      rc = spc__fail(g->client, SPC_ESYSTEM, "futex wait on the group's "
                     "shared segment failed: %s", strerror(err));
    else
      rc = daemon_alive(g->client);
    if (w == WAIT_DONE || rc < 0)
      break;
  }
  SPK_STORE(&me->waiting, 0, __ATOMIC_RELEASE);
  return rc;
}

/* The spin budget after a wait (see fast_shared_ns). */
static void adapt(spc_fast *f, int shared) {
  spc_fast_waiting *w = &f->wait;
  uint64_t least = f->tune.fast_spin_min_ns;
  if (!shared && w->spin_ns < w->spin_max)
    w->spin_ns = w->spin_ns * 2 < w->spin_max ? w->spin_ns * 2 : w->spin_max;
  else if (shared && w->spin_ns > least)
    w->spin_ns = w->spin_ns / 2 > least ? w->spin_ns / 2 : least;
}

/* One sleep on the segment's futex word (kernels/fast_sync.h), unless
 * every rank's `field` reached v. */
typedef struct {
  spc_group *g;
  size_t field;
  uint64_t v;
  long r;     /* the futex call's result, */
  int saved;  /* and its errno */
} sleep_arg;

static int sleep_look(void *p) {
  sleep_arg *a = p;
  return spc__fast_all_at_least(a->g->fast, a->g->world, a->field, a->v);
}

static void sleep_wait(void *p, uint32_t *word, uint32_t w) {
  sleep_arg *a = p;
  struct timespec ts = {0, (long)a->g->fast->tune.fast_sleep_ns};
  a->r = syscall(SYS_futex, word, FUTEX_WAIT, w, &ts, NULL, 0);
  a->saved = errno;
}

/* WAIT_DONE, WAIT_SLEPT (timed out, not done) or WAIT_FUTEX; -1 to go
 * on waiting. */
static int sleep_once(spc_group *g, size_t field, uint64_t v, int *err) {
  sleep_arg a = {g, field, v, 0, 0};
  if (spk_fsync_sleep(g->fast->hdr, sleep_look, sleep_wait, &a))
    return WAIT_DONE;
  if (a.r < 0 && a.saved != EAGAIN && a.saved != EINTR &&
      a.saved != ETIMEDOUT) {
    *err = a.saved;
    return WAIT_FUTEX;
  }
  /* The others may have got there while this rank slept (see
   * broken_unless_done). */
  if (a.r < 0 && a.saved == ETIMEDOUT)
    return all_at(g->fast, g->world, field, v, 0) ? WAIT_DONE : WAIT_SLEPT;
  return -1;
}

/* A wait that ended after a yield gave the CPU away, in a group with a
 * CPU per rank: the rank waited for was very likely placed on this CPU
 * (a wake-up put both there), where the balancer leaves hot tasks, and
 * every op would cost two switches from then on. The next wait sleeps
 * at once, so that the wake-up places this rank anew, on an idle CPU.
 * At most once in fast_relocate_waits waits: when another job holds the
 * other CPUs, sleeping does not help and costs more than yielding. */
static void relocate_next(spc_fast *f, int shared) {
  if (shared && !f->wait.over &&
      f->wait.waits - f->wait.relocated_at >= f->tune.fast_relocate_waits) {
    f->wait.relocate = 1;
    f->wait.relocated_at = f->wait.waits;
  }
}

/* The group broke, but maybe after every rank got where this one waits
 * for them to be: a rank that finished the op and left the group breaks
 * it, and this rank may have looked at the counters before that rank's
 * last publish and at `broken` after its leave. The daemon marks the
 * segment broken after what broke it, so one more look, reading every
 * polled line, sees what the ranks published before: the op ends well
 * on every rank, and the break fails the next. */
static int broken_unless_done(spc_group *g, size_t field, uint64_t v) {
  return SPK_LOAD(&g->fast->hdr->broken, __ATOMIC_ACQUIRE) != 0 &&
         !all_at(g->fast, g->world, field, v, 0);
}

/* Wait until every rank's counter `field` reaches v: spin (cheap when the
 * other ranks run on other cores), yield (when they share ours), then
 * sleep on the futex word that every publish bumps. Touches only g's
 * segment and its waiting state, never the client. */
static int wait_for(spc_group *g, size_t field, uint64_t v, wait_state *st,
                    int *err) {
  spc_fast *f = g->fast;
  const spk_fast_tune *t = &f->tune;
  /* The clock is read from the 16th poll on: most waits end before, and
   * a read costs as much as a round trip between two cores. */
  for (;; st->i++) {
    /* While spinning, the polled line of a rank whose input of the plan
     * travels in lines is read one poll in 16 (see published()). */
    if (all_at(f, g->world, field, v, st->yields == 0 && (st->i & 15) != 15)) {
      adapt(f, st->shared);
      relocate_next(f, st->shared);
      return WAIT_DONE;
    }
    if (broken_unless_done(g, field, v))
      return WAIT_BROKEN;
    if (st->i == 16)
      st->t0 = spc__fast_now_ns();
    if (!st->relocate && st->yields == 0 && f->wait.spin_ns > 0 &&
        (st->i <= 16 || (st->i & 15) != 0 ||
         spc__fast_now_ns() - st->t0 < f->wait.spin_ns)) {
      __builtin_ia32_pause();
      continue;
    }
    uint64_t y0 = spc__fast_now_ns();
    if (st->yields == 0)
      st->y_first = y0;
    if (!st->relocate && (f->wait.over ? y0 - st->y_first < t->fast_over_yield_ns
                                       : st->yields < t->fast_yield_polls)) {
      st->yields++;
      sched_yield();
      st->shared |= spc__fast_now_ns() - y0 > t->fast_shared_ns;
      continue;
    }
    int w = sleep_once(g, field, v, err);
    if (w >= 0) {
      st->i++;
      return w;
    }
  }
}

/* The budget doubles after an answer found while polling and halves
 * after one that was not (the op was long, or the daemon shares our CPU),
 * between fast_spin_min_ns and the daemon's mid_spin_ns. */
void spc__fast_await(spc_group *g, const spc_request *req) {
  spc_fast *f = g->fast;
  if (f == NULL || f->wait.mid_ns == 0)
    return;
  const spk_fseg_rank *me = spc__fast_rank(f, g->rank);
  uint64_t max = f->hdr->mid_spin_ns, t0 = spc__fast_now_ns();
  for (unsigned i = 0;; i++) {
    if (SPK_LOAD(&me->answered, __ATOMIC_ACQUIRE) >= req->id) {
      f->wait.mid_ns = f->wait.mid_ns * 2 < max ? f->wait.mid_ns * 2 : max;
      return;
    }
    if ((i & 15) == 0 && spc__fast_now_ns() - t0 >= f->wait.mid_ns) {
      uint64_t half = f->wait.mid_ns / 2;
      uint64_t least = f->tune.fast_spin_min_ns;
      f->wait.mid_ns = half > least ? half : least;
      return;
    }
    __builtin_ia32_pause();
  }
}
