/* Cutting plans across nodes (kernels/plan_cut.c). Random ops of every
 * kind the planner knows (split, all_gather, all_to_all, all_to_all_v,
 * all_reduce sum/max/min, reduce_scatter, zigzag and packed split/gather),
 * with and without grad scale, over worlds of 1..8 ranks and random node
 * maps (1..4 nodes, nodes without ranks, non-contiguous maps), are planned,
 * run once by the reference executor over one set of buffers, then run
 * again as the nodes would: each node holds only its ranks' tensors and
 * poison-filled proxies of remote ones, streams are packed with
 * spk_span_walk over the sender's tensors into one byte vector and
 * unpacked over the receiver's, in the documented order (phase-0 streams,
 * local[0], phase-1 streams, local[1]). Every node's outputs must equal the
 * reference byte for byte, and remote tensors a node has no proxy for must
 * never be touched. Also: the two ends of a stream agree piece by piece,
 * every cross-node reduce source is carried once and every source span
 * once per destination node (further moves of it are local copies), a
 * plan whose ranks share one node is not cut at all, and spk_span_walk
 * reports maximal contiguous runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "half.h"
#include "plan_cut.h"
#include "plan_testlib.h"
#include "split_rule.h"

#define MAXW 8
#define MAXN 4
#define MAXL 8  /* longest size list: one entry per rank, or sequences */
#define GUARD 16 /* bytes past each simulated tensor that must stay put */
#define NT (MAXW * SPK_T_COUNT)

/* Check's assertions cost a write each: test first, fail through it. */
#define REQ(cond, ...)                                                       \
  do {                                                                       \
    if (!(cond))                                                             \
      ck_abort_msg(__VA_ARGS__);                                             \
  } while (0)

/* ---- random ops ------------------------------------------------------- */

enum {
  K_SPLIT, K_GATHER, K_A2A, K_A2AV, K_AR_SUM, K_AR_MAX, K_AR_MIN, K_RS,
  K_ZZ_SPLIT, K_ZZ_GATHER, K_PK_SPLIT, K_PK_GATHER, K_COUNT
};
static const char *const kind_name[K_COUNT] = {
    "split",         "all_gather",    "all_to_all",   "all_to_all_v",
    "all_reduce sum", "all_reduce max", "all_reduce min", "reduce_scatter",
    "zigzag_split",  "zigzag_gather", "packed_split", "packed_gather"};

/* One op as every rank describes it; each rank owns its size lists. */
typedef struct {
  int world, nd, d;
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
  int64_t l1[MAXW][MAXL], l2[MAXW][MAXL];
} ocase;

static void base(ocase *c, spk_op_kind op, int world, spk_dtype dt,
                 uint32_t flags, int nd, const int64_t *shape, int ndims,
                 int d) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->d = d;
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = op, a->dtype = dt, a->flags = flags;
    a->in.ndim = nd;
    memcpy(a->in.dim, shape, sizeof(int64_t) * (size_t)nd);
    a->ndims = ndims, a->dims[0] = d;
    c->argp[r] = a;
  }
}

/* Give every rank the list l (n entries) as sizes (which 1) or sizes2. */
static void give_list(ocase *c, int which, const int64_t *l, int n) {
  for (int r = 0; r < c->world; r++) {
    spk_op_args *a = &c->args[r];
    int64_t *own = which == 1 ? c->l1[r] : c->l2[r];
    memcpy(own, l, sizeof(int64_t) * (size_t)n);
    if (which == 1)
      a->nsizes = n, a->sizes = own;
    else
      a->nsizes2 = n, a->sizes2 = own;
  }
}

/* Each rank's output shape from its own arguments. */
static void finish(ocase *c, const char *tag) {
  for (int r = 0; r < c->world; r++) {
    spk_err err = {{0}};
    int rc = spk_out_shape(&c->args[r], c->world, r, &c->args[r].out, &err);
    REQ(rc == SPK_OK, "%s: out_shape rank %d: %d %s", tag, r, rc, err.msg);
  }
}

/* Sizes along d: a list of 0..4 per rank (summing to the dim), or none. */
static int64_t pieces_or_rule(int64_t *sizes, int world) {
  int64_t n = 0;
  ptl_random_dims(sizes, world, 3, 4);
  for (int r = 0; r < world; r++)
    n += sizes[r];
  return n;
}

static void mk_random(ocase *c, int kind, int world, spk_dtype dt,
                      int scale, const char *tag) {
  uint32_t flags = (uint32_t)scale << SPK_FLAG_SCALE_SHIFT;
  /* mostly 1..4 dims of 0..4, now and then 5..6 of 0..2 */
  int nd = (int)(ptl_rng_range(0, 7) ? ptl_rng_range(kind == K_A2A ? 2 : 1, 4)
                                     : ptl_rng_range(5, 6));
  int d = (int)ptl_rng_range(0, nd - 1);
  int64_t shape[SPK_MAX_DIMS], l[MAXL];
  ptl_random_dims(shape, nd, 20, nd > 4 ? 2 : 4);
  switch (kind) {
  case K_SPLIT:
  case K_RS: {
    int with = (int)ptl_rng_range(0, 1);
    int64_t n = pieces_or_rule(l, world);
    shape[d] = with ? n : ptl_rng_range(0, 3 * world);
    if (kind == K_RS)
      flags |= (uint32_t)ptl_rng_range(0, SPK_RED_COUNT - 1);
    base(c, kind == K_RS ? SPK_OP_REDUCE_SCATTER : SPK_OP_SPLIT, world, dt,
         flags, nd, shape, 1, d);
    if (with)
      give_list(c, 1, l, world);
    break;
  }
  case K_GATHER: {
    int eq = (int)ptl_rng_range(0, 1), with = (int)ptl_rng_range(0, 1);
    ptl_random_dims(l, world, 4, 4);
    for (int r = 1; eq && r < world; r++)
      l[r] = l[0];
    for (int r = 1; r < world; r++)
      with |= l[r] != l[0]; /* unequal pieces need the list */
    base(c, SPK_OP_ALL_GATHER, world, dt, flags, nd, shape, 1, d);
    for (int r = 0; r < world; r++)
      c->args[r].in.dim[d] = l[r];
    if (with)
      give_list(c, 1, l, world);
    break;
  }
  case K_A2A: {
    int g = (d + (int)ptl_rng_range(1, nd - 1)) % nd;
    int64_t S = world * ptl_rng_range(0, 2), G = world * ptl_rng_range(0, 2);
    if (world > 1 && ptl_rng_range(0, 1))
      S += ptl_rng_range(1, world - 1);
    int uneq = world > 1 && ptl_rng_range(0, 1);
    if (uneq)
      G += ptl_rng_range(1, world - 1);
    shape[d] = S;
    base(c, SPK_OP_ALL_TO_ALL, world, dt, flags, nd, shape, 2, d);
    /* unequal gather pieces need gather_size; equal ones may give it */
    int64_t scalar = uneq || ptl_rng_range(0, 1) ? G : 0;
    for (int r = 0; r < world; r++) {
      c->args[r].dims[1] = g, c->args[r].scalar = scalar;
      c->args[r].in.dim[g] = spk_split_size(G, world, r);
    }
    ptl_respell_dim(c->args, world, 1, g, nd);
    break;
  }
  case K_A2AV: {
    int64_t m[MAXW][MAXW];
    for (int i = 0; i < world; i++)
      ptl_random_dims(m[i], world, 3, 3);
    base(c, SPK_OP_ALL_TO_ALL_V, world, dt, flags, nd, shape, 0, 0);
    for (int r = 0; r < world; r++) {
      spk_op_args *a = &c->args[r];
      a->in.dim[0] = 0;
      for (int k = 0; k < world; k++) {
        c->l1[r][k] = m[r][k], c->l2[r][k] = m[k][r];
        a->in.dim[0] += m[r][k];
      }
      a->nsizes = a->nsizes2 = world;
      a->sizes = c->l1[r], a->sizes2 = c->l2[r];
    }
    c->d = 0;
    break;
  }
  case K_AR_SUM:
  case K_AR_MAX:
  case K_AR_MIN:
    flags |= (uint32_t)(kind - K_AR_SUM);
    if (ptl_rng_range(0, 2) == 0) /* now and then longer than w */
      shape[0] = ptl_rng_range(world, 4 * world + 3);
    base(c, SPK_OP_ALL_REDUCE, world, dt, flags, nd, shape, 0, 0);
    break;
  case K_ZZ_SPLIT:
  case K_ZZ_GATHER: {
    int gather = kind == K_ZZ_GATHER;
    int64_t ch = ptl_rng_range(ptl_rng_range(0, 5) == 0 ? 0 : 1, 3);
    shape[d] = (gather ? 2 : 2 * world) * ch;
    base(c, gather ? SPK_OP_ZIGZAG_GATHER : SPK_OP_ZIGZAG_SPLIT, world, dt,
         flags, nd, shape, 1, d);
    break;
  }
  case K_PK_SPLIT:
  case K_PK_GATHER: {
    int gather = kind == K_PK_GATHER, nseq = (int)ptl_rng_range(1, 6);
    int64_t total = 0;
    for (int i = 0; i < nseq; i++)
      total += l[i] = ptl_rng_range(0, 3) == 0 ? ptl_rng_range(0, world)
                                               : ptl_rng_range(0, 10);
    shape[d] = total + (ptl_rng_range(0, 1) ? 0 : ptl_rng_range(1, 3));
    base(c, gather ? SPK_OP_PACKED_GATHER : SPK_OP_PACKED_SPLIT, world, dt,
         flags, nd, shape, 1, d);
    for (int r = 0; gather && r < world; r++) {
      int64_t local = 0;
      for (int i = 0; i < nseq; i++)
        local += spk_split_size(l[i], world, r);
      c->args[r].in.dim[d] = local;
    }
    give_list(c, 1, l, nseq);
    break;
  }
  }
  if (c->args[0].ndims >= 1)
    ptl_respell_dim(c->args, world, 0, c->d, nd);
  finish(c, tag);
}

