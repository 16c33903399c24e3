/* Fast-path steps that read another rank's caller memory (spc_buffer_wrap;
 * client_fast_map.c names it in f->map.remote): the kernel's cross-memory
 * attach, process_vm_readv, as Open MPI's single-copy CMA transport does.
 * A plain copy reads straight into this rank's output, its runs (the
 * rows of a strided step) paired as iovecs: one copy, as a mapped buffer
 * gives. A step that scales or reduces reads its remote sources into
 * f->map.scratch in pieces small enough to stay in the cache, then runs from
 * there with the plan's own executor. Each piece lands in the scratch at
 * the address that matches its source's alignment to 64 bytes (kAlign):
 * the kernel's copy runs at a fraction of its rate when source and
 * destination differ there.
 *
 * The owner cannot give its memory back to its caller before every rank
 * is done reading (client_fast.c, read_done), so an address it named
 * stays valid for the op. A read that fails (the owner named memory it
 * does not have, or died) fails the op on every rank, as an unmappable
 * buffer does, and the group stops reading in place. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "client_fast_internal.h"


static int cma_read(spc_group *g, int r, uint8_t *dst, uint64_t from,
                    uint64_t n) {
  while (n > 0) {
    struct iovec local = {dst, n};
    struct iovec remote = {(void *)(uintptr_t)from, n};
    ssize_t k = process_vm_readv(g->fast->map.pid[r], &local, 1, &remote, 1, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return spc__fail(g->client, SPC_ESYSTEM, "process_vm_readv of %llu "
                       "bytes at 0x%llx in rank %d (pid %d) failed: %s",
                       (unsigned long long)n, (unsigned long long)from, r,
                       (int)g->fast->map.pid[r],
                       k < 0 ? strerror(errno) : "it read nothing");
    dst += k;
    from += (uint64_t)k;
    n -= (uint64_t)k;
  }
  return SPC_OK;
}

enum { kAlign = 64 };

/* The first address from `at` on that is aligned to kAlign as `from` is.
 * A piece read there needs kAlign - 1 bytes of slack after at. */
static uint8_t *matched(uint8_t *at, uint64_t from) {
  return at + ((from - (uint64_t)(uintptr_t)at) & (kAlign - 1));
}

/* At least n bytes of scratch, aligned to kAlign. */
static int scratch_fit(spc_group *g, size_t n) {
  spc_fast *f = g->fast;
  if (n <= f->map.scratch_cap)
    return SPC_OK;
  void *p;
  int err = posix_memalign(&p, kAlign, n);
  if (err != 0)
    return spc__fail(g->client, SPC_ENOMEM, "posix_memalign of %zu bytes of "
                     "scratch for reading other ranks' memory failed: %s", n,
                     strerror(err));
  free(f->map.scratch);
  f->map.scratch = p;
  f->map.scratch_cap = n;
  return SPC_OK;
}

void spc__fast_cma_free(spc_fast *f) {
  free(f->map.scratch);
  f->map.scratch = NULL;
  f->map.scratch_cap = 0;
}

/* The bytes [*lo, *hi) of a source at byte `off` of its base that units
 * [u0, u1) of geometry m read (kernels/plan.h: dim 0 outermost, each of
 * its units a run or a row of the inner dims). */
static void span_of(const spk_move *m, uint64_t off, uint64_t u0, uint64_t u1,
                    uint64_t *lo, uint64_t *hi) {
  if (m->nd == 1) {
    *lo = off + u0;
    *hi = off + u1;
    return;
  }
  uint64_t row = m->len[m->nd - 1];
  for (int i = 1; i < m->nd - 1; i++)
    row += (m->len[i] - 1) * m->src_stride[i];
  *lo = off + u0 * m->src_stride[0];
  *hi = off + (u1 - 1) * m->src_stride[0] + row;
}

/* Units of m per piece: fast_piece_bytes of a run (whole elements: a run's
 * length is a multiple of every element size), or as many rows as fit
 * in it, at least one. */
static uint64_t piece_units(const spc_fast *f, const spk_move *m) {
  uint64_t piece = f->tune.fast_piece_bytes;
  if (m->nd == 1)
    return piece;
  uint64_t lo, hi;
  span_of(m, 0, 0, 1, &lo, &hi);
  uint64_t per = m->src_stride[0] > hi ? m->src_stride[0] : hi;
  uint64_t rows = per > 0 ? piece / per : 1;
  return rows > 0 ? rows : 1;
}

