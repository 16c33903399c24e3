#include "gpu_route.h"

#include <stdlib.h>
#include <string.h>

/* Staged blocks start 16-byte aligned so their copies stay vectorized. */
static uint64_t align16(uint64_t n) {
  return (n + 15) & ~(uint64_t)15;
}

static int staged(const spk_route *rt, int s, int d) {
  return rt->self_p2p || s != d;
}

void spk_route_free(spk_route *rt) {
  if (rt->pack != NULL)
    for (int i = 0; i < 2 * rt->ndev; i++)
      spk_cdesc_list_free(&rt->pack[i]);
  if (rt->post != NULL)
    for (int i = 0; i < 2 * rt->ndev; i++)
      spk_cdesc_list_free(&rt->post[i]);
  free(rt->bytes);
  free(rt->send_off);
  free(rt->recv_off);
  free(rt->recv_base);
  free(rt->stage_bytes);
  free(rt->pack);
  free(rt->post);
  memset(rt, 0, sizeof(*rt));
}

int spk_route_init(spk_route *rt, const spk_plan *p, const int *rank_dev,
                   int ndev, int self_p2p, uint64_t chunk, spk_err *err) {
  memset(rt, 0, sizeof(*rt));
  rt->ndev = ndev;
  rt->self_p2p = self_p2p;
  size_t n3 = 2 * (size_t)ndev * (size_t)ndev;
  rt->bytes = calloc(n3, sizeof(uint64_t));
  rt->send_off = calloc(n3, sizeof(uint64_t));
  rt->recv_off = calloc(n3, sizeof(uint64_t));
  rt->recv_base = calloc((size_t)ndev, sizeof(uint64_t));
  rt->stage_bytes = calloc((size_t)ndev, sizeof(uint64_t));
  rt->pack = calloc(2 * (size_t)ndev, sizeof(spk_cdesc_list));
  rt->post = calloc(2 * (size_t)ndev, sizeof(spk_cdesc_list));
  if (!rt->bytes || !rt->send_off || !rt->recv_off || !rt->recv_base ||
      !rt->stage_bytes || !rt->pack || !rt->post)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of the exchange of %d "
                       "devices failed", ndev);
  for (size_t i = 0; i < p->nreduces; i++) {
    const spk_reduce *r = &p->reduces[i];
    int d = rank_dev[r->geo.dst_rank];
    uint64_t b = align16(spk_move_bytes(&r->geo));
    for (uint32_t k = 0; k < r->nsrc; k++) {
      int s = rank_dev[p->rsrcs[r->src0 + k].rank];
      if (staged(rt, s, d))
        rt->bytes[SPK_ROUTE_AT(rt, 0, s, d)] += b;
    }
  }
  for (size_t i = 0; i < p->nmoves; i++) {
    const spk_move *m = &p->moves[i];
    int s = rank_dev[m->src_rank], d = rank_dev[m->dst_rank];
    if (staged(rt, s, d))
      rt->bytes[SPK_ROUTE_AT(rt, 1, s, d)] += align16(spk_move_bytes(m));
  }
  /* Device s's staging: its send area (phase-major, then peer), then its
   * receive area (phase-major, then the peer it receives from). */
  for (int s = 0; s < ndev; s++) {
    uint64_t at = 0;
    for (int ph = 0; ph < 2; ph++)
      for (int d = 0; d < ndev; d++) {
        rt->send_off[SPK_ROUTE_AT(rt, ph, s, d)] = at;
        at += rt->bytes[SPK_ROUTE_AT(rt, ph, s, d)];
      }
    rt->recv_base[s] = (at + 255) & ~(uint64_t)255;
    at = 0;
    for (int ph = 0; ph < 2; ph++)
      for (int from = 0; from < ndev; from++) {
        rt->recv_off[SPK_ROUTE_AT(rt, ph, s, from)] = at;
        at += rt->bytes[SPK_ROUTE_AT(rt, ph, from, s)];
      }
    rt->stage_bytes[s] = at ? rt->recv_base[s] + at : rt->recv_base[s];
  }
  for (int i = 0; i < 2 * ndev; i++) {
    spk_cdesc_list_init(&rt->pack[i], chunk);
    spk_cdesc_list_init(&rt->post[i], chunk);
  }
  return SPK_OK;
}

static uint64_t addr(uint8_t *const *bases, uint32_t rank, uint8_t t,
                     uint64_t off) {
  return (uint64_t)(uintptr_t)bases[rank * SPK_T_COUNT + t] + off;
}

typedef struct {
  spk_route *rt;
  uint8_t *const *stage;
  uint64_t *cur;          /* [phase][s][d]: bytes of the pair used so far */
} route_ctx;

/* Reserve room for a block of `bytes` from s to d in phase ph: its
 * address in s's send area and in d's receive area. */
