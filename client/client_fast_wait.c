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

/* How long a waiter spins before yielding, and sched_yield rounds before
 * it sleeps. The spin is bounded in time, not in rounds, and adapts
 * between SPIN_MIN_NS and SPIN_MAX_NS: a wait that ends while spinning
 * doubles it (the others run on other CPUs: a long spin keeps the round
 * trip near a microsecond, as busy-polling MPI does), a wait that had to
 * yield halves it (the rank waited for shares this CPU, because another
 * job holds the other one: every round of spin delays it). When the group
 * has more ranks than the node has CPUs, that is the rule, so a waiter
 * yields and sleeps almost at once (OVER_*). */
#define SPIN_MIN_NS 1000
#define SPIN_MAX_NS 100000
#define YIELD_POLLS 16
#define OVER_SPIN_NS 500
#define OVER_YIELD_POLLS 2
#define SLEEP_NS 200000000L /* futex sleep between checks of the daemon */

void spc__fast_wait_init(spc_fast *f, int world) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int over = cpus > 0 && world > cpus;
  f->spin_ns = over ? OVER_SPIN_NS : SPIN_MAX_NS;
  f->spin_max = over ? OVER_SPIN_NS : SPIN_MAX_NS;
  f->yield = over ? OVER_YIELD_POLLS : YIELD_POLLS;
  f->mid_ns = over ? 0 : f->hdr->mid_spin_ns;
}

uint64_t spc__fast_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void wake(spk_fseg_hdr *h) {
  __atomic_add_fetch(&h->wake, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&h->sleepers, __ATOMIC_SEQ_CST) != 0)
    syscall(SYS_futex, &h->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Store a counter of this rank (me) and wake whoever waits on it. */
void spc__fast_publish(spk_fseg_hdr *h, spk_fseg_rank *me, uint64_t *word,
                       uint64_t v) {
  __atomic_store_n(word, v, __ATOMIC_RELEASE);
  __atomic_add_fetch(&me->progress, 1, __ATOMIC_RELEASE);
  wake(h);
}

/* Every rank's counter at byte `field` of its area is at least v? */
static int all_at_least(const spc_fast *f, int world, size_t field,
                        uint64_t v) {
  for (int r = 0; r < world; r++) {
    const uint8_t *a = (const uint8_t *)spc__fast_rank(f, r);
    if (__atomic_load_n((const uint64_t *)(a + field), __ATOMIC_ACQUIRE) < v)
      return 0;
  }
  return 1;
}

int spc__fast_broken(spc_group *g) {
  spk_fseg_hdr *h = g->fast->hdr;
  int st = __atomic_load_n(&h->broken, __ATOMIC_ACQUIRE);
  if (st == 0)
    return SPC_OK;
  return spc__fail(g->client, st, "%s", h->broken_msg);
}

/* The daemon marks the segment broken on every failure it sees; the one
 * it cannot report is its own death, which the socket tells. */
static int daemon_alive(spc_client *c) {
  struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
  int n = poll(&p, 1, 0);
  if (n > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
    return spc__fail(c, SPC_ECONNECTION, "spcolld closed the connection "
                     "while a shared-memory op waited");
  return SPC_OK;
}

/* Wait until every rank's counter `field` reaches v: spin (cheap when the
 * other ranks run on other cores), yield (when they share ours), then
 * sleep on the futex word that every publish bumps. */
static int wait_for(spc_group *g, size_t field, uint64_t v);

/* The daemon's watchdog sees which ranks wait (see group_seg.c). */
int spc__fast_wait_all(spc_group *g, size_t field, uint64_t v) {
  spk_fseg_rank *me = spc__fast_rank(g->fast, g->rank);
  if (all_at_least(g->fast, g->world, field, v))
    return SPC_OK;
  __atomic_store_n(&me->waiting, 1, __ATOMIC_RELEASE);
  int rc = wait_for(g, field, v);
  __atomic_store_n(&me->waiting, 0, __ATOMIC_RELEASE);
  return rc;
}

static int wait_for(spc_group *g, size_t field, uint64_t v) {
  spc_fast *f = g->fast;
  spk_fseg_hdr *h = f->hdr;
  int rc;
  uint64_t t0 = spc__fast_now_ns();
  unsigned yields = 0;
  for (unsigned i = 0;; i++) {
    if (all_at_least(f, g->world, field, v)) {
      if (yields == 0 && f->spin_ns < f->spin_max)
        f->spin_ns = f->spin_ns * 2 < f->spin_max ? f->spin_ns * 2
                                                  : f->spin_max;
      else if (yields > 0 && f->spin_ns > SPIN_MIN_NS)
        f->spin_ns = f->spin_ns / 2 > SPIN_MIN_NS ? f->spin_ns / 2
                                                  : SPIN_MIN_NS;
      return SPC_OK;
    }
    if ((rc = spc__fast_broken(g)) < 0)
      return rc;
    if (yields == 0 &&
        ((i & 15) != 0 || spc__fast_now_ns() - t0 < f->spin_ns)) {
      __builtin_ia32_pause();
      continue;
    }
    if (yields < f->yield) {
      yields++;
      sched_yield();
      continue;
    }
    uint32_t w = __atomic_load_n(&h->wake, __ATOMIC_SEQ_CST);
    if (all_at_least(f, g->world, field, v))
      return SPC_OK;
    __atomic_add_fetch(&h->sleepers, 1, __ATOMIC_SEQ_CST);
    struct timespec ts = {0, SLEEP_NS};
    long r = syscall(SYS_futex, &h->wake, FUTEX_WAIT, w, &ts, NULL, 0);
    int saved = errno;
    __atomic_sub_fetch(&h->sleepers, 1, __ATOMIC_SEQ_CST);
    if (r < 0 && saved != EAGAIN && saved != EINTR && saved != ETIMEDOUT)
      return spc__fail(g->client, SPC_ESYSTEM, "futex wait on the group's "
                       "shared segment failed: %s", strerror(saved));
    if (r < 0 && saved == ETIMEDOUT && (rc = daemon_alive(g->client)) < 0)
      return rc;
  }
}

/* The budget doubles after an answer found while polling and halves
 * after one that was not (the op was long, or the daemon shares our CPU),
 * between SPIN_MIN_NS and the daemon's mid_spin_ns. */
void spc__fast_await(spc_group *g, const spc_request *req) {
  spc_fast *f = g->fast;
  if (f == NULL || f->mid_ns == 0)
    return;
  const spk_fseg_rank *me = spc__fast_rank(f, g->rank);
  uint64_t max = f->hdr->mid_spin_ns, t0 = spc__fast_now_ns();
  for (unsigned i = 0;; i++) {
    if (__atomic_load_n(&me->answered, __ATOMIC_ACQUIRE) >= req->id) {
      f->mid_ns = f->mid_ns * 2 < max ? f->mid_ns * 2 : max;
      return;
    }
    if ((i & 15) == 0 && spc__fast_now_ns() - t0 >= f->mid_ns) {
      f->mid_ns = f->mid_ns / 2 > SPIN_MIN_NS ? f->mid_ns / 2 : SPIN_MIN_NS;
      return;
    }
    __builtin_ia32_pause();
  }
}