/* Inputs: random bytes for integers; for floats k/64 with |k| <= 16, so
 * every sum of up to 8 and every scaling by w up is exact in any format. */
static void fill_input(uint8_t *p, size_t bytes, spk_dtype dt) {
  size_t es = spk_dtype_size(dt), n = bytes / es;
  for (size_t i = 0; i < n; i++) {
    float v = (float)ptl_rng_range(-16, 16) / 64.0f;
    uint8_t *e = p + i * es;
    switch (dt) {
    case SPK_F32: memcpy(e, &v, 4); break;
    case SPK_F64: {
      double x = v;
      memcpy(e, &x, 8);
      break;
    }
    case SPK_F16: {
      uint16_t h = spk_f32_to_f16(v);
      memcpy(e, &h, 2);
      break;
    }
    case SPK_BF16: {
      uint16_t h = spk_f32_to_bf16(v);
      memcpy(e, &h, 2);
      break;
    }
    default: ptl_fill_random(e, es); break;
    }
  }
}

/* Two rounds: outputs start from init pattern k, proxies from poison k;
 * the two poisons are one negative and one huge positive float, so a
 * stray read shows through max and min alike. */
static uint8_t init_byte(int k, size_t i) {
  return k ? (uint8_t)(i * 13 + 7) : 0;
}
static const uint8_t poison[2] = {0xa5, 0x5a};

/* ---- node maps -------------------------------------------------------- */

/* kind 0: random; 1: contiguous blocks; 2: round robin (non-contiguous);
 * 3: every rank on one node of several; 4: one node. */
static int random_map(int world, int kind, int *node_of) {
  int nnodes = kind == 4 ? 1 : (int)ptl_rng_range(kind == 3 ? 2 : 1, MAXN);
  int one = (int)ptl_rng_range(0, nnodes - 1), at = 0;
  for (int r = 0; r < world; r++) {
    switch (kind) {
    case 0: node_of[r] = (int)ptl_rng_range(0, nnodes - 1); break;
    case 1: /* advance now and then: later nodes may hold nothing */
      if (r > 0 && at < nnodes - 1 && ptl_rng_range(0, 1))
        at++;
      node_of[r] = at;
      break;
    case 2: node_of[r] = (r + one) % nnodes; break;
    default: node_of[r] = kind == 3 ? one : 0; break;
    }
  }
  return nnodes;
}

static void map_str(char *s, size_t n, const int *node_of, int world,
                    int nnodes) {
  int at = snprintf(s, n, "nodes %d map [", nnodes);
  for (int r = 0; r < world && at < (int)n; r++)
    at += snprintf(s + at, n - (size_t)at, "%s%d", r ? " " : "", node_of[r]);
  if (at < (int)n)
    snprintf(s + at, n - (size_t)at, "]");
}

/* ---- structure of a cut ------------------------------------------------ */

static uint64_t span_bytes(const spk_span *s) {
  uint64_t b = 1;
  for (int i = 0; i < s->nd; i++)
    b *= s->len[i];
  return b;
}

static int stream_empty(const spk_stream *s) {
  return s->npieces == 0 && s->bytes == 0;
}

static int here(const spk_cut *cut, const int *node_of, uint32_t rank,
                uint8_t t) {
  return node_of[rank] == cut->self || cut->proxy[rank * SPK_T_COUNT + t];
}

/* The earliest move before move i carrying the same source span (rank,
 * tensor, offset, lengths, strides) between the same two nodes, or -1:
 * such a move i is not sent again but copied on its node (written here
 * as a plain search, independently of the cut's hash set). */
static long first_same_source(const spk_plan *plan, const int *node_of,
                              size_t i) {
  const spk_move *m = &plan->moves[i];
  for (size_t j = 0; j < i; j++) {
    const spk_move *f = &plan->moves[j];
    if (node_of[f->src_rank] != node_of[m->src_rank] ||
        node_of[f->dst_rank] != node_of[m->dst_rank] ||
        f->src_rank != m->src_rank || f->src_t != m->src_t ||
        f->src_off != m->src_off || f->nd != m->nd)
      continue;
    int same = 1;
    for (int d = 0; d < m->nd; d++)
      same &= f->len[d] == m->len[d] && f->src_stride[d] == m->src_stride[d];
    if (same)
      return (long)j;
  }
  return -1;
}

