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
 *   its own, from the ranks' staging areas (client_fast_plan.c), and
 *   copies its result out.
 * Reduce steps sum sources in rank order, as the daemon's mover does, so
 * the results are bitwise the same.
 *
 * Each op costs as few hand-offs of cache lines between cores as we could
 * make it (docs/performance.md): a repeated op publishes one line of its
 * descriptor; inputs of up to 16 bytes travel in the line the others
 * poll, and of up to 112 in lines tagged with their op, which the others
 * poll instead for a repeat (client_fast_lines.c); small ops alternate
 * halves of the staging, so a rank fills its input without waiting while
 * the others read the last op's; and a rank says it is done with an op by
 * its next publish.
 *
 * Waits spin briefly, then yield, then sleep on the segment's futex word;
 * the daemon marks the segment broken (and wakes everyone) when the group
 * breaks, and a waiter that sleeps long checks that the daemon is there. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_fast_internal.h"
#include "fast_sync.h"

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
  if (p == MAP_FAILED) {
    close(fd);
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
    close(fd);
    free(f);
    return spc__fail(c, SPC_EPROTOCOL, "the group's shared segment has a "
                     "foreign header (size %llu, world %d)",
                     (unsigned long long)size, g->world);
  }
  f->hdr = h;
  f->map.seg_fd = fd; /* kept: the other ranks probe it (client_fast_map.c) */
  f->size = size;
  f->stage = h->stage_bytes;
  f->staging.half = (f->stage / 2) & ~(uint64_t)127;
  f->tune = h->tune;
  spk_fast_tune_clamp(&f->tune);
  spc__fast_wait_init(f, g->world);
  spc__fast_clock_init(&f->clock);
  spk_plan_init(&f->plan, g->world);
  g->fast = f;
  spc__fast_map_init(g);
  return SPC_OK;
}

void spc__fast_detach(spc_group *g) {
  spc_fast *f = g->fast;
  if (f == NULL)
    return;
  spk_plan_free(&f->plan);
  spc__fast_map_free(f, g->world);
  spc__fast_cma_free(f);
  munmap(f->hdr, f->size);
  close(f->map.seg_fd);
  free(f);
  g->fast = NULL;
}

const spk_fseg_hdr *spc__fast_hdr(const spc_group *g) {
  return g->fast != NULL ? g->fast->hdr : NULL;
}

/* ---- running ---- */

/* Rank 0 counts the op for the daemon's stats, count last. It is the
 * counters' one writer, so each is a load and a release store: an atomic
 * add would be a locked instruction, which waits for every store before
 * it to reach the cache, on the path of every op. */
static void bump(uint64_t *word) {
  SPK_STORE(word, *word + 1, __ATOMIC_RELEASE);
}

/* A counter the daemon reads at any time, published by the bump of count
 * after it: an atomic store, no order of its own. */
static void add(uint64_t *word, uint64_t n) {
  SPK_STORE(word, *word + n, __ATOMIC_RELAXED);
}

static void count(spc_group *g, int kind, int ok, int in_place,
                  uint64_t bytes, uint64_t ns) {
  if (g->rank != 0 || kind < 0 || kind >= SPK_OP_COUNT)
    return;
  spk_fseg_counters *c = &spc__fast_rank(g->fast, 0)->counters[kind];
  if (!ok) {
    bump(&c->errors);
    return;
  }
  uint64_t us = ns / 1000;
  int b = 0;
  while (b < SPK_FSEG_HIST - 1 && us >= (1ull << b))
    b++;
  add(&c->bytes, bytes);
  add(&c->ns, ns);
  add(&c->in_place, (uint64_t)in_place);
  add(&c->lat[b], 1);
  bump(&c->count);
}

/* An op that some rank reads in place ends when every rank is done
 * reading: the owner may not give its buffers back to its caller before.
 * A rank that could not map another's buffers (skip, with its error rc)
 * says so before it says it is done, every rank fails the op, and the
 * group reads nothing in place from then on (a cause that lasts, such as
 * an fd limit, would fail every such op). */
