/* The shared-memory fast path (see client_fast.h and kernels/fast_seg.h).
 *
 * Every op of a group with a segment takes the next sequence number s, on
 * both paths, and each rank publishes its descriptor of s in its ring:
 * - a rank that cannot run s here (spc_start, device memory, too big)
 *   publishes "not eligible" and goes to the daemon at once;
 * - a rank that can copies its input into its staging area first, then
 *   publishes, and reads every rank's descriptor of s. If one is not
 *   eligible, it goes to the daemon too: the ranks decide alike, so the
 *   daemon sees the same ops in the same order on every rank. Otherwise
 *   every rank builds the plan from the same descriptors with the same
 *   planners (so a disagreement fails alike on every rank, in the
 *   daemon's words), runs the reduce steps and moves whose destination is
 *   its own, from the ranks' staging areas, and copies its result out.
 * Reduce steps sum sources in rank order, as the daemon's mover does, so
 * the results are bitwise the same.
 *
 * Waits spin briefly, then yield, then sleep on the segment's futex word;
 * the daemon marks the segment broken (and wakes everyone) when the group
 * breaks, and a waiter that sleeps long checks that the daemon is there. */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client_fast.h"
#include "fast_seg.h"
#include "planner.h"

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

typedef struct spc_fast {
  spk_fseg_hdr *hdr;
  uint64_t size;
  uint64_t stage;               /* the layout, as checked at attach */
  uint64_t seq;                 /* last sequence number this rank took */
  uint64_t last_fast;           /* last one that ran here */
  uint64_t spin_ns, spin_max;   /* wait_for's budget (see SPIN_MIN_NS) */
  uint64_t mid_ns;              /* spc__fast_await's budget, adapted like
                                 * spin_ns up to the daemon's mid_spin_ns */
  unsigned yield;
  spk_fseg_desc descs[SPK_FSEG_MAXWORLD]; /* every rank's, for planning */
  spk_plan plan;
  /* The descriptors plan was built from (seq zeroed); plan_ok: it built.
   * Trainers repeat the same ops, so most ops reuse the plan. */
  spk_fseg_desc planned[SPK_FSEG_MAXWORLD];
  int plan_ok;
} spc_fast;

/* ---- attach ---- */

int spc__fast_attach(spc_group *g, int fd, uint64_t size) {
  spc_client *c = g->client;
  if (fd < 0)
    return spc__fail(c, SPC_EPROTOCOL, "group_joined announced a shared "
                     "segment of %llu bytes but no descriptor came with it",
                     (unsigned long long)size);
  spc_fast *f = calloc(1, sizeof(*f));
  if (f == NULL) {
    close(fd);
    return spc__fail(c, SPC_ENOMEM, "calloc of %zu bytes failed", sizeof(*f));
  }
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int saved = errno;
  close(fd);
  if (p == MAP_FAILED) {
    free(f);
    return spc__fail(c, SPC_ESYSTEM, "mmap of the group's shared segment "
                     "(%llu bytes) failed: %s", (unsigned long long)size,
                     strerror(saved));
  }
  spk_fseg_hdr *h = p;
  if (size < sizeof(*h) || h->magic != SPK_FSEG_MAGIC ||
      h->version != SPK_FSEG_VERSION || h->size != size ||
      h->world != (uint32_t)g->world || h->world > SPK_FSEG_MAXWORLD ||
      h->ring != SPK_FSEG_RING || h->stage_bytes > size ||
      spk_fseg_size(g->world, h->stage_bytes) != size) {
    munmap(p, size);
    free(f);
    return spc__fail(c, SPC_EPROTOCOL, "the group's shared segment has a "
                     "foreign header (size %llu, world %d)",
                     (unsigned long long)size, g->world);
  }
  f->hdr = h;
  f->size = size;
  f->stage = h->stage_bytes;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int over = cpus > 0 && g->world > cpus;
  f->spin_ns = over ? OVER_SPIN_NS : SPIN_MAX_NS;
  f->spin_max = over ? OVER_SPIN_NS : SPIN_MAX_NS;
  f->yield = over ? OVER_YIELD_POLLS : YIELD_POLLS;
  f->mid_ns = over ? 0 : h->mid_spin_ns;
  spk_plan_init(&f->plan, g->world);
  g->fast = f;
  return SPC_OK;
}