/* A duplicate move's local copy, unscaled: m's destination and lengths,
 * read from where the first move f landed. */
static int is_dup_copy(const spk_move *c, const spk_move *f,
                       const spk_move *m) {
  if (c->dst_rank != m->dst_rank || c->dst_t != m->dst_t ||
      c->dst_off != m->dst_off || c->nd != m->nd ||
      c->src_rank != f->dst_rank || c->src_t != f->dst_t ||
      c->src_off != f->dst_off)
    return 0;
  for (int d = 0; d < m->nd; d++)
    if (c->len[d] != m->len[d] || c->dst_stride[d] != m->dst_stride[d] ||
        c->src_stride[d] != f->dst_stride[d])
      return 0;
  return 1;
}

/* What one node's cut must hold on its own: empty self streams, proxies
 * only of remote tensors, local steps that write its ranks and read only
 * what it holds, in the plan's order. */
static void check_one(const spk_plan *plan, const spk_cut *cut,
                      const int *node_of, int nnodes, int self,
                      const char *tag) {
  REQ(cut->nnodes == nnodes && cut->self == self, "%s: node %d: cut names "
      "node %d of %d", tag, self, cut->self, cut->nnodes);
  REQ(cut->direct == (plan->scale == SPK_SCALE_NONE), "%s: node %d: direct "
      "%d with scale %d", tag, self, cut->direct, plan->scale);
  for (int ph = 0; ph < 2; ph++) {
    const spk_plan *l = &cut->local[ph];
    REQ(stream_empty(&cut->send[ph][self]) &&
            stream_empty(&cut->recv[ph][self]),
        "%s: node %d: phase %d self stream not empty", tag, self, ph);
    REQ(l->world == plan->world && l->dtype == plan->dtype &&
            l->scale == plan->scale && l->red_op == plan->red_op,
        "%s: node %d: local[%d] lost the plan's world/dtype/scale/op", tag,
        self, ph);
  }
  for (int i = 0; i < plan->world * SPK_T_COUNT; i++)
    REQ(!cut->proxy[i] || node_of[i / SPK_T_COUNT] != self,
        "%s: node %d: proxy of its own rank %d", tag, self, i / SPK_T_COUNT);
  const spk_plan *l0 = &cut->local[0], *l1 = &cut->local[1];
  REQ(l0->nmoves == 0 && l1->nreduces == 0, "%s: node %d: local[0] has %zu "
      "moves, local[1] %zu reduce steps", tag, self, l0->nmoves,
      l1->nreduces);
  size_t j = 0;
  for (size_t i = 0; i < plan->nreduces; i++) {
    const spk_reduce *r = &plan->reduces[i];
    if (node_of[r->geo.dst_rank] != self)
      continue;
    REQ(j < l0->nreduces &&
            memcmp(&l0->reduces[j], r, sizeof(*r)) == 0,
        "%s: node %d: local reduce %zu is not plan reduce %zu", tag, self, j,
        i);
    j++;
    for (uint32_t k = r->src0; k < r->src0 + r->nsrc; k++) {
      const spk_rsrc *s = &l0->rsrcs[k];
      REQ(k < l0->nrsrcs && memcmp(s, &plan->rsrcs[k], sizeof(*s)) == 0,
          "%s: node %d: reduce source %u differs", tag, self, k);
      REQ(here(cut, node_of, s->rank, s->t), "%s: node %d: reduce %zu reads "
          "rank %u tensor %d, neither here nor proxied", tag, self, i,
          s->rank, s->t);
    }
  }
  REQ(j == l0->nreduces, "%s: node %d: %zu local reduce steps, want %zu", tag,
      self, l0->nreduces, j);
  j = 0;
  for (size_t i = 0; i < plan->nmoves; i++) {
    const spk_move *m = &plan->moves[i];
    if (node_of[m->dst_rank] != self)
      continue;
    if (cut->direct && node_of[m->src_rank] != self) {
      long f = first_same_source(plan, node_of, i);
      if (f < 0)
        continue; /* lands in place from its stream */
      REQ(j < l1->nmoves && is_dup_copy(&l1->moves[j], &plan->moves[f], m),
          "%s: node %d: local move %zu is not the copy of plan move %ld "
          "standing for plan move %zu", tag, self, j, f, i);
      j++;
      continue;
    }
    REQ(j < l1->nmoves && memcmp(&l1->moves[j], m, sizeof(*m)) == 0,
        "%s: node %d: local move %zu is not plan move %zu", tag, self, j, i);
    REQ(here(cut, node_of, m->src_rank, m->src_t), "%s: node %d: move %zu "
        "reads rank %u tensor %d, neither here nor proxied", tag, self, i,
        m->src_rank, m->src_t);
    j++;
  }
  REQ(j == l1->nmoves, "%s: node %d: %zu local moves, want %zu", tag, self,
      l1->nmoves, j);
}

/* Both ends of every stream agree; every cross-node reduce source is
 * carried once in phase 0 and every cross-node source span once per
 * destination node in phase 1;
 * what the nodes write adds up to the plan's bytes. */
