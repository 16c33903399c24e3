#include "gpu_desc.h"

#include <stdlib.h>
#include <string.h>

#include "plan.h"

void spk_cdesc_list_init(spk_cdesc_list *l, uint64_t chunk) {
  memset(l, 0, sizeof(*l));
  l->chunk = chunk ? chunk : SPK_CU_CHUNK;
}

uint64_t spk_cdesc_chunk_for(uint64_t bytes, int sms) {
  uint64_t want = bytes / (8 * (uint64_t)(sms > 0 ? sms : 1)), c;
  for (c = SPK_CU_CHUNK_MIN; c < SPK_CU_CHUNK_MAX && c < want; c *= 2)
    ;
  return c;
}

void spk_cdesc_list_free(spk_cdesc_list *l) {
  free(l->descs);
  free(l->srcs);
  spk_cdesc_list_init(l, l->chunk);
}

/* Row-major strides of a block laid out without gaps. */
static void contig_strides(const spk_cdesc *d, uint64_t *st) {
  uint64_t acc = d->run;
  for (int i = (int)d->nouter - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= d->len[i];
  }
}

/* The widest access every row start and row length of both sides allows:
 * a 16-byte access needs 16-byte aligned addresses. */
static uint8_t vec_width(const spk_cdesc *d) {
  uint64_t bits = d->src | d->dst | d->run;
  if (d->rows > 1)
    for (int i = 0; i < d->nouter; i++)
      bits |= d->sstride[i] | d->dstride[i];
  for (uint8_t v = 16; v > 1; v /= 2)
    if (bits % v == 0)
      return v;
  return 1;
}

/* Fill the geometry of d from m's (flags: contiguous sides) and cut it in
 * chunks after the list's last one. */
static void desc_geometry(spk_cdesc_list *l, spk_cdesc *d, const spk_move *m,
                          int flags) {
  d->nouter = (uint8_t)(m->nd - 1);
  d->run = m->len[m->nd - 1];
  d->rows = 1;
  for (int i = 0; i < d->nouter; i++) {
    d->len[i] = m->len[i];
    d->sstride[i] = m->src_stride[i];
    d->dstride[i] = m->dst_stride[i];
    d->rows *= m->len[i];
  }
  if (flags & SPK_CD_SRC_CONTIG)
    contig_strides(d, d->sstride);
  if (flags & SPK_CD_DST_CONTIG)
    contig_strides(d, d->dstride);
  if (d->run > l->chunk) {
    d->piece = l->chunk;
    d->rows_per_chunk = 1;
    d->nchunks = d->rows * ((d->run + l->chunk - 1) / l->chunk);
  } else {
    uint64_t rpc = l->chunk / d->run;
    d->piece = d->run;
    d->rows_per_chunk = rpc < SPK_CU_MAX_ROWS ? rpc : SPK_CU_MAX_ROWS;
    d->nchunks = (d->rows + d->rows_per_chunk - 1) / d->rows_per_chunk;
  }
  d->chunk0 = l->nchunks;
}

int spk_cdesc_add_copy(spk_cdesc_list *l, const spk_move *m, uint64_t src,
                       uint64_t dst, int kind, size_t esize, int flags,
                       spk_err *err) {
  int rc = spk_grow((void **)&l->descs, l->n, &l->cap, sizeof(spk_cdesc),
                "GPU copy steps", err);
  if (rc < 0)
    return rc;
  spk_cdesc *d = &l->descs[l->n];
  memset(d, 0, sizeof(*d));
  d->src = src;
  d->dst = dst;
  d->kind = (uint8_t)kind;
  d->esize = (uint8_t)esize;
  desc_geometry(l, d, m, flags);
  d->vec = kind == SPK_CU_COPY ? vec_width(d) : (uint8_t)esize;
  l->nchunks += d->nchunks;
  l->n++;
  return SPK_OK;
}