static int read_done(spc_group *g, uint64_t s, int rc, int skip,
                     int *failed_p) {
  spc_fast *f = g->fast;
  spk_fseg_rank *me = spc__fast_rank(f, g->rank);
  *failed_p = skip;
  /* A waiter that finds the group broken and some rank not done fails at
   * once (client_fast_wait.c), so an owner may have given its buffers
   * back while this rank read them: a look at `broken` after the reads
   * tells. Unbroken then, the reads came before the break, so before any
   * owner saw it and returned. */
  if (rc == SPC_OK && !skip) {
    SPK_FENCE(__ATOMIC_SEQ_CST);
    rc = spc__fast_broken(g);
  }
  if (skip) { /* it read nothing: its maps may go now */
    f->map.cap = SPC_FAST_CAP_NO;
    spc__fast_map_free(f, g->world);
    me->fail_status = rc;
    SPK_STORE(&me->failed, s, __ATOMIC_RELEASE);
  }
  spc__fast_flush(g);
  int wrc = spc__fast_wait_all(g, FIELD(fdone), s);
  if (rc < 0 || wrc < 0)
    return rc < 0 ? rc : wrc;
  for (int r = 0; r < g->world; r++) {
    const spk_fseg_rank *a = spc__fast_rank(f, r);
    if (SPK_LOAD(&a->failed, __ATOMIC_ACQUIRE) != s)
      continue;
    /* Every rank sees this: from now on the group stages. */
    *failed_p = 1;
    f->map.cap = SPC_FAST_CAP_NO;
    spc__fast_map_free(f, g->world);
    return spc__fail(g->client, a->fail_status < 0 ? a->fail_status
                                                   : SPC_ESYSTEM,
                     "rank %d could not read the other ranks' buffers in "
                     "shared memory for this op (its error says why)", r);
  }
  return SPC_OK;
}

/* A store to a line that other cores hold waits until they have dropped
 * it, and x86 makes every later store wait for it: staging an input in
 * lines the others read last time held back the publish that follows by
 * a hand-off. Every rank published s, so is done with op s - 1, whose
 * staging half or tagged lines op s + 1 will take (the parity rules of
 * stage_in and client_fast_lines.c): this rank takes them for writing
 * now, while it runs s, up to fast_claim_bytes of them (f->tune). The
 * line the others poll stays theirs. */
static inline void claim_line(const void *p) {
#if defined(__x86_64__)
  /* An asm: the compiler drops a call that does nothing it can see. */
  __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
  __builtin_prefetch(p, 1);
#endif
}

static void claim_next(const spc_fast *f, int me, uint64_t s) {
  if (f->staging.claim_put != s || f->inplace[me])
    return;
  if (f->staging.lines[me] > 1) {
    spk_fseg_line *l = spc__fast_rank(f, me)->lines[(s + 1) & 1];
    for (int i = 0; i + 1 < f->staging.lines[me]; i++)
      claim_line(&l[i]);
  } else if (f->staging.small[me] && !f->staging.tiny[me] &&
             !f->staging.lines[me]) {
    const uint8_t *p = spc__fast_stage(f, me, SPK_T_IN, s + 1);
    uint64_t n = f->staging.claim_bytes < f->tune.fast_claim_bytes
                     ? f->staging.claim_bytes : f->tune.fast_claim_bytes;
    for (uint64_t o = 0; o < n; o += 64)
      claim_line(p + o);
  }
}

/* run: op fo->seq of the descriptors read, planned alike on every rank,
 * its moves into this rank's output done. */
static int fast_exec(spc_group *g, spc_fast_op *fo) {
  spc_fast *f = g->fast;
  uint64_t s = fo->seq;
  int mine = f->inplace[g->rank]; /* this rank's op is read in place */
  uint8_t *bases[2 * SPK_FSEG_MAXWORLD];
  int direct = 0;
  int rc = spc__fast_plan_get(g, fo->repeat);
  if (rc == SPC_OK) {
    int mrc = spc__fast_bases(g, s, fo->in, fo->out, bases, &fo->any);
    fo->skip = mrc < 0;
    rc = spc__fast_plan_run(g, s, fo->out, bases, mine, &fo->skip, &direct);
    if (rc == SPC_OK && fo->skip)
      rc = mrc;
  }
  if (rc == SPC_OK && !direct)
    memcpy(spc_tensor_data(fo->out),
           spc__fast_stage(f, g->rank, SPK_T_OUT, s),
           spc__tensor_bytes(fo->out));
  if (!mine) { /* mine: the staging was not used */
    if (f->staging.small[g->rank])
      f->staging.last_use[s & 1] = s;
    else
      f->staging.last_use[0] = f->staging.last_use[1] = s;
  }
  return rc;
}