static void check_cuts(const spk_plan *plan, const spk_cut *cuts,
                       const int *node_of, int nnodes, const char *tag) {
  uint8_t *seen_s = calloc(plan->nrsrcs + 1, 1);
  uint8_t *seen_m = calloc(plan->nmoves + 1, 1);
  uint64_t written = 0;
  for (int n = 0; n < nnodes; n++) {
    check_one(plan, &cuts[n], node_of, nnodes, n, tag);
    written += cuts[n].local[0].bytes + cuts[n].local[1].bytes;
  }
  for (int ph = 0; ph < 2; ph++)
    for (int S = 0; S < nnodes; S++)
      for (int D = 0; D < nnodes; D++) {
        if (S == D)
          continue;
        const spk_stream *st = &cuts[S].send[ph][D];
        const spk_stream *rt = &cuts[D].recv[ph][S];
        REQ(st->npieces == rt->npieces && st->bytes == rt->bytes,
            "%s: phase %d stream %d->%d: sender has %zu pieces / %llu bytes, "
            "receiver %zu / %llu", tag, ph, S, D, st->npieces,
            (unsigned long long)st->bytes, rt->npieces,
            (unsigned long long)rt->bytes);
        uint64_t sum = 0;
        for (size_t i = 0; i < st->npieces; i++) {
          const spk_piece *p = &st->pieces[i], *q = &rt->pieces[i];
          REQ(p->kind == q->kind && p->index == q->index && p->src == q->src,
              "%s: phase %d stream %d->%d: piece %zu differs between ends",
              tag, ph, S, D, i);
          REQ(p->kind == (ph ? SPK_PIECE_MOVE : SPK_PIECE_RSRC),
              "%s: phase %d stream %d->%d: piece %zu of kind %d", tag, ph, S,
              D, i, p->kind);
          uint32_t sr, dr;
          if (ph == 0) {
            REQ(p->index < plan->nreduces, "%s: bad reduce index", tag);
            const spk_reduce *r = &plan->reduces[p->index];
            REQ(p->src >= r->src0 && p->src < r->src0 + r->nsrc,
                "%s: phase 0 %d->%d piece %zu: source %u not of reduce %u",
                tag, S, D, i, p->src, p->index);
            sr = plan->rsrcs[p->src].rank, dr = r->geo.dst_rank;
            REQ(seen_s[p->src]++ == 0, "%s: reduce source %u carried twice",
                tag, p->src);
          } else {
            REQ(p->index < plan->nmoves, "%s: bad move index", tag);
            const spk_move *m = &plan->moves[p->index];
            sr = m->src_rank, dr = m->dst_rank;
            REQ(seen_m[p->index]++ == 0, "%s: move %u carried twice", tag,
                p->index);
          }
          REQ(node_of[sr] == S && node_of[dr] == D, "%s: phase %d stream "
              "%d->%d: piece %zu goes from rank %u to rank %u", tag, ph, S, D,
              i, sr, dr);
          spk_span a, b;
          spk_piece_span(plan, &cuts[S], p, 0, &a);
          spk_piece_span(plan, &cuts[D], q, 1, &b);
          REQ(span_bytes(&a) == span_bytes(&b), "%s: phase %d stream "
              "%d->%d: piece %zu spans %llu bytes sent, %llu received", tag,
              ph, S, D, i, (unsigned long long)span_bytes(&a),
              (unsigned long long)span_bytes(&b));
          sum += span_bytes(&a);
        }
        REQ(sum == st->bytes, "%s: phase %d stream %d->%d: pieces hold %llu "
            "bytes, stream says %llu", tag, ph, S, D,
            (unsigned long long)sum, (unsigned long long)st->bytes);
        if (ph == 1 && cuts[S].direct)
          written += sum;
      }
  for (size_t i = 0; i < plan->nreduces; i++) {
    const spk_reduce *r = &plan->reduces[i];
    for (uint32_t k = r->src0; k < r->src0 + r->nsrc; k++)
      REQ(seen_s[k] == (node_of[plan->rsrcs[k].rank] !=
                        node_of[r->geo.dst_rank]),
          "%s: reduce %zu source %u carried %d times", tag, i, k, seen_s[k]);
  }
  for (size_t i = 0; i < plan->nmoves; i++) {
    const spk_move *m = &plan->moves[i];
    REQ(seen_m[i] == (node_of[m->src_rank] != node_of[m->dst_rank] &&
                      first_same_source(plan, node_of, i) < 0),
        "%s: move %zu carried %d times", tag, i, seen_m[i]);
  }
  REQ(written == plan->bytes, "%s: nodes write %llu bytes, the plan %llu",
      tag, (unsigned long long)written, (unsigned long long)plan->bytes);
  free(seen_s);
  free(seen_m);
}

/* With every rank on node `one`, that node's cut is the plan itself and
 * the others hold nothing. */
static void check_uncut(const spk_plan *plan, const spk_cut *cuts,
                        int nnodes, int one, const char *tag) {
  for (int n = 0; n < nnodes; n++) {
    const spk_cut *c = &cuts[n];
    for (int ph = 0; ph < 2; ph++)
      for (int k = 0; k < nnodes; k++)
        REQ(stream_empty(&c->send[ph][k]) && stream_empty(&c->recv[ph][k]),
            "%s: one node holds all: node %d has a phase %d stream with %d",
            tag, n, ph, k);
    for (int i = 0; i < plan->world * SPK_T_COUNT; i++)
      REQ(!c->proxy[i], "%s: one node holds all: node %d has proxy %d", tag,
          n, i);
    const spk_plan *l0 = &c->local[0], *l1 = &c->local[1];
    if (n != one) {
      REQ(l0->nreduces == 0 && l1->nmoves == 0 && l0->bytes == 0 &&
              l1->bytes == 0,
          "%s: node %d without ranks has steps", tag, n);
      continue;
    }
    REQ(l0->nreduces == plan->nreduces && l1->nmoves == plan->nmoves &&
            l0->nrsrcs == plan->nrsrcs && l0->nmoves == 0 &&
            l1->nreduces == 0 && l0->bytes + l1->bytes == plan->bytes,
        "%s: node %d holding all: %zu/%zu reduces, %zu/%zu moves", tag, n,
        l0->nreduces, plan->nreduces, l1->nmoves, plan->nmoves);
    REQ((plan->nreduces == 0 ||
         memcmp(l0->reduces, plan->reduces,
                plan->nreduces * sizeof(spk_reduce)) == 0) &&
            (plan->nrsrcs == 0 ||
             memcmp(l0->rsrcs, plan->rsrcs,
                    plan->nrsrcs * sizeof(spk_rsrc)) == 0) &&
            (plan->nmoves == 0 ||
             memcmp(l1->moves, plan->moves,
                    plan->nmoves * sizeof(spk_move)) == 0),
        "%s: node %d holding all: local steps differ from the plan's", tag,
        n);
  }
}

/* ---- stream transport ------------------------------------------------- */

/* spk_span_walk's callback state: the byte vector of a stream, the
 * tensor a piece walks (every run must stay inside it) and the end of the
 * last run (a run that touches it should have been merged). */
typedef struct {
  uint8_t *buf;
  size_t len, cap, at;
  const uint8_t *lo, *hi;
  uint8_t *prev_end;
  uint64_t calls;
  int bad; /* 1: outside the tensor, 2: unmerged, 3: empty, 4: overrun */
} wire;

static int run_ok(wire *w, uint8_t *p, uint64_t len) {
  if (len == 0)
    w->bad = w->bad ? w->bad : 3;
  else if (p < w->lo || p > w->hi || (uint64_t)(w->hi - p) < len)
    w->bad = w->bad ? w->bad : 1;
  else if (w->calls > 0 && p == w->prev_end)
    w->bad = w->bad ? w->bad : 2;
  w->calls++;
  w->prev_end = p + len;
  return w->bad == 0;
}

static void pack_fn(void *arg, uint8_t *p, uint64_t len) {
  wire *w = arg;
  if (!run_ok(w, p, len))
    return;
  if (w->len + len > w->cap) {
    w->cap = (w->len + len) * 2;
    w->buf = realloc(w->buf, w->cap);
  }
  memcpy(w->buf + w->len, p, len);
  w->len += len;
}

static void unpack_fn(void *arg, uint8_t *p, uint64_t len) {
  wire *w = arg;
  if (!run_ok(w, p, len))
    return;
  if (w->at + len > w->len) {
    w->bad = 4;
    return;
  }
  memcpy(p, w->buf + w->at, len);
  w->at += len;
}

static const char *const bad_name[] = {"", "leaves its tensor",
                                       "touches the run before it (unmerged)",
                                       "is empty", "overruns the stream"};

/* One node's view of the world: its ranks' tensors and, for each remote
 * tensor, a proxy (when the cut asks for one) or a guard: both full size
 * and poison-filled, plus GUARD bytes past the end. */
typedef struct {
  uint8_t *b[NT];
} nodemem;