/* A base that puts byte `lo` of a source at p: the executor adds the
 * step's offsets to it (an address, never dereferenced itself). */
static uint8_t *based_at(uint8_t *p, uint64_t lo) {
  return (uint8_t *)((uintptr_t)p - (uintptr_t)lo);
}

/* The runs of a plain copy, read in batches of paired iovecs. */
typedef struct {
  spc_group *g;
  int r;
  struct iovec local[RUNS_MAX], remote[RUNS_MAX];
  int n;
  uint64_t bytes;
} runs;

static int runs_flush(runs *x) {
  if (x->n == 0)
    return SPC_OK;
  ssize_t k;
  do
    k = process_vm_readv(x->g->fast->map.pid[x->r], x->local,
                         (unsigned long)x->n, x->remote, (unsigned long)x->n,
                         0);
  while (k < 0 && errno == EINTR);
  int rc = SPC_OK;
  if (k < 0 || (uint64_t)k != x->bytes)
    rc = spc__fail(x->g->client, SPC_ESYSTEM, "process_vm_readv of %d runs "
                   "(%llu bytes, the first at 0x%llx) in rank %d (pid %d) "
                   "read %lld: %s", x->n, (unsigned long long)x->bytes,
                   (unsigned long long)(uintptr_t)x->remote[0].iov_base,
                   x->r, (int)x->g->fast->map.pid[x->r], (long long)k,
                   k < 0 ? strerror(errno) : "a short read");
  x->n = 0;
  x->bytes = 0;
  return rc;
}

/* Dim d of m from src / dst on: its runs added to x. */
static int runs_add(runs *x, const spk_move *m, int d, uint64_t src,
                    uint8_t *dst) {
  if (d == m->nd - 1) {
    if (x->n == RUNS_MAX && runs_flush(x) < 0)
      return SPC_ESYSTEM;
    x->local[x->n] = (struct iovec){dst, m->len[d]};
    x->remote[x->n++] = (struct iovec){(void *)(uintptr_t)src, m->len[d]};
    x->bytes += m->len[d];
    return SPC_OK;
  }
  for (uint64_t i = 0; i < m->len[d]; i++)
    if (runs_add(x, m, d + 1, src + i * m->src_stride[d],
                 dst + i * m->dst_stride[d]) < 0)
      return SPC_ESYSTEM;
  return SPC_OK;
}

int spc__fast_cma_move(spc_group *g, const spk_move *m,
                       uint8_t *const *bases) {
  spc_fast *f = g->fast;
  size_t si = (size_t)m->src_rank * SPK_T_COUNT + m->src_t;
  uint64_t src = (uint64_t)(uintptr_t)bases[si];
  uint8_t *dst = bases[m->dst_rank * SPK_T_COUNT + m->dst_t];
  if (m->nd == 1 && f->plan.scale == SPK_SCALE_NONE)
    return cma_read(g, (int)m->src_rank, dst + m->dst_off, src + m->src_off,
                    m->len[0]);
  if (f->plan.scale == SPK_SCALE_NONE) {
    runs *x = malloc(sizeof(*x));
    if (x == NULL)
      return spc__fail(g->client, SPC_ENOMEM, "malloc of %zu bytes of "
                       "iovecs failed", sizeof(*x));
    x->g = g, x->r = (int)m->src_rank, x->n = 0, x->bytes = 0;
    int rc = runs_add(x, m, 0, src + m->src_off, dst + m->dst_off);
    if (rc == SPC_OK)
      rc = runs_flush(x);
    free(x);
    return rc;
  }
  uint8_t *b[2 * SPK_FSEG_MAXWORLD];
  memcpy(b, bases, sizeof(b));
  uint64_t units = spk_move_units(m), step = piece_units(f, m);
  for (uint64_t u0 = 0; u0 < units; u0 += step) {
    uint64_t u1 = units - u0 < step ? units : u0 + step, lo, hi;
    span_of(m, m->src_off, u0, u1, &lo, &hi);
    int rc = scratch_fit(g, (size_t)(hi - lo) + kAlign);
    if (rc < 0)
      return rc;
    uint8_t *at = matched(f->map.scratch, src + lo);
    rc = cma_read(g, (int)m->src_rank, at, src + lo, hi - lo);
    if (rc < 0)
      return rc;
    b[si] = based_at(at, lo);
    spk_move_exec(&f->plan, m, b, u0, u1);
  }
  return SPC_OK;
}