/* done: failed or not (rc), this rank is done with every staging area
 * and every descriptor of the op: said by its next publish, or before it
 * waits (see pending); at once after a failure, which may end the group,
 * or when some rank waits for everyone to be done reading its buffers.
 * The descriptors, at once on a line of their own (read_descs). Rank 0
 * counts the op. */
static int fast_done(spc_group *g, spc_fast_op *fo, int rc) {
  spc_fast *f = g->fast;
  uint64_t s = fo->seq;
  int failed = 0;
  f->pending = s;
  spc__fast_read_descs(f->hdr, spc__fast_rank(f, g->rank), s);
  if (fo->any)
    rc = read_done(g, s, rc, fo->skip, &failed);
  else if (rc != SPC_OK)
    spc__fast_flush(g);
  /* Failures of the group (a rank lost, the op timeout, abort) are the
   * daemon's to count. */
  if (g->rank == 0 &&
      (rc == SPC_OK || rc == SPC_EMISMATCH || rc == SPC_EINVAL || failed))
    count(g, f->planned[0].op, rc == SPC_OK, fo->any, f->plan.bytes,
          spc__fast_clock_ns(&f->clock, fo->t0));
  return rc;
}

/* Copy this rank's input of the next op (s) into its staging, once
 * every rank is done with the bytes it goes to: the half of s's parity
 * when the op fits one (which the last op, of the other parity, did not
 * touch: no wait at all when ops repeat), else the whole area. */
static int stage_in(spc_group *g, const spc_tensor *in) {
  spc_fast *f = g->fast;
  uint64_t s = f->seq + 1;
  const uint64_t *last = f->staging.last_use;
  uint64_t need = f->staging.small[g->rank] ? last[s & 1]
                  : last[0] > last[1]       ? last[0]
                                            : last[1];
  if (need >= f->seen_pub) {
    int rc = spc__fast_wait_all(g, FIELD(fdone), need);
    if (rc < 0)
      return rc;
  }
  f->staging.claim_put = s;
  f->staging.claim_bytes = spc__tensor_bytes(in);
  if (f->staging.lines[g->rank] || f->staging.tiny[g->rank])
    spc__fast_lines_put(f, s, spc_tensor_data(in), f->staging.claim_bytes);
  else
    memcpy(spc__fast_stage(f, g->rank, SPK_T_IN, s), spc_tensor_data(in),
           f->staging.claim_bytes);
  return SPC_OK;
}

/* Describe op and publish it: for the others to read it in place, or
 * once its input is staged. *eligible_p: it may run here. */
static int publish_desc(spc_group *g, const spc_op *op, const spc_tensor *in,
                        const spc_tensor *out, int *eligible_p) {
  spc_fast *f = g->fast;
  spk_fseg_desc d;
  int rc;
  memset(&d, 0, sizeof(d));
  d.eligible = 1;
  spc__fast_desc_fill(&d, g, op, in, out);
  f->staging.lines[g->rank] = 0; /* until its input is staged in them */
  if (d.eligible && spc__fast_map_want(g, op->kind, in, out)) {
    spc__fast_where_fill(&d.where, in, out);
  } else if (d.eligible) {
    spc__fast_fit(f, g->rank, &d);
    if ((rc = stage_in(g, in)) < 0)
      return rc;
  }
  if ((rc = spc__fast_desc_publish(g, &d)) < 0)
    return rc;
  spc__fast_again_keep(g, op, in, out, &d);
  *eligible_p = d.eligible;
  return SPC_OK;
}

/* The same call as the last published repeat: its descriptor again. */
static int publish_again(spc_group *g, const spc_tensor *in) {
  spc_fast *f = g->fast;
  f->staging.small[g->rank] = f->again.small;
  f->staging.tiny[g->rank] = f->again.tiny;
  f->staging.lines[g->rank] = f->again.lines;
  int rc = stage_in(g, in);
  return rc < 0 ? rc : spc__fast_desc_republish(g, &f->again.d);
}