/* Walk every piece of a stream's end on node n's memory with fn. */
static void walk_end(const spk_plan *plan, const spk_cut *cut,
                     const spk_stream *s, int recv_side, const nodemem *mem,
                     const size_t *sz, const int *node_of, wire *w,
                     const char *what) {
  for (size_t i = 0; i < s->npieces; i++) {
    spk_span sp;
    spk_piece_span(plan, cut, &s->pieces[i], recv_side, &sp);
    int k = (int)sp.rank * SPK_T_COUNT + sp.t;
    REQ(sp.rank < (uint32_t)plan->world && sp.t < SPK_T_COUNT, "%s: piece "
        "%zu spans rank %u tensor %d", what, i, sp.rank, sp.t);
    REQ(node_of[sp.rank] == cut->self || (recv_side && cut->proxy[k]),
        "%s: piece %zu spans rank %u tensor %d, on node %d and not proxied",
        what, i, sp.rank, sp.t, node_of[sp.rank]);
    w->lo = mem->b[k], w->hi = mem->b[k] + sz[k];
    w->calls = 0;
    size_t before = recv_side ? w->at : w->len;
    uint64_t calls = spk_span_walk(&sp, mem->b[k], recv_side ? unpack_fn
                                                             : pack_fn, w);
    REQ(w->bad == 0, "%s: piece %zu: a run %s", what, i, bad_name[w->bad]);
    REQ(calls == w->calls, "%s: piece %zu: walk says %llu calls, made %llu",
        what, i, (unsigned long long)calls, (unsigned long long)w->calls);
    size_t moved = (recv_side ? w->at : w->len) - before;
    REQ(moved == span_bytes(&sp), "%s: piece %zu walked %zu bytes of %llu",
        what, i, moved, (unsigned long long)span_bytes(&sp));
  }
}

static void run_streams(const spk_plan *const *plans, const spk_cut *cuts,
                        int ph,
                        nodemem *mem, const size_t *sz, const int *node_of,
                        int nnodes, const char *tag) {
  for (int S = 0; S < nnodes; S++)
    for (int D = 0; D < nnodes; D++) {
      if (S == D)
        continue;
      const spk_stream *st = &cuts[S].send[ph][D];
      const spk_stream *rt = &cuts[D].recv[ph][S];
      char what[PTL_TAG + 64];
      wire w = {0};
      snprintf(what, sizeof(what), "%s: phase %d %d->%d send", tag, ph, S, D);
      walk_end(plans[S], &cuts[S], st, 0, &mem[S], sz, node_of, &w, what);
      REQ(w.len == st->bytes && w.len == rt->bytes, "%s: packed %zu bytes, "
          "sender's stream says %llu, receiver's %llu", what, w.len,
          (unsigned long long)st->bytes, (unsigned long long)rt->bytes);
      snprintf(what, sizeof(what), "%s: phase %d %d->%d recv", tag, ph, S, D);
      walk_end(plans[D], &cuts[D], rt, 1, &mem[D], sz, node_of, &w, what);
      REQ(w.at == w.len, "%s: unpacked %zu of %zu bytes", what, w.at, w.len);
      free(w.buf);
    }
}

/* ---- one distributed run ------------------------------------------------ */

/* Run the plans cut over node_of as the nodes would (node n cuts
 * plans[n]: the whole plan, or its own part), round k (init pattern and
 * poison k), and compare with want[k]. */
static void run_nodes(const spk_plan *const *plans, const ptl_bufs *ref,
                      uint8_t *const (*want)[MAXW], const int *node_of,
                      int nnodes, const char *tag) {
  int world = plans[0]->world, whole = plans[0]->mine == NULL;
  spk_cut cuts[MAXN];
  for (int n = 0; n < nnodes; n++) {
    spk_err err = {{0}};
    int rc = spk_plan_cut(plans[n], node_of, nnodes, n, &cuts[n], &err);
    REQ(rc == SPK_OK, "%s: cut for node %d: %d %s", tag, n, rc, err.msg);
  }
  if (whole)
    check_cuts(plans[0], cuts, node_of, nnodes, tag);
  int one = node_of[0], shared = 1;
  for (int r = 1; r < world; r++)
    shared &= node_of[r] == one;
  if (shared && whole)
    check_uncut(plans[0], cuts, nnodes, one, tag);

  for (int k = 0; k < 2; k++) {
    nodemem mem[MAXN];
    for (int n = 0; n < nnodes; n++)
      for (int i = 0; i < world * SPK_T_COUNT; i++) {
        size_t s = ref->sz[i];
        uint8_t *p = mem[n].b[i] = malloc(s + GUARD);
        memset(p + s, 0xee, GUARD);
        if (node_of[i / SPK_T_COUNT] != n)
          memset(p, poison[k], s);
        else if (i % SPK_T_COUNT == SPK_T_IN)
          memcpy(p, ref->b[i], s);
        else
          for (size_t j = 0; j < s; j++)
            p[j] = init_byte(k, j);
      }
    for (int ph = 0; ph < 2; ph++) {
      run_streams(plans, cuts, ph, mem, ref->sz, node_of, nnodes, tag);
      for (int n = 0; n < nnodes; n++)
        spk_plan_exec(&cuts[n].local[ph], mem[n].b);
    }
    for (int n = 0; n < nnodes; n++)
      for (int i = 0; i < world * SPK_T_COUNT; i++) {
        int r = i / SPK_T_COUNT;
        size_t s = ref->sz[i], j = 0;
        const uint8_t *p = mem[n].b[i];
        while (j < GUARD && p[s + j] == 0xee)
          j++;
        REQ(j == GUARD, "%s round %d: node %d wrote past rank %d tensor %d",
            tag, k, n, r, i % SPK_T_COUNT);
        if (node_of[r] == n && i % SPK_T_COUNT == SPK_T_OUT) {
          for (j = 0; j < s && p[j] == want[k][r][j]; j++)
            ;
          REQ(j == s, "%s round %d: node %d rank %d output byte %zu of %zu "
              "is %#x, want %#x", tag, k, n, r, j, s, p[j], want[k][r][j]);
        } else if (node_of[r] == n) {
          REQ(memcmp(p, ref->b[i], s) == 0, "%s round %d: node %d changed "
              "rank %d's input", tag, k, n, r);
        } else if (!cuts[n].proxy[i]) {
          for (j = 0; j < s && p[j] == poison[k]; j++)
            ;
          REQ(j == s, "%s round %d: node %d wrote remote rank %d tensor %d "
              "(no proxy) at byte %zu", tag, k, n, r, i % SPK_T_COUNT, j);
        }
      }
    for (int n = 0; n < nnodes; n++)
      for (int i = 0; i < world * SPK_T_COUNT; i++)
        free(mem[n].b[i]);
  }
  for (int n = 0; n < nnodes; n++)
    spk_cut_free(&cuts[n]);
}

/* ---- per-node plans ---------------------------------------------------- */

static uint64_t geo_len(const uint64_t *len, int nd) {
  uint64_t b = 1;
  for (int i = 0; i < nd; i++)
    b *= len[i];
  return b;
}

/* A reduce step's geometry without src_rank/src_t/src_off, which
 * reduce steps leave unused (plan.h). */
static int same_reduce_geo(const spk_move *a, const spk_move *b) {
  spk_move x = *a, y = *b;
  x.src_rank = y.src_rank = 0;
  x.src_t = y.src_t = 0;
  x.src_off = y.src_off = 0;
  return memcmp(&x, &y, sizeof(x)) == 0;
}

static int move_has(const spk_move *m, const uint8_t *mine) {
  return mine[m->src_rank] || mine[m->dst_rank];
}