static void stage_slot(route_ctx *c, int ph, int s, int d, uint64_t bytes,
                       uint64_t *send_p, uint64_t *recv_p) {
  spk_route *rt = c->rt;
  size_t at = SPK_ROUTE_AT(rt, ph, s, d);
  uint64_t off = c->cur[at];
  c->cur[at] += align16(bytes);
  *send_p = (uint64_t)(uintptr_t)c->stage[s] + rt->send_off[at] + off;
  *recv_p = (uint64_t)(uintptr_t)c->stage[d] + rt->recv_base[d] +
            rt->recv_off[SPK_ROUTE_AT(rt, ph, d, s)] + off;
}

static int route_reduces(route_ctx *c, const spk_plan *p,
                         uint8_t *const *bases, const int *rank_dev,
                         spk_csrc *srcs, spk_err *err) {
  spk_route *rt = c->rt;
  size_t esize = spk_dtype_size(p->dtype);
  int rc = SPK_OK;
  for (size_t i = 0; rc == SPK_OK && i < p->nreduces; i++) {
    const spk_reduce *r = &p->reduces[i];
    int d = rank_dev[r->geo.dst_rank];
    uint64_t bytes = spk_move_bytes(&r->geo);
    for (uint32_t k = 0; rc == SPK_OK && k < r->nsrc; k++) {
      const spk_rsrc *src = &p->rsrcs[r->src0 + k];
      int s = rank_dev[src->rank];
      uint64_t from = addr(bases, src->rank, src->t, src->off);
      if (!staged(rt, s, d)) {
        srcs[k] = (spk_csrc){from, 0, 0};
        continue;
      }
      uint64_t to, at_d;
      stage_slot(c, 0, s, d, bytes, &to, &at_d);
      rc = spk_cdesc_add_copy(&rt->pack[s], &r->geo, from, to, SPK_CU_COPY,
                              esize, SPK_CD_DST_CONTIG, err);
      srcs[k] = (spk_csrc){at_d, 1, 0};
    }
    if (rc == SPK_OK)
      rc = spk_cdesc_add_reduce(
          &rt->post[d], &r->geo,
          addr(bases, r->geo.dst_rank, r->geo.dst_t, r->geo.dst_off), srcs,
          r->nsrc, esize, err);
  }
  return rc;
}

static int route_moves(route_ctx *c, const spk_plan *p, uint8_t *const *bases,
                       const int *rank_dev, spk_err *err) {
  spk_route *rt = c->rt;
  size_t esize = spk_dtype_size(p->dtype);
  int kind = p->scale == SPK_SCALE_NONE ? SPK_CU_COPY : SPK_CU_SCALE;
  int rc = SPK_OK, n = rt->ndev;
  for (size_t i = 0; rc == SPK_OK && i < p->nmoves; i++) {
    const spk_move *m = &p->moves[i];
    int s = rank_dev[m->src_rank], d = rank_dev[m->dst_rank];
    uint64_t from = addr(bases, m->src_rank, m->src_t, m->src_off);
    uint64_t dst = addr(bases, m->dst_rank, m->dst_t, m->dst_off);
    if (!staged(rt, s, d)) {
      rc = spk_cdesc_add_copy(&rt->post[n + s], m, from, dst, kind, esize, 0,
                              err);
      continue;
    }
    /* The scale is applied once, while packing. */
    uint64_t to, at_d;
    stage_slot(c, 1, s, d, spk_move_bytes(m), &to, &at_d);
    rc = spk_cdesc_add_copy(&rt->pack[n + s], m, from, to, kind, esize,
                            SPK_CD_DST_CONTIG, err);
    if (rc == SPK_OK)
      rc = spk_cdesc_add_copy(&rt->post[n + d], m, at_d, dst, SPK_CU_COPY,
                              esize, SPK_CD_SRC_CONTIG, err);
  }
  return rc;
}

int spk_route_build(spk_route *rt, const spk_plan *p, uint8_t *const *bases,
                    const int *rank_dev, uint8_t *const *stage, spk_err *err) {
  uint32_t most = 1;
  for (size_t i = 0; i < p->nreduces; i++)
    most = p->reduces[i].nsrc > most ? p->reduces[i].nsrc : most;
  uint64_t *cur = calloc(2 * (size_t)rt->ndev * rt->ndev, sizeof(*cur));
  spk_csrc *srcs = malloc(most * sizeof(*srcs));
  int rc = SPK_OK;
  if (cur == NULL || srcs == NULL)
    rc = spk_err_set(err, SPK_ENO_MEMORY, "malloc of the exchange cursors "
                     "failed");
  route_ctx c = {rt, stage, cur};
  if (rc == SPK_OK)
    rc = route_reduces(&c, p, bases, rank_dev, srcs, err);
  if (rc == SPK_OK)
    rc = route_moves(&c, p, bases, rank_dev, err);
  free(cur);
  free(srcs);
  return rc;
}