void spc__fast_detach(spc_group *g) {
  spc_fast *f = g->fast;
  if (f == NULL)
    return;
  spk_plan_free(&f->plan);
  munmap(f->hdr, f->size);
  free(f);
  g->fast = NULL;
}

/* ---- waiting ---- */

static uint64_t now_ns(void) {
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
static void publish(spk_fseg_hdr *h, spk_fseg_rank *me, uint64_t *word,
                    uint64_t v) {
  __atomic_store_n(word, v, __ATOMIC_RELEASE);
  __atomic_add_fetch(&me->progress, 1, __ATOMIC_RELEASE);
  wake(h);
}

/* Every rank's counter at byte `field` of its area is at least v? */
static int all_at_least(const spc_fast *f, int world, size_t field,
                        uint64_t v) {
  for (int r = 0; r < world; r++) {
    const uint8_t *a = (const uint8_t *)spk_fseg_rank_of(f->hdr, f->stage, r);
    if (__atomic_load_n((const uint64_t *)(a + field), __ATOMIC_ACQUIRE) < v)
      return 0;
  }
  return 1;
}

static int broken(spc_group *g) {
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
static int wait_all(spc_group *g, size_t field, uint64_t v) {
  spk_fseg_rank *me = spk_fseg_rank_of(g->fast->hdr, g->fast->stage, g->rank);
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
  uint64_t t0 = now_ns();
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
    if ((rc = broken(g)) < 0)
      return rc;
    if (yields == 0 && ((i & 15) != 0 || now_ns() - t0 < f->spin_ns)) {
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

const spk_fseg_hdr *spc__fast_hdr(const spc_group *g) {
  return g->fast != NULL ? g->fast->hdr : NULL;
}

/* The budget doubles after an answer found while polling and halves
 * after one that was not (the op was long, or the daemon shares our CPU),
 * between SPIN_MIN_NS and the daemon's mid_spin_ns. */
void spc__fast_await(spc_group *g, const spc_request *req) {
  spc_fast *f = g->fast;
  if (f == NULL || f->mid_ns == 0)
    return;
  const spk_fseg_rank *me = spk_fseg_rank_of(f->hdr, f->stage, g->rank);
  uint64_t max = f->hdr->mid_spin_ns, t0 = now_ns();
  for (unsigned i = 0;; i++) {
    if (__atomic_load_n(&me->answered, __ATOMIC_ACQUIRE) >= req->id) {
      f->mid_ns = f->mid_ns * 2 < max ? f->mid_ns * 2 : max;
      return;
    }
    if ((i & 15) == 0 && now_ns() - t0 >= f->mid_ns) {
      f->mid_ns = f->mid_ns / 2 > SPIN_MIN_NS ? f->mid_ns / 2 : SPIN_MIN_NS;
      return;
    }
    __builtin_ia32_pause();
  }
}

#define FIELD(name) offsetof(spk_fseg_rank, name)

/* ---- descriptors ---- */

static uint64_t tensor_bytes(const spc_tensor *t) {
  uint64_t n = spc_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim; i++)
    n *= (uint64_t)t->shape[i];
  return n;
}

/* b is one of c's own buffers (spc_buffer_alloc), not a record made by
 * hand for memory the daemon may know under another client. */
static int buffer_own(const spc_client *c, const spc_buffer *b) {
  for (const spc_buffer *x = c->buffers; x != NULL; x = x->next)
    if (x == b)
      return 1;
  return 0;
}

/* Host memory of this client's own buffers, inside, aligned, within the
 * staging size; in and out apart, or the very same bytes for all_reduce.
 * Anything else is the daemon's to judge (and to refuse in its own
 * words). */
static int tensors_fit(const spc_fast *f, const spc_client *c, int kind,
                       const spc_tensor *in, const spc_tensor *out) {
  const spc_tensor *ts[2] = {in, out};
  uint64_t n[2];
  if (kind < 0 || kind >= SPK_OP_COUNT)
    return 0;
  uint64_t limit = f->hdr->op_bytes[kind] < f->stage ? f->hdr->op_bytes[kind]
                                                    : f->stage;
  for (int i = 0; i < 2; i++) {
    const spc_tensor *t = ts[i];
    size_t es = spc_dtype_size(t->dtype);
    n[i] = tensor_bytes(t);
    if (!buffer_own(c, t->buf) || t->buf->gpu != NULL || es == 0 || t->offset % es != 0 ||
        t->ndim < 1 || t->ndim > SPC_MAX_DIMS ||
        n[i] > limit || t->offset > t->buf->size ||
        n[i] > t->buf->size - t->offset)
      return 0;
    for (int d = 0; d < t->ndim; d++)
      if (t->shape[d] < 0)
        return 0;
  }
  if (in->buf != out->buf)
    return 1;
  int same = in->offset == out->offset && n[0] == n[1];
  int apart = in->offset + n[0] <= out->offset ||
              out->offset + n[1] <= in->offset;
  return (same && kind == SPK_OP_ALL_REDUCE) || apart || n[0] == 0 ||
         n[1] == 0;
}

static void desc_fill(spk_fseg_desc *d, const spc_group *g, const spc_op *op,
                      const spc_tensor *in, const spc_tensor *out) {
  int ns = op->sizes ? (op->nsizes ? op->nsizes : g->world) : 0;
  int ns2 = op->sizes2 ? (op->nsizes2 ? op->nsizes2 : g->world) : 0;
  d->op = op->kind;
  d->dtype = (uint32_t)in->dtype;
  d->flags = op->flags;
  d->ndims = op->ndims;
  d->dims[0] = op->dims[0], d->dims[1] = op->dims[1];
  d->scalar = op->scalar;
  d->in_ndim = in->ndim, d->out_ndim = out->ndim;
  memcpy(d->in_shape, in->shape, sizeof(d->in_shape));
  memcpy(d->out_shape, out->shape, sizeof(d->out_shape));
  d->nsizes = ns < 0 || ns > SPK_FSEG_MAXLIST ? -1 : ns;
  d->nsizes2 = ns2 < 0 || ns2 > SPK_FSEG_MAXLIST ? -1 : ns2;
  if (d->nsizes > 0)
    memcpy(d->sizes, op->sizes, (size_t)ns * sizeof(int64_t));
  if (d->nsizes2 > 0)
    memcpy(d->sizes2, op->sizes2, (size_t)ns2 * sizeof(int64_t));
  /* A dtype the client does not know, or lists too long for the ring,
   * are for the daemon. */
  if (d->nsizes < 0 || d->nsizes2 < 0 || in->dtype != out->dtype)
    d->eligible = 0;
}

static void args_of(const spk_fseg_desc *d, spk_op_args *a) {
  memset(a, 0, sizeof(*a));
  a->op = (spk_op_kind)d->op;
  a->dtype = (spk_dtype)d->dtype;
  a->in.ndim = d->in_ndim;
  a->out.ndim = d->out_ndim;
  memcpy(a->in.dim, d->in_shape, sizeof(a->in.dim));
  memcpy(a->out.dim, d->out_shape, sizeof(a->out.dim));
  a->ndims = d->ndims;
  a->dims[0] = d->dims[0], a->dims[1] = d->dims[1];
  a->nsizes = d->nsizes;
  a->sizes = d->nsizes ? d->sizes : NULL;
  a->nsizes2 = d->nsizes2;
  a->sizes2 = d->nsizes2 ? d->sizes2 : NULL;
  a->scalar = d->scalar;
  a->flags = d->flags;
}

/* Take the next sequence number and publish d under it. The ring slot is
 * free once every rank has read the descriptor it held. */
static int desc_publish(spc_group *g, spk_fseg_desc *d) {
  spc_fast *f = g->fast;
  uint64_t s = f->seq + 1;
  if (s > SPK_FSEG_RING) {
    int rc = wait_all(g, FIELD(consumed), s - SPK_FSEG_RING);
    if (rc < 0)
      return rc;
  }
  spk_fseg_rank *me = spk_fseg_rank_of(f->hdr, f->stage, g->rank);
  d->seq = s;
  me->ring[s % SPK_FSEG_RING] = *d;
  f->seq = s;
  publish(f->hdr, me, &me->published, s);
  return SPC_OK;
}

int spc__fast_slow(spc_group *g, const spc_op *op, const spc_tensor *in,
                   const spc_tensor *out) {
  if (g->fast == NULL)
    return SPC_OK;
  spk_fseg_desc d;
  memset(&d, 0, sizeof(d));
  if (op != NULL && in != NULL && out != NULL)
    desc_fill(&d, g, op, in, out);
  d.eligible = 0;
  int rc = desc_publish(g, &d);
  if (rc == SPC_OK) /* it reads nobody's descriptor of this op */
    publish(g->fast->hdr, spk_fseg_rank_of(g->fast->hdr, g->fast->stage, g->rank),
            &spk_fseg_rank_of(g->fast->hdr, g->fast->stage, g->rank)->consumed, g->fast->seq);
  return rc;
}

/* ---- running ---- */

static uint64_t block_bytes(const spk_move *m) {
  uint64_t n = 1;
  for (int i = 0; i < m->nd; i++)
    n *= m->len[i];
  return n;
}

/* A plan of moves alone that read only inputs: no rank reads another's
 * output, so each rank's moves can write straight into its caller's
 * output, without staging it. */
static int plan_direct(const spk_plan *p) {
  if (p->nreduces > 0)
    return 0;
  for (size_t i = 0; i < p->nmoves; i++)
    if (p->moves[i].src_t != SPK_T_IN)
      return 0;
  return 1;
}

/* A small all_reduce: each rank runs every reduce step of the plan into
 * its own output (the steps' blocks of rank d's output are the same
 * bytes of every rank's), instead of its own pieces, a barrier, then
 * copies of the others' pieces. w times the adds, but one phase and no
 * staged output; the sums are the same steps in the same rank order, so
 * bitwise the mover's. */
#define REPLICATE_BYTES (64u << 10)
static int plan_replicated(const spc_group *g, const spk_plan *p,
                           const spc_tensor *out) {
  return g->fast->descs[0].op == SPK_OP_ALL_REDUCE &&
         p->scale == SPK_SCALE_NONE &&
         tensor_bytes(out) * (uint64_t)g->world <= REPLICATE_BYTES;
}

static void run_replicated(spc_group *g, const spc_tensor *out) {
  spc_fast *f = g->fast;
  spk_plan *p = &f->plan;
  uint8_t *bases[2 * SPK_FSEG_MAXWORLD];
  for (int r = 0; r < g->world; r++) {
    bases[r * SPK_T_COUNT + SPK_T_IN] =
        spk_fseg_stage_of(f->hdr, f->stage, r, SPK_T_IN);
    bases[r * SPK_T_COUNT + SPK_T_OUT] = spc_tensor_data(out);
  }
  for (size_t i = 0; i < p->nreduces; i++)
    spk_reduce_exec(p, &p->reduces[i], bases, 0,
                    spk_move_units(&p->reduces[i].geo));
}

/* The plan's steps that write this rank's output: reduce steps, then
 * (once every rank's reduce steps are done, as moves may read them)
 * moves; on the staging areas, or into the caller's output when the plan
 * is direct (*direct_p). Bytes of the output that no step writes keep
 * what the caller's output held (a packed gather leaves the tail past
 * its sequences), so when staged, those are staged too. */
static int plan_run(spc_group *g, uint64_t s, const spc_tensor *out,
                    int *direct_p) {
  spc_fast *f = g->fast;
  spk_plan *p = &f->plan;
  uint32_t me = (uint32_t)g->rank;
  if (plan_replicated(g, p, out)) {
    run_replicated(g, out);
    *direct_p = 1;
    return SPC_OK;
  }
  uint8_t *bases[2 * SPK_FSEG_MAXWORLD];
  for (int r = 0; r < g->world; r++)
    for (int t = 0; t < SPK_T_COUNT; t++)
      bases[r * SPK_T_COUNT + t] = spk_fseg_stage_of(f->hdr, f->stage, r, t);
  *direct_p = plan_direct(p);
  if (*direct_p) {
    bases[me * SPK_T_COUNT + SPK_T_OUT] = spc_tensor_data(out);
  } else {
    uint64_t covered = 0;
    for (size_t i = 0; i < p->nreduces; i++)
      if (p->reduces[i].geo.dst_rank == me)
        covered += block_bytes(&p->reduces[i].geo);
    for (size_t i = 0; i < p->nmoves; i++)
      if (p->moves[i].dst_rank == me)
        covered += block_bytes(&p->moves[i]);
    /* Nobody reads this rank's staged output before its reduce steps are
     * done (the barrier below), so it is free to fill now. */
    if (covered < tensor_bytes(out))
      memcpy(spk_fseg_stage_of(f->hdr, f->stage, g->rank, SPK_T_OUT),
             spc_tensor_data(out), tensor_bytes(out));
  }
  for (size_t i = 0; i < p->nreduces; i++)
    if (p->reduces[i].geo.dst_rank == me)
      spk_reduce_exec(p, &p->reduces[i], bases, 0,
                      spk_move_units(&p->reduces[i].geo));
  if (p->nreduces > 0 && p->nmoves > 0) {
    spk_fseg_rank *mine = spk_fseg_rank_of(f->hdr, f->stage, g->rank);
    publish(f->hdr, mine, &mine->reduced, s);
    int rc = wait_all(g, FIELD(reduced), s);
    if (rc < 0)
      return rc;
  }
  for (size_t i = 0; i < p->nmoves; i++)
    if (p->moves[i].dst_rank == me)
      spk_move_exec(p, &p->moves[i], bases, 0, spk_move_units(&p->moves[i]));
  return SPC_OK;
}

/* Rank 0 counts the op for the daemon's stats, count last. */
static void count(spc_group *g, int kind, int ok, uint64_t bytes,
                  uint64_t ns) {
  if (g->rank != 0 || kind < 0 || kind >= SPK_OP_COUNT)
    return;
  spk_fseg_counters *c = &spk_fseg_rank_of(g->fast->hdr, g->fast->stage, 0)->counters[kind];
  if (!ok) {
    __atomic_add_fetch(&c->errors, 1, __ATOMIC_RELEASE);
    return;
  }
  uint64_t us = ns / 1000;
  int b = 0;
  while (b < SPK_FSEG_HIST - 1 && us >= (1ull << b))
    b++;
  c->bytes += bytes;
  c->ns += ns;
  c->lat[b]++;
  __atomic_add_fetch(&c->count, 1, __ATOMIC_RELEASE);
}

/* Every rank published an eligible descriptor of s: plan it and run this
 * rank's share. */
/* The plan of the descriptors in f->descs: the last one when every rank
 * asked for the same op as then (a plan depends on nothing else), else a
 * new one. Descriptors are zeroed before they are filled, so equal ops
 * compare equal bytewise. */
static int plan_get(spc_group *g) {
  spc_fast *f = g->fast;
  int same = f->plan_ok;
  for (int r = 0; r < g->world; r++) {
    spk_fseg_desc d = f->descs[r];
    d.seq = 0;
    same = same && memcmp(&d, &f->planned[r], sizeof(d)) == 0;
    f->planned[r] = d;
  }
  if (same)
    return SPC_OK;
  spk_op_args args[SPK_FSEG_MAXWORLD];
  const spk_op_args *ap[SPK_FSEG_MAXWORLD];
  for (int r = 0; r < g->world; r++) {
    args_of(&f->descs[r], &args[r]);
    ap[r] = &args[r];
  }
  spk_plan_free(&f->plan);
  spk_plan_init(&f->plan, g->world);
  spk_err err;
  int rc = spk_plan_build(ap, g->world, &f->plan, &err);
  f->plan_ok = rc == SPK_OK;
  return rc < 0 ? spc__fail(g->client, rc, "%s", err.msg) : SPC_OK;
}

static int fast_exec(spc_group *g, uint64_t s, const spc_tensor *out,
                     uint64_t t0) {
  spc_fast *f = g->fast;
  int direct = 0;
  int rc = plan_get(g);
  if (rc == SPC_OK)
    rc = plan_run(g, s, out, &direct);
  if (rc == SPC_OK && !direct)
    memcpy(spc_tensor_data(out), spk_fseg_stage_of(f->hdr, f->stage, g->rank, SPK_T_OUT),
           tensor_bytes(out));
  f->last_fast = s;
  spk_fseg_rank *me = spk_fseg_rank_of(f->hdr, f->stage, g->rank);
  /* Failed or not, this rank is done with every staging area. */
  publish(f->hdr, me, &me->fdone, s);
  if (rc == SPC_OK || rc == SPC_EMISMATCH || rc == SPC_EINVAL)
    count(g, f->descs[0].op, rc == SPC_OK, f->plan.bytes, now_ns() - t0);
  return rc;
}

int spc__fast_run(spc_group *g, const spc_op *op, const spc_tensor *in,
                  const spc_tensor *out, int *handled_p) {
  spc_fast *f = g->fast;
  *handled_p = 1;
  /* A draining daemon refuses new ops: through it, in its words. The
   * ranks that read the flag late still see this one's descriptor say so,
   * and follow it to the daemon. */
  if (f == NULL || __atomic_load_n(&f->hdr->closed, __ATOMIC_ACQUIRE) ||
      !tensors_fit(f, g->client, op->kind, in, out)) {
    int rc = spc__fast_slow(g, op, in, out);
    *handled_p = rc < 0;
    return rc;
  }
  /* A broken group fails every later op too, as the daemon's does. */
  int rc = broken(g);
  if (rc < 0)
    return rc;
  uint64_t t0 = now_ns();
  spk_fseg_desc d;
  memset(&d, 0, sizeof(d));
  d.eligible = 1;
  desc_fill(&d, g, op, in, out);
  if (d.eligible) {
    /* The staging areas are free once every rank finished the last op
     * that used them. */
    if ((rc = wait_all(g, FIELD(fdone), f->last_fast)) < 0)
      return rc;
    memcpy(spk_fseg_stage_of(f->hdr, f->stage, g->rank, SPK_T_IN), spc_tensor_data(in),
           tensor_bytes(in));
  }
  if ((rc = desc_publish(g, &d)) < 0)
    return rc;
  uint64_t s = f->seq;
  if (!d.eligible) {
    publish(f->hdr, spk_fseg_rank_of(f->hdr, f->stage, g->rank),
            &spk_fseg_rank_of(f->hdr, f->stage, g->rank)->consumed, s);
    *handled_p = 0;
    return SPC_OK;
  }
  if ((rc = wait_all(g, FIELD(published), s)) < 0)
    return rc;
  int all = 1;
  for (int r = 0; r < g->world; r++) {
    f->descs[r] = spk_fseg_rank_of(f->hdr, f->stage, r)->ring[s % SPK_FSEG_RING];
    all &= f->descs[r].eligible == 1 && f->descs[r].seq == s;
  }
  publish(f->hdr, spk_fseg_rank_of(f->hdr, f->stage, g->rank),
          &spk_fseg_rank_of(f->hdr, f->stage, g->rank)->consumed, s);
  if (!all) {
    *handled_p = 0;
    return SPC_OK;
  }
  return fast_exec(g, s, out, t0);
}