int spc__fast_cma_reads(const spc_fast *f, const spk_reduce *r) {
  for (uint32_t k = 0; k < r->nsrc; k++) {
    const spk_rsrc *s = &f->plan.rsrcs[r->src0 + k];
    if (f->map.remote[s->rank * SPK_T_COUNT + s->t])
      return 1;
  }
  return 0;
}

/* Units [u0, u1) of reduce step r, its remote sources read into slots of
 * the scratch (each `slot` bytes) and named as ranks past the world in
 * b, with their own list of sources in p (a copy of the plan). */
static int reduce_piece(spc_group *g, const spk_reduce *r, spk_plan *p,
                        spk_rsrc *rs, uint8_t **b, size_t slot, uint64_t u0,
                        uint64_t u1) {
  spc_fast *f = g->fast;
  uint32_t n = 0;
  for (uint32_t k = 0; k < r->nsrc; k++) {
    const spk_rsrc *s = &f->plan.rsrcs[r->src0 + k];
    size_t si = (size_t)s->rank * SPK_T_COUNT + s->t;
    rs[k] = *s;
    if (!f->map.remote[si])
      continue;
    uint64_t lo, hi;
    span_of(&r->geo, s->off, u0, u1, &lo, &hi);
    uint64_t from = (uint64_t)(uintptr_t)b[si] + lo;
    uint8_t *at = matched(f->map.scratch + n * slot, from);
    int rc = cma_read(g, (int)s->rank, at, from, hi - lo);
    if (rc < 0)
      return rc;
    rs[k].rank = (uint32_t)g->world + n++;
    rs[k].t = 0;
    b[rs[k].rank * SPK_T_COUNT] = based_at(at, lo);
  }
  spk_reduce one = *r;
  one.src0 = 0;
  p->rsrcs = rs;
  spk_reduce_exec(p, &one, b, u0, u1);
  return SPC_OK;
}

int spc__fast_cma_reduce(spc_group *g, const spk_reduce *r,
                         uint8_t *const *bases) {
  spc_fast *f = g->fast;
  if (r->nsrc > SPK_FSEG_MAXWORLD)
    return spc__fail(g->client, SPC_ESYSTEM, "a reduce step of %u sources "
                     "in a group of %d ranks", r->nsrc, g->world);
  /* Ranks past the world name the remote sources' slots. */
  uint8_t *b[4 * SPK_FSEG_MAXWORLD];
  spk_rsrc rs[SPK_FSEG_MAXWORLD];
  memcpy(b, bases, 2 * SPK_FSEG_MAXWORLD * sizeof(b[0]));
  spk_plan p = f->plan;
  uint64_t units = spk_move_units(&r->geo), step = piece_units(f, &r->geo);
  uint64_t lo, hi;
  span_of(&r->geo, 0, 0, step < units ? step : units, &lo, &hi);
  size_t slot = (size_t)(hi - lo) + kAlign;
  int rc = scratch_fit(g, slot * r->nsrc);
  for (uint64_t u0 = 0; u0 < units && rc == SPC_OK; u0 += step)
    rc = reduce_piece(g, r, &p, rs, b, slot,
                      u0, units - u0 < step ? units : u0 + step);
  return rc;
}

int spc__fast_cma_inputs(spc_group *g, uint8_t **bases) {
  spc_fast *f = g->fast;
  uint64_t n[SPK_FSEG_MAXWORLD], total = 0;
  for (int r = 0; r < g->world; r++) {
    const spk_fseg_desc *d = &f->planned[r];
    n[r] = f->map.remote[r * SPK_T_COUNT + SPK_T_IN]
               ? spc__fast_desc_bytes(d, d->in_ndim, d->in_shape)
               : 0;
    total += n[r] + kAlign;
  }
  int rc = scratch_fit(g, (size_t)total);
  uint8_t *at = f->map.scratch;
  for (int r = 0; r < g->world && rc == SPC_OK; r++) {
    if (n[r] == 0)
      continue;
    uint8_t **b = &bases[r * SPK_T_COUNT + SPK_T_IN];
    at = matched(at, (uint64_t)(uintptr_t)*b);
    rc = cma_read(g, r, at, (uint64_t)(uintptr_t)*b, n[r]);
    *b = at;
    at += n[r];
  }
  return rc;
}