/* Whether another rank published this rank's next op to run here: an op
 * under way, which a draining daemon lets finish (its own, too: "ops
 * other ranks already started may complete"). */
static int started_by_others(const spc_group *g) {
  const spc_fast *f = g->fast;
  uint64_t s = f->seq + 1;
  for (int r = 0; r < g->world; r++) {
    const spk_fseg_rank *a = spc__fast_rank(f, r);
    if (r != g->rank &&
        SPK_LOAD(&a->published, __ATOMIC_ACQUIRE) >= s &&
        spk_fseg_fast_op(a, s))
      return 1;
  }
  return 0;
}

/* fits: whether op may run here: the same call as the last published
 * repeat (fo->again), or one that fits. A draining daemon (closed)
 * refuses new ops: through it, in its words. The ranks that read the
 * flag late still see this one's descriptor say so, and follow it to the
 * daemon. */
static int fast_fits(spc_group *g, spc_fast_op *fo) {
  spc_fast *f = g->fast;
  fo->again = 0;
  if (f == NULL || (spk_fsync_closed(f->hdr) && !started_by_others(g)))
    return 0;
  fo->again = spc__fast_again(g, fo->op, fo->in, fo->out);
  return fo->again || spc__fast_fits(f, g, fo->op->kind, fo->in, fo->out);
}

/* publish: this rank's descriptor of the op (its input staged, or named
 * for reading in place), then every rank's read. *runs_p: every rank may
 * run it here; 0: every rank takes the daemon path, its place in the
 * sequence kept (consumed). */
static int fast_publish(spc_group *g, spc_fast_op *fo, int *runs_p) {
  spc_fast *f = g->fast;
  int eligible = 1, all;
  int rc = fo->again ? publish_again(g, fo->in)
                     : publish_desc(g, fo->op, fo->in, fo->out, &eligible);
  if (rc < 0)
    return rc;
  uint64_t s = fo->seq = f->seq;
  /* Only rank 0 counts (count()): the others need no clock. Stamped
   * once published, while the others' descriptors are on their way. */
  fo->t0 = g->rank == 0 ? spc__fast_clock_stamp(&f->clock) : 0;
  *runs_p = 0;
  if (eligible) {
    if ((rc = spc__fast_wait_all(g, FIELD(published), s)) < 0)
      return rc;
    f->seen_pub = s;
    spc__fast_desc_read(f, g->world, s, &all, &fo->repeat);
    if (all)
      claim_next(f, g->rank, s);
    *runs_p = all;
  }
  if (!*runs_p)
    spc__fast_consumed(g, s);
  return SPC_OK;
}

/* fits, publish, run, done: the fast path's steps, as an engine's. */
static int run_op(spc_group *g, const spc_op *op, const spc_tensor *in,
                  const spc_tensor *out, int *handled_p) {
  spc_fast_op fo = {.op = op, .in = in, .out = out};
  *handled_p = 1;
  /* Before the fit: an op may fit only when read in place. */
  if (g->fast != NULL)
    spc__fast_map_step(g);
  if (!fast_fits(g, &fo)) {
    int rc = spc__fast_slow(g, op, in, out);
    *handled_p = rc < 0;
    return rc;
  }
  /* A broken group fails every later op too, as the daemon's does. */
  int rc = spc__fast_broken(g), runs = 0;
  if (rc == SPC_OK)
    rc = fast_publish(g, &fo, &runs);
  if (rc < 0)
    return rc;
  if (!runs) {
    *handled_p = 0;
    return SPC_OK;
  }
  return fast_done(g, &fo, fast_exec(g, &fo));
}

/* in_op brackets the op for a draining daemon (kernels/fast_seg.h): on
 * this rank's own line, which nobody polls, so the stores cost nothing
 * the others wait for. */
int spc__fast_run(spc_group *g, const spc_op *op, const spc_tensor *in,
                  const spc_tensor *out, int *handled_p) {
  spk_fseg_rank *me = g->fast ? spc__fast_rank(g->fast, g->rank) : NULL;
  if (me != NULL) /* before runs_here's look at closed */
    spk_fsync_op_enter(me);
  int rc = run_op(g, op, in, out, handled_p);
  if (me != NULL)
    spk_fsync_op_leave(me);
  return rc;
}