int spk_cdesc_add_reduce(spk_cdesc_list *l, const spk_move *geo, uint64_t dst,
                         const spk_csrc *srcs, uint32_t nsrc, size_t esize,
                         spk_err *err) {
  int rc = spk_grow((void **)&l->descs, l->n, &l->cap, sizeof(spk_cdesc),
                "GPU reduce steps", err);
  for (uint32_t k = 0; rc == SPK_OK && k < nsrc; k++) {
    rc = spk_grow((void **)&l->srcs, l->nsrcs + k, &l->scap, sizeof(spk_csrc),
              "GPU reduce sources", err);
    if (rc == SPK_OK)
      l->srcs[l->nsrcs + k] = srcs[k];
  }
  if (rc < 0)
    return rc;
  spk_cdesc *d = &l->descs[l->n];
  memset(d, 0, sizeof(*d));
  d->dst = dst;
  d->kind = SPK_CU_REDUCE;
  d->esize = (uint8_t)esize;
  d->vec = (uint8_t)esize;
  d->rsrc0 = (uint32_t)l->nsrcs;
  d->nsrc = nsrc;
  desc_geometry(l, d, geo, 0);
  l->nsrcs += nsrc;
  l->nchunks += d->nchunks;
  l->n++;
  return SPK_OK;
}

int spk_cdesc_from_plan(spk_cdesc_list *l, const spk_plan *p,
                        uint8_t *const *bases, int phase, spk_err *err) {
  return spk_cdesc_from_plan_to(l, p, bases, phase, -1, err);
}

int spk_cdesc_from_plan_to(spk_cdesc_list *l, const spk_plan *p,
                           uint8_t *const *bases, int phase, int64_t to,
                           spk_err *err) {
  size_t esize = spk_dtype_size(p->dtype);
  int rc = SPK_OK;
  if (phase == 0) {
    uint32_t most = 0;
    for (size_t i = 0; i < p->nreduces; i++)
      most = p->reduces[i].nsrc > most ? p->reduces[i].nsrc : most;
    spk_csrc *srcs = most ? malloc(most * sizeof(*srcs)) : NULL;
    if (most && srcs == NULL)
      return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %u reduce sources "
                         "failed", most);
    for (size_t i = 0; rc == SPK_OK && i < p->nreduces; i++) {
      const spk_reduce *r = &p->reduces[i];
      if (to >= 0 && r->geo.dst_rank != (uint64_t)to)
        continue;
      for (uint32_t k = 0; k < r->nsrc; k++) {
        const spk_rsrc *s = &p->rsrcs[r->src0 + k];
        srcs[k] = (spk_csrc){
            (uint64_t)(uintptr_t)bases[s->rank * SPK_T_COUNT + s->t] + s->off,
            0, 0};
      }
      uint64_t dst =
          (uint64_t)(uintptr_t)bases[r->geo.dst_rank * SPK_T_COUNT +
                                     r->geo.dst_t] + r->geo.dst_off;
      rc = spk_cdesc_add_reduce(l, &r->geo, dst, srcs, r->nsrc, esize, err);
    }
    free(srcs);
    return rc;
  }
  int kind = p->scale == SPK_SCALE_NONE ? SPK_CU_COPY : SPK_CU_SCALE;
  for (size_t i = 0; rc == SPK_OK && i < p->nmoves; i++) {
    const spk_move *m = &p->moves[i];
    if (to >= 0 && m->dst_rank != (uint64_t)to)
      continue;
    uint64_t src = (uint64_t)(uintptr_t)bases[m->src_rank * SPK_T_COUNT +
                                              m->src_t] + m->src_off;
    uint64_t dst = (uint64_t)(uintptr_t)bases[m->dst_rank * SPK_T_COUNT +
                                              m->dst_t] + m->dst_off;
    rc = spk_cdesc_add_copy(l, m, src, dst, kind, esize, 0, err);
  }
  return rc;
}

static size_t align16(size_t n) {
  return (n + 15) & ~(size_t)15;
}

size_t spk_cdesc_packed_size(const spk_cdesc_list *l) {
  return align16(l->n * sizeof(spk_cdesc)) + l->nsrcs * sizeof(spk_csrc);
}

void spk_cdesc_pack(const spk_cdesc_list *l, void *host, uint64_t dev,
                    spk_claunch *launch) {
  size_t dbytes = align16(l->n * sizeof(spk_cdesc));
  if (l->n)
    memcpy(host, l->descs, l->n * sizeof(spk_cdesc));
  if (l->nsrcs)
    memcpy((uint8_t *)host + dbytes, l->srcs, l->nsrcs * sizeof(spk_csrc));
  launch->descs = (const spk_cdesc *)(uintptr_t)dev;
  launch->srcs = (const spk_csrc *)(uintptr_t)(dev + dbytes);
  launch->ndesc = l->n;
  launch->nchunks = l->nchunks;
}