/* Node n's part is the whole plan's steps that touch its ranks, in the
 * whole plan's order; a reduce step landing elsewhere keeps only n's
 * sources; bytes counts what lands on n. */
static void check_part(const spk_plan *whole, const spk_plan *part,
                       const uint8_t *mine, int n, const char *tag) {
  size_t k = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < whole->nmoves; i++) {
    const spk_move *m = &whole->moves[i];
    if (!move_has(m, mine))
      continue;
    REQ(k < part->nmoves && memcmp(&part->moves[k], m, sizeof(*m)) == 0,
        "%s: node %d's part: move %zu is not the whole plan's move %zu",
        tag, n, k, i);
    k++;
  }
  REQ(k == part->nmoves, "%s: node %d's part has %zu moves, want %zu", tag,
      n, part->nmoves, k);
  size_t q = 0, s = 0;
  for (size_t i = 0; i < whole->nreduces; i++) {
    const spk_reduce *r = &whole->reduces[i];
    int here = mine[r->geo.dst_rank];
    uint32_t want = 0;
    for (uint32_t j = r->src0; j < r->src0 + r->nsrc; j++)
      if (here || mine[whole->rsrcs[j].rank]) {
        REQ(s < part->nrsrcs && part->rsrcs[s].rank == whole->rsrcs[j].rank &&
                part->rsrcs[s].t == whole->rsrcs[j].t &&
                part->rsrcs[s].off == whole->rsrcs[j].off,
            "%s: node %d's part: reduce source %zu differs", tag, n, s);
        s++, want++;
      }
    if (want == 0)
      continue;
    REQ(q < part->nreduces && part->reduces[q].nsrc == want &&
            same_reduce_geo(&part->reduces[q].geo, &r->geo),
        "%s: node %d's part: reduce step %zu is not the whole plan's %zu",
        tag, n, q, i);
    q++;
  }
  REQ(q == part->nreduces && s == part->nrsrcs, "%s: node %d's part has "
      "%zu reduce steps and %zu sources, want %zu and %zu", tag, n,
      part->nreduces, part->nrsrcs, q, s);
  for (size_t i = 0; i < whole->nmoves; i++)
    bytes += mine[whole->moves[i].dst_rank] ? geo_len(whole->moves[i].len,
                                                      whole->moves[i].nd) : 0;
  for (size_t i = 0; i < whole->nreduces; i++)
    bytes += mine[whole->reduces[i].geo.dst_rank]
                 ? geo_len(whole->reduces[i].geo.len, whole->reduces[i].geo.nd)
                 : 0;
  REQ(part->bytes == bytes, "%s: node %d's part says %llu bytes land there, "
      "want %llu", tag, n, (unsigned long long)part->bytes,
      (unsigned long long)bytes);
}

/* Every node plans only its part, as spcolld does across nodes: each
 * part is the whole plan filtered (check_part), and the nodes, each
 * cutting its own part, still compute the reference outputs. */
static void run_parts(const ocase *c, const spk_plan *whole,
                      const ptl_bufs *b, uint8_t *const (*want)[MAXW],
                      const int *node_of, int nnodes, const char *tag) {
  spk_plan parts[MAXN];
  const spk_plan *pp[MAXN];
  char ptag[PTL_TAG + 112];
  snprintf(ptag, sizeof(ptag), "%s parts", tag);
  for (int n = 0; n < nnodes; n++) {
    uint8_t mine[MAXW];
    for (int r = 0; r < c->world; r++)
      mine[r] = node_of[r] == n;
    spk_err err = {{0}};
    spk_plan_init(&parts[n], c->world);
    int rc = spk_plan_part(&parts[n], mine, &err);
    if (rc == SPK_OK)
      rc = spk_plan_build(c->argp, c->world, &parts[n], &err);
    REQ(rc == SPK_OK, "%s: node %d's part: %d %s", ptag, n, rc, err.msg);
    check_part(whole, &parts[n], mine, n, ptag);
    pp[n] = &parts[n];
  }
  run_nodes(pp, b, want, node_of, nnodes, ptag);
  for (int n = 0; n < nnodes; n++)
    spk_plan_free(&parts[n]);
}

/* Counts per op kind, scale and node count, so a run can show what it
 * covered. */
static int cover[K_COUNT][3], cover_nodes[MAXN + 1], cover_streams;

/* Plan one op, run the reference twice (two output init patterns), then
 * the nodes under `nmaps` random maps and one with a single node. */
static void run_case(const ocase *c, int kind, int nmaps, int it,
                     const char *tag) {
  int world = c->world;
  spk_plan plan;
  spk_plan_init(&plan, world);
  spk_err err = {{0}};
  int rc = spk_plan_build(c->argp, world, &plan, &err);
  REQ(rc == SPK_OK, "%s: plan_build: %d %s", tag, rc, err.msg);
  cover[kind][plan.scale]++;
  ptl_bufs b;
  ptl_bufs_alloc(&b, c->argp, world, 0);
  for (int r = 0; r < world; r++)
    fill_input(b.b[PTL_IN(r)], b.sz[PTL_IN(r)], plan.dtype);
  uint8_t *want[2][MAXW];
  for (int k = 0; k < 2; k++) {
    for (int r = 0; r < world; r++)
      for (size_t j = 0; j < b.sz[PTL_OUT(r)]; j++)
        b.b[PTL_OUT(r)][j] = init_byte(k, j);
    spk_plan_exec(&plan, b.b);
    for (int r = 0; r < world; r++) {
      want[k][r] = malloc(b.sz[PTL_OUT(r)] + 1);
      memcpy(want[k][r], b.b[PTL_OUT(r)], b.sz[PTL_OUT(r)]);
    }
  }
  for (int m = 0; m <= nmaps; m++) {
    int node_of[MAXW];
    int nnodes = random_map(world, m == nmaps ? 4 : (it + m) % 4, node_of);
    char mtag[PTL_TAG + 96], ms[64];
    map_str(ms, sizeof(ms), node_of, world, nnodes);
    snprintf(mtag, sizeof(mtag), "%s %s", tag, ms);
    const spk_plan *same[MAXN];
    for (int n = 0; n < nnodes; n++)
      same[n] = &plan;
    run_nodes(same, &b, (uint8_t *const(*)[MAXW])want, node_of, nnodes,
              mtag);
    run_parts(c, &plan, &b, (uint8_t *const(*)[MAXW])want, node_of, nnodes,
              mtag);
    cover_nodes[nnodes]++;
    for (int r = 1; r < world; r++)
      if (node_of[r] != node_of[0]) {
        cover_streams++;
        break;
      }
  }
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < world; r++)
      free(want[k][r]);
  ptl_bufs_free(&b);
  spk_plan_free(&plan);
}

/* Every kind under every scale, dtypes cycling, per seed. */
static void random_run(uint64_t seed, int rounds) {
  ptl_rng_seed(seed);
  int it = 0;
  for (int round = 0; round < rounds; round++)
    for (int scale = 0; scale < 3; scale++)
      for (int kind = 0; kind < K_COUNT; kind++, it++) {
        int world = (int)ptl_rng_range(1, MAXW);
        spk_dtype dt = ptl_dtypes[(it + round) % 8];
        char tag[PTL_TAG];
        snprintf(tag, sizeof(tag), "seed %#llx case %d (%s w %d %s scale %d)",
                 (unsigned long long)seed, it, kind_name[kind], world,
                 spk_dtype_name(dt), scale);
        ocase c;
        mk_random(&c, kind, world, dt, scale, tag);
        run_case(&c, kind, 3, it, tag);
      }
}