/* ---- exact collectives --------------------------------------------- */

const char *spk_coll_name(spk_coll c) {
  switch (c) {
  case SPK_COLL_NONE: return "send/recv";
  case SPK_COLL_ALL_GATHER: return "ncclAllGather";
  case SPK_COLL_ALL_TO_ALL: return "ncclAlltoAll";
  case SPK_COLL_REDUCE_SCATTER: return "ncclReduceScatter";
  case SPK_COLL_ALL_REDUCE: return "ncclAllReduce";
  }
  return "?";
}

static int all_equal(const uint64_t *v, int n, uint64_t want) {
  for (int i = 0; i < n; i++)
    if (v[i] != want)
      return 0;
  return 1;
}

/* Every (source rank, destination rank) pair has exactly one move, one
 * contiguous run of L bytes from src_off(s, d) of s's input to
 * dst_off(s, d) of d's output. `seen` has world^2 bytes. */
static int moves_are_pairs(const spk_plan *p, uint64_t L, int a2a,
                           uint8_t *seen) {
  uint32_t w = (uint32_t)p->world;
  if (p->nmoves != (size_t)w * w)
    return 0;
  memset(seen, 0, (size_t)w * w);
  for (size_t i = 0; i < p->nmoves; i++) {
    const spk_move *m = &p->moves[i];
    uint32_t s = m->src_rank, d = m->dst_rank;
    if (m->nd != 1 || m->len[0] != L || m->src_t != SPK_T_IN ||
        m->dst_t != SPK_T_OUT || s >= w || d >= w || seen[s * w + d])
      return 0;
    if (m->src_off != (a2a ? d * L : 0) || m->dst_off != s * L)
      return 0;
    seen[s * w + d] = 1;
  }
  return 1;
}

static int reduces_scatter(const spk_plan *p, uint64_t L) {
  uint32_t w = (uint32_t)p->world;
  if (p->nmoves != 0 || p->nreduces != w)
    return 0;
  for (size_t i = 0; i < p->nreduces; i++) {
    const spk_reduce *r = &p->reduces[i];
    uint32_t d = r->geo.dst_rank;
    if (r->geo.nd != 1 || r->geo.len[0] != L || r->geo.dst_t != SPK_T_OUT ||
        r->geo.dst_off != 0 || d != i || r->nsrc != w)
      return 0;
    for (uint32_t k = 0; k < w; k++) {
      const spk_rsrc *s = &p->rsrcs[r->src0 + k];
      if (s->rank != k || s->t != SPK_T_IN || s->off != (uint64_t)d * L)
        return 0;
    }
  }
  return 1;
}

spk_coll spk_route_collective(const spk_plan *p, spk_op_kind op,
                              const uint64_t *in_bytes,
                              const uint64_t *out_bytes, uint64_t *count_p) {
  int w = p->world;
  uint64_t L = in_bytes[0];
  int half = p->dtype == SPK_F16 || p->dtype == SPK_BF16;
  if (p->scale != SPK_SCALE_NONE || L == 0)
    return SPK_COLL_NONE;
  if (op == SPK_OP_ALL_REDUCE) {
    if (half && w > 2)
      return SPK_COLL_NONE;
    if (!all_equal(in_bytes, w, L) || !all_equal(out_bytes, w, L))
      return SPK_COLL_NONE;
    *count_p = L;
    return SPK_COLL_ALL_REDUCE;
  }
  if (op == SPK_OP_REDUCE_SCATTER) {
    uint64_t piece = out_bytes[0];
    if ((half && w > 2) || !all_equal(in_bytes, w, piece * (uint64_t)w) ||
        !all_equal(out_bytes, w, piece) || !reduces_scatter(p, piece))
      return SPK_COLL_NONE;
    *count_p = piece;
    return SPK_COLL_REDUCE_SCATTER;
  }
  if (p->nreduces != 0)
    return SPK_COLL_NONE;
  uint8_t *seen = malloc((size_t)w * w);
  spk_coll c = SPK_COLL_NONE;
  if (seen == NULL)
    return c;
  if (all_equal(in_bytes, w, L) && all_equal(out_bytes, w, L * (uint64_t)w) &&
      moves_are_pairs(p, L, 0, seen)) {
    c = SPK_COLL_ALL_GATHER;
    *count_p = L;
  } else if (L % (uint64_t)w == 0 && all_equal(in_bytes, w, L) &&
             all_equal(out_bytes, w, L) &&
             moves_are_pairs(p, L / (uint64_t)w, 1, seen)) {
    c = SPK_COLL_ALL_TO_ALL;
    *count_p = L / (uint64_t)w;
  }
  free(seen);
  return c;
}
