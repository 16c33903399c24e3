#include "plan.h"

#include <stdlib.h>
#include <string.h>

void spk_plan_init(spk_plan *plan, int world) {
  memset(plan, 0, sizeof(*plan));
  plan->world = world;
  plan->stream_bytes = SPK_STREAM_BYTES;
}

void spk_plan_free(spk_plan *plan) {
  free(plan->moves);
  free(plan->reduces);
  free(plan->rsrcs);
  free(plan->mine);
  free(plan->local);
  memset(plan, 0, sizeof(*plan));
}

int spk_plan_part(spk_plan *plan, const uint8_t *mine, spk_err *err) {
  size_t w = (size_t)plan->world;
  plan->mine = malloc(w);
  plan->local = malloc(w * sizeof(*plan->local));
  if (plan->mine == NULL || plan->local == NULL) {
    free(plan->mine), free(plan->local);
    plan->mine = NULL, plan->local = NULL;
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of a plan part for %zu "
                       "ranks failed", w);
  }
  plan->nlocal = 0;
  for (size_t r = 0; r < w; r++) {
    plan->mine[r] = mine[r] != 0;
    if (mine[r])
      plan->local[plan->nlocal++] = (uint32_t)r;
  }
  return SPK_OK;
}

uint32_t spk_plan_partners(const spk_plan *plan, uint32_t r,
                           const uint32_t **list) {
  if (plan->mine == NULL || plan->mine[r]) {
    *list = NULL;
    return (uint32_t)plan->world;
  }
  *list = plan->local;
  return plan->nlocal;
}

static int part_has(const spk_plan *plan, uint32_t rank) {
  return plan->mine == NULL || plan->mine[rank];
}

int spk_grow(void **items, size_t n, size_t *cap, size_t size,
             const char *what, spk_err *err) {
  if (n < *cap)
    return SPK_OK;
  size_t ncap = *cap ? *cap * 2 : 16;
  void *p = realloc(*items, ncap * size);
  if (p == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "realloc of %zu %s failed", ncap,
                       what);
  *items = p;
  *cap = ncap;
  return SPK_OK;
}

static void c_strides(const spk_shape *s, size_t esize, uint64_t *st) {
  uint64_t acc = esize;
  for (int i = s->ndim - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= (uint64_t)s->dim[i];
  }
}

/* Drop unit dims and fold the innermost dims that are contiguous on both
 * sides into one byte run, so the mover's inner loop is as long as it can
 * be. */
static void move_coalesce(spk_move *m, int nd, const uint64_t *len,
                          const uint64_t *ss, const uint64_t *ds,
                          size_t esize) {
  uint64_t l[SPK_MAX_DIMS], s[SPK_MAX_DIMS], d[SPK_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < nd; i++) {
    if (len[i] == 1)
      continue;
    l[n] = len[i], s[n] = ss[i], d[n] = ds[i], n++;
  }
  uint64_t run = esize;
  while (n > 0 && s[n - 1] == run && d[n - 1] == run)
    run *= l[--n];
  for (int j = 0; j < n; j++) {
    m->len[j] = l[j];
    m->src_stride[j] = s[j];
    m->dst_stride[j] = d[j];
  }
  m->len[n] = run, m->src_stride[n] = 1, m->dst_stride[n] = 1;
  m->nd = (uint8_t)(n + 1);
}

/* Fill m's geometry for a block of `extent` between src and dst; returns
 * the bytes it covers, 0 for an empty block. */
static uint64_t block_geometry(spk_move *m, const spk_block_end *src,
                               const spk_block_end *dst,
                               const int64_t *extent, size_t esize) {
  int nd = src->shape->ndim;
  uint64_t ss[SPK_MAX_DIMS], ds[SPK_MAX_DIMS], len[SPK_MAX_DIMS];
  uint64_t total = esize;
  for (int i = 0; i < nd; i++) {
    if (extent[i] == 0)
      return 0;
    len[i] = (uint64_t)extent[i];
    total *= len[i];
  }
  c_strides(src->shape, esize, ss);
  c_strides(dst->shape, esize, ds);
  memset(m, 0, sizeof(*m));
  m->src_rank = src->rank, m->dst_rank = dst->rank;
  m->src_t = src->t, m->dst_t = dst->t;
  for (int i = 0; i < nd; i++) {
    m->src_off += (uint64_t)src->origin[i] * ss[i];
    m->dst_off += (uint64_t)dst->origin[i] * ds[i];
  }
  move_coalesce(m, nd, len, ss, ds, esize);
  return total;
}

int spk_plan_add_reduce(spk_plan *plan, const spk_block_end *dst,
                        const spk_block_end *srcs, int nsrc,
                        const int64_t *extent, size_t esize, spk_err *err) {
  spk_reduce r = {.src0 = (uint32_t)plan->nrsrcs};
  if (nsrc == 0) /* a part with no rank of the step */
    return SPK_OK;
  uint64_t bytes = block_geometry(&r.geo, &srcs[0], dst, extent, esize);
  if (bytes == 0)
    return SPK_OK;
  /* Landing elsewhere, a part keeps the sources it sends, in order. */
  int whole = part_has(plan, dst->rank);
  int rc = spk_grow((void **)&plan->reduces, plan->nreduces, &plan->rcap,
                sizeof(spk_reduce), "reduce steps", err);
  for (int k = 0; rc == SPK_OK && k < nsrc; k++) {
    if (!whole && !plan->mine[srcs[k].rank])
      continue;
    rc = spk_grow((void **)&plan->rsrcs, plan->nrsrcs, &plan->scap,
              sizeof(spk_rsrc), "reduce sources", err);
    if (rc < 0)
      break;
    r.nsrc++;
    spk_move one;
    block_geometry(&one, &srcs[k], dst, extent, esize);
    plan->rsrcs[plan->nrsrcs++] =
        (spk_rsrc){srcs[k].rank, srcs[k].t, one.src_off};
  }
  if (rc < 0 || r.nsrc == 0)
    return rc;
  plan->reduces[plan->nreduces++] = r;
  plan->bytes += whole ? bytes : 0;
  return SPK_OK;
}

int spk_plan_add_block(spk_plan *plan, const spk_block_end *src,
                       const spk_block_end *dst, const int64_t *extent,
                       size_t esize, spk_err *err) {
  if (!part_has(plan, src->rank) && !part_has(plan, dst->rank))
    return SPK_OK;
  spk_move m;
  uint64_t bytes = block_geometry(&m, src, dst, extent, esize);
  if (bytes == 0)
    return SPK_OK;
  int rc = spk_grow((void **)&plan->moves, plan->nmoves, &plan->cap,
                sizeof(spk_move), "moves", err);
  if (rc < 0)
    return rc;
  plan->moves[plan->nmoves++] = m;
  plan->bytes += part_has(plan, dst->rank) ? bytes : 0;
  return SPK_OK;
}

uint64_t spk_move_units(const spk_move *m) {
  return m->len[0];
}

int spk_plan_streams(const spk_plan *plan) {
  return plan->stream_bytes != 0 &&
         plan->bytes + plan->in_bytes >= plan->stream_bytes;
}

uint64_t spk_move_bytes(const spk_move *m) {
  uint64_t n = 1;
  for (int i = 0; i < m->nd; i++)
    n *= m->len[i];
  return n;
}