START_TEST(test_random) {
  static const uint64_t seeds[] = {0xc077ull, 0x5eed2ull, 0xdeadbeefull,
                                   0x1234567ull};
  random_run(seeds[_i], 100);
}
END_TEST

/* Every op kind under every scale was planned, cut over 1..4 nodes, and
 * most maps put ranks on more than one node. */
START_TEST(test_coverage) {
  memset(cover, 0, sizeof(cover));
  memset(cover_nodes, 0, sizeof(cover_nodes));
  cover_streams = 0;
  random_run(0xc0fe7ull, 4);
  for (int k = 0; k < K_COUNT; k++)
    for (int s = 0; s < 3; s++)
      ck_assert_msg(cover[k][s] > 0, "%s with scale %d never ran",
                    kind_name[k], s);
  for (int n = 1; n <= MAXN; n++)
    ck_assert_msg(cover_nodes[n] > 0, "never cut over %d nodes", n);
  ck_assert_msg(cover_streams > 0, "no map ever split the ranks");
}
END_TEST

/* ---- by hand ----------------------------------------------------------- */

static void cut_of(const spk_plan *plan, const int *node_of, int nnodes,
                   int self, spk_cut *cut) {
  spk_err err = {{0}};
  ck_assert_int_eq(spk_plan_cut(plan, node_of, nnodes, self, cut, &err),
                   SPK_OK);
}

/* all_gather of 2 bytes per rank, ranks on nodes 0 and 1: node 0 copies
 * its own piece and sends it to node 1 in one phase-1 stream; unscaled,
 * the move lands in place; scaled up, in a proxy of rank 1's input. */
START_TEST(test_by_hand_gather) {
  for (int scale = 0; scale < 2; scale++) {
    ocase c;
    int64_t shape[1] = {2};
    base(&c, SPK_OP_ALL_GATHER, 2, SPK_U8,
         (uint32_t)scale << SPK_FLAG_SCALE_SHIFT, 1, shape, 1, 0);
    finish(&c, "by hand gather");
    spk_plan plan;
    spk_plan_init(&plan, 2);
    spk_err err = {{0}};
    ck_assert_int_eq(spk_plan_build(c.argp, 2, &plan, &err), SPK_OK);
    ck_assert_uint_eq(plan.nmoves, 4);
    int node_of[2] = {0, 1};
    spk_cut cut;
    cut_of(&plan, node_of, 2, 0, &cut);
    ck_assert_int_eq(cut.direct, !scale);
    ck_assert_uint_eq(cut.send[1][1].npieces, 1);
    ck_assert_uint_eq(cut.send[1][1].bytes, 2);
    ck_assert_uint_eq(cut.recv[1][1].npieces, 1);
    ck_assert_uint_eq(cut.recv[1][1].bytes, 2);
    ck_assert_uint_eq(cut.send[0][1].npieces + cut.recv[0][1].npieces, 0);
    ck_assert_uint_eq(cut.local[1].nmoves, scale ? 2 : 1);
    ck_assert_int_eq(cut.proxy[PTL_IN(1)], scale);
    ck_assert_int_eq(cut.proxy[PTL_OUT(1)] + cut.proxy[PTL_IN(0)] +
                         cut.proxy[PTL_OUT(0)],
                     0);
    spk_span sp;
    spk_piece_span(&plan, &cut, &cut.recv[1][1].pieces[0], 1, &sp);
    /* Unscaled it lands in rank 0's output at byte 2; scaled, in the
     * proxy of rank 1's input at byte 0. */
    ck_assert_uint_eq(sp.rank, scale ? 1 : 0);
    ck_assert_uint_eq(sp.t, scale ? SPK_T_IN : SPK_T_OUT);
    ck_assert_uint_eq(sp.off, scale ? 0 : 2);
    ck_assert_uint_eq(span_bytes(&sp), 2);
    spk_cut_free(&cut);
    spk_plan_free(&plan);
  }
}
END_TEST

/* all_gather of 2 bytes per rank, 4 ranks on nodes [0 0 1 1]: node 0
 * gets ranks 2 and 3's pieces once each, not once per local rank; the
 * second local rank copies them from the first one's output (unscaled)
 * or reads the proxy (scaled). */
START_TEST(test_by_hand_gather_dedup) {
  for (int scale = 0; scale < 2; scale++) {
    ocase c;
    int64_t shape[1] = {2};
    base(&c, SPK_OP_ALL_GATHER, 4, SPK_U8,
         (uint32_t)scale << SPK_FLAG_SCALE_SHIFT, 1, shape, 1, 0);
    finish(&c, "by hand gather dedup");
    spk_plan plan;
    spk_plan_init(&plan, 4);
    spk_err err = {{0}};
    ck_assert_int_eq(spk_plan_build(c.argp, 4, &plan, &err), SPK_OK);
    ck_assert_uint_eq(plan.nmoves, 16);
    int node_of[4] = {0, 0, 1, 1};
    spk_cut cut;
    cut_of(&plan, node_of, 2, 0, &cut);
    ck_assert_uint_eq(cut.recv[1][1].npieces, 2);
    ck_assert_uint_eq(cut.recv[1][1].bytes, 4);
    ck_assert_uint_eq(cut.send[1][1].npieces, 2);
    /* 4 moves among ranks 0 and 1, plus 2 copies (unscaled) or the 4
     * moves reading the proxies (scaled) */
    ck_assert_uint_eq(cut.local[1].nmoves, scale ? 8 : 6);
    ck_assert_uint_eq(cut.local[1].bytes + (scale ? 0 : 4), 16);
    spk_cut_free(&cut);
    spk_plan_free(&plan);
  }
}
END_TEST

/* all_reduce of 4 float32 over 2 ranks on 2 nodes: chunk c (2 elements)
 * is reduced on rank c. Node 0 receives rank 1's chunk 0 in phase 0 into
 * a proxy of rank 1's input, sends its chunk 1; in phase 1 it sends its
 * reduced chunk 0 to rank 1's output and receives chunk 1. */
START_TEST(test_by_hand_reduce) {
  ocase c;
  int64_t shape[1] = {4};
  base(&c, SPK_OP_ALL_REDUCE, 2, SPK_F32, 0, 1, shape, 0, 0);
  finish(&c, "by hand reduce");
  spk_plan plan;
  spk_plan_init(&plan, 2);
  spk_err err = {{0}};
  ck_assert_int_eq(spk_plan_build(c.argp, 2, &plan, &err), SPK_OK);
  int node_of[2] = {0, 1};
  spk_cut cut;
  cut_of(&plan, node_of, 2, 0, &cut);
  ck_assert_uint_eq(cut.recv[0][1].npieces, 1);
  ck_assert_uint_eq(cut.recv[0][1].bytes, 8);
  ck_assert_uint_eq(cut.send[0][1].npieces, 1);
  ck_assert_uint_eq(cut.send[0][1].bytes, 8);
  ck_assert_uint_eq(cut.local[0].nreduces, 1);
  ck_assert_uint_eq(cut.local[1].nmoves, 0);
  ck_assert_uint_eq(cut.send[1][1].bytes, 8);
  ck_assert_uint_eq(cut.recv[1][1].bytes, 8);
  ck_assert_int_eq(cut.proxy[PTL_IN(1)], 1);
  spk_span sp;
  spk_piece_span(&plan, &cut, &cut.recv[0][1].pieces[0], 1, &sp);
  ck_assert_uint_eq(sp.rank, 1);
  ck_assert_uint_eq(sp.t, SPK_T_IN);
  ck_assert_uint_eq(sp.off, 0);
  spk_piece_span(&plan, &cut, &cut.send[0][1].pieces[0], 0, &sp);
  ck_assert_uint_eq(sp.rank, 0);
  ck_assert_uint_eq(sp.off, 8);
  spk_piece_span(&plan, &cut, &cut.recv[1][1].pieces[0], 1, &sp);
  ck_assert_uint_eq(sp.rank, 0);
  ck_assert_uint_eq(sp.t, SPK_T_OUT);
  ck_assert_uint_eq(sp.off, 8);
  spk_cut_free(&cut);
  /* Values: rank 0 holds 1,2,3,4, rank 1 10,20,30,40. */
  ptl_bufs b;
  ptl_bufs_alloc(&b, c.argp, 2, 0);
  float x0[4] = {1, 2, 3, 4}, x1[4] = {10, 20, 30, 40};
  float s[4] = {11, 22, 33, 44};
  memcpy(b.b[PTL_IN(0)], x0, 16);
  memcpy(b.b[PTL_IN(1)], x1, 16);
  uint8_t *want[2][MAXW] = {{(uint8_t *)s, (uint8_t *)s},
                            {(uint8_t *)s, (uint8_t *)s}};
  const spk_plan *both[2] = {&plan, &plan};
  run_nodes(both, &b, (uint8_t *const(*)[MAXW])want, node_of, 2,
            "by hand reduce");
  ptl_bufs_free(&b);
  spk_plan_free(&plan);
}
END_TEST

/* ---- spk_span_walk ------------------------------------------------------- */

typedef struct {
  uint64_t off[64], len[64];
  int n;
  uint8_t *base;
} runs;

static void record(void *arg, uint8_t *p, uint64_t len) {
  runs *r = arg;
  if (r->n < 64)
    r->off[r->n] = (uint64_t)(p - r->base), r->len[r->n] = len;
  r->n++;
}

static void walk(const spk_span *sp, uint8_t *base, runs *r) {
  memset(r, 0, sizeof(*r));
  r->base = base;
  uint64_t calls = spk_span_walk(sp, base, record, r);
  ck_assert_uint_eq(calls, (uint64_t)r->n);
}

START_TEST(test_walk_by_hand) {
  static uint8_t mem[4096];
  runs r;
  /* [2][3][4 bytes] dense: one run of 24 at the offset */
  uint64_t len[3] = {2, 3, 4}, st[3] = {12, 4, 0};
  spk_span sp = {0, 0, 3, 5, len, st};
  walk(&sp, mem, &r);
  ck_assert_int_eq(r.n, 1);
  ck_assert_uint_eq(r.off[0], 5);
  ck_assert_uint_eq(r.len[0], 24);
  /* rows dense, planes apart: two runs of 12 */
  uint64_t st2[3] = {24, 4, 0};
  sp.stride = st2;
  walk(&sp, mem, &r);
  ck_assert_int_eq(r.n, 2);
  ck_assert_uint_eq(r.off[1], 29);
  ck_assert_uint_eq(r.len[0], 12);
  ck_assert_uint_eq(r.len[1], 12);
  /* rows apart: six runs of 4 */
  uint64_t st3[3] = {100, 8, 0};
  sp.stride = st3;
  walk(&sp, mem, &r);
  ck_assert_int_eq(r.n, 6);
  ck_assert_uint_eq(r.off[5], 5 + 100 + 16);
  /* a dense outer dim over a gappy inner one: [3][2][4] with strides 8, 4
   * is dense too, across the outer dim */
  uint64_t len4[3] = {3, 2, 4}, st4[3] = {8, 4, 0};
  spk_span sp4 = {0, 0, 3, 0, len4, st4};
  walk(&sp4, mem, &r);
  ck_assert_int_eq(r.n, 1);
  ck_assert_uint_eq(r.len[0], 24);
  /* one dim: one run */
  uint64_t len5[1] = {7}, st5[1] = {0};
  spk_span sp5 = {0, 0, 1, 3, len5, st5};
  walk(&sp5, mem, &r);
  ck_assert_int_eq(r.n, 1);
  ck_assert_uint_eq(r.off[0], 3);
  ck_assert_uint_eq(r.len[0], 7);
}
END_TEST

/* Random spans against naive enumeration: the calls are the C-order runs
 * with every touching neighbour merged, and nothing else. */
START_TEST(test_walk_random) {
  static uint8_t mem[1 << 16];
  ptl_rng_seed(0x3a1cull);
  for (int it = 0; it < 3000; it++) {
    int nd = (int)ptl_rng_range(1, 4);
    uint64_t len[4], st[4] = {0};
    len[nd - 1] = (uint64_t)ptl_rng_range(1, 5);
    uint64_t extent = len[nd - 1];
    for (int i = nd - 2; i >= 0; i--) {
      len[i] = (uint64_t)ptl_rng_range(1, 3);
      /* dense half the time, else a gap of 1..3 */
      st[i] = extent + (ptl_rng_range(0, 1) ? 0 : (uint64_t)ptl_rng_range(1, 3));
      extent = st[i] * len[i];
    }
    spk_span sp = {0, 0, (uint8_t)nd, (uint64_t)ptl_rng_range(0, 7), len, st};
    uint64_t want_off[64], want_len[64];
    int nw = 0;
    uint64_t nruns = 1;
    for (int i = 0; i < nd - 1; i++)
      nruns *= len[i];
    for (uint64_t q = 0; q < nruns; q++) {
      uint64_t off = sp.off, rem = q;
      for (int i = nd - 2; i >= 0; i--)
        off += (rem % len[i]) * st[i], rem /= len[i];
      if (nw > 0 && want_off[nw - 1] + want_len[nw - 1] == off)
        want_len[nw - 1] += len[nd - 1];
      else
        want_off[nw] = off, want_len[nw] = len[nd - 1], nw++;
    }
    runs r;
    walk(&sp, mem, &r);
    int same = r.n == nw;
    for (int i = 0; same && i < nw; i++)
      same = r.off[i] == want_off[i] && r.len[i] == want_len[i];
    REQ(same, "walk case %d (nd %d): %d runs, want %d", it, nd, r.n, nw);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("plan_cut");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_random, 0, 4);
  tcase_add_test(tc, test_coverage);
  tcase_add_test(tc, test_by_hand_gather);
  tcase_add_test(tc, test_by_hand_gather_dedup);
  tcase_add_test(tc, test_by_hand_reduce);
  tcase_add_test(tc, test_walk_by_hand);
  tcase_add_test(tc, test_walk_random);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
