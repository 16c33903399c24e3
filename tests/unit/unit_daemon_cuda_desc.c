/* The GPU movers' descriptors, executed on the host: plans of every op
 * (random shapes, dtypes and worlds) are flattened into the kernel's
 * descriptor lists (kernels/gpu_desc.c) and routed over emulated devices
 * as the NCCL mover does (daemon/gpu/gpu_route.c, memcpy standing in for
 * ncclSend/ncclRecv). Each list is executed chunk by chunk with the very
 * geometry helpers the kernel uses (kernels/plan_cuda.h), and every output
 * byte must equal spk_plan_exec's. Also: which plans are exactly one NCCL
 * collective. What this cannot check is the kernel's arithmetic on a GPU:
 * tests/gpu does that. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "gpu_desc.h"
#include "gpu_route.h"
#include "half.h"
#include "planner.h"

#define MAXW 5

static uint64_t rng_state;

static uint64_t rng(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int64_t range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rng() % (uint64_t)(hi - lo + 1));
}

/* ---- the host emulation of one kernel launch ------------------------ */

typedef struct {
  spk_dtype dt;
  int scale, red_op, world;
} emu_params;

static double load(spk_dtype dt, const uint8_t *p) {
  switch (dt) {
  case SPK_F32: { float v; memcpy(&v, p, 4); return v; }
  case SPK_F64: { double v; memcpy(&v, p, 8); return v; }
  case SPK_F16: { uint16_t v; memcpy(&v, p, 2); return spk_f16_to_f32(v); }
  case SPK_BF16: { uint16_t v; memcpy(&v, p, 2); return spk_bf16_to_f32(v); }
  case SPK_I32: { int32_t v; memcpy(&v, p, 4); return v; }
  default: { int64_t v; memcpy(&v, p, 8); return (double)v; }
  }
}

static void store(spk_dtype dt, uint8_t *p, double x) {
  switch (dt) {
  case SPK_F32: { float v = (float)x; memcpy(p, &v, 4); break; }
  case SPK_F64: memcpy(p, &x, 8); break;
  case SPK_F16: {
    uint16_t v = spk_f32_to_f16((float)x);
    memcpy(p, &v, 2);
    break;
  }
  case SPK_BF16: {
    uint16_t v = spk_f32_to_bf16((float)x);
    memcpy(p, &v, 2);
    break;
  }
  case SPK_I32: { int32_t v = (int32_t)x; memcpy(p, &v, 4); break; }
  default: { int64_t v = (int64_t)x; memcpy(p, &v, 8); break; }
  }
}

/* One element of a scale step, as plan_exec.c computes it: one float (or
 * double) operation, 16-bit floats through fp32. Test data keeps integer
 * values small, so doubles hold them exactly. */
static void scale_elem(const emu_params *e, uint8_t *d, const uint8_t *s) {
  double x = load(e->dt, s);
  if (e->dt == SPK_F64)
    x = e->scale == SPK_SCALE_UP ? x * e->world : x / e->world;
  else if (e->dt == SPK_I32 || e->dt == SPK_I64)
    x = e->scale == SPK_SCALE_UP ? x * e->world
                                 : (double)((int64_t)x / e->world);
  else
    x = e->scale == SPK_SCALE_UP ? (float)x * (float)e->world
                                 : (float)x / (float)e->world;
  store(e->dt, d, x);
}

static double combine(int op, double a, double v, spk_dtype dt) {
  if (op == SPK_RED_SUM) {
    /* fp32 accumulation for 32- and 16-bit floats, as the kernel does */
    if (dt == SPK_F32 || dt == SPK_F16 || dt == SPK_BF16)
      return (float)a + (float)v;
    return a + v;
  }
  if (op == SPK_RED_MAX)
    return (v > a || v != v) ? v : a;
  return (v < a || v != v) ? v : a;
}

/* Execute every chunk of l, checking the invariants the kernel relies
 * on: chunks tile each step, rows of a chunk fit in shared memory, and
 * every access is aligned to the step's vector width. Returns the bytes
 * written. */
static uint64_t emu_list(const spk_cdesc_list *l, const emu_params *e) {
  uint64_t written = 0;
  for (uint64_t c = 0; c < l->nchunks; c++) {
    uint64_t i = spk_cdesc_find(l->descs, l->n, c);
    const spk_cdesc *d = &l->descs[i];
    ck_assert(c >= d->chunk0 && c < d->chunk0 + d->nchunks);
    uint64_t r0, r1, b0, b1;
    spk_cdesc_chunk(d, c - d->chunk0, &r0, &r1, &b0, &b1);
    ck_assert(r1 > r0 && r1 - r0 <= SPK_CU_MAX_ROWS && r1 <= d->rows);
    ck_assert(b1 > b0 && b1 <= d->run);
    ck_assert_uint_eq((b1 - b0) % d->vec, 0);
    for (uint64_t r = r0; r < r1; r++) {
      uint64_t so, dof;
      spk_cdesc_row(d, r, &so, &dof);
      uint8_t *dst = (uint8_t *)(uintptr_t)(d->dst + dof + b0);
      ck_assert_uint_eq((uintptr_t)dst % d->vec, 0);
      written += b1 - b0;
      if (d->kind == SPK_CU_COPY) {
        const uint8_t *src = (const uint8_t *)(uintptr_t)(d->src + so + b0);
        ck_assert_uint_eq((uintptr_t)src % d->vec, 0);
        memcpy(dst, src, b1 - b0);
        continue;
      }
      if (d->kind == SPK_CU_SCALE) {
        const uint8_t *src = (const uint8_t *)(uintptr_t)(d->src + so + b0);
        for (uint64_t k = 0; k < b1 - b0; k += d->esize)
          scale_elem(e, dst + k, src + k);
        continue;
      }
      for (uint64_t k = 0; k < b1 - b0; k += d->esize) {
        double acc = 0;
        for (uint32_t j = 0; j < d->nsrc; j++) {
          const spk_csrc *s = &l->srcs[d->rsrc0 + j];
          uint64_t off = s->contig ? r * d->run : so;
          double v = load(e->dt, (const uint8_t *)(uintptr_t)(s->addr + off +
                                                              b0 + k));
          acc = j == 0 ? v : combine(e->red_op, acc, v, e->dt);
        }
        store(e->dt, dst + k, acc);
      }
    }
  }
  return written;
}

/* ---- random op cases ------------------------------------------------- */

static const spk_dtype dtypes[] = {SPK_F32, SPK_BF16, SPK_I32, SPK_F16,
                                   SPK_F64, SPK_I64};

typedef struct {
  int world;
  spk_op_args a[MAXW];
  int64_t sizes[MAXW][MAXW], sizes2[MAXW][MAXW];
  spk_plan plan;
  uint8_t *in[MAXW], *out_ref[MAXW], *out[MAXW];
  size_t in_bytes[MAXW], out_bytes[MAXW];
  char tag[160];
} op_case;

/* Fill rank r's args for op kind k on a random shape; returns 0 when the
 * op cannot be made for this world (the case is skipped). */
static int case_args(op_case *c, spk_op_kind k, spk_dtype dt) {
  int w = c->world, nd = (int)range(k == SPK_OP_ALL_TO_ALL ? 2 : 1, 4);
  spk_shape in = {nd, {0}};
  for (int i = 0; i < nd; i++)
    in.dim[i] = range(1, 6);
  int d = (int)range(0, nd - 1), g = nd > 1 ? (int)range(0, nd - 2) : 0;
  g = g >= d ? g + 1 : g; /* another dim than d (all_to_all only) */
  int64_t per = range(1, 3);
  int64_t cols = range(1, 5);
  uint32_t red = (uint32_t)range(0, 2);
  uint32_t scale = (uint32_t)range(0, 2) << SPK_FLAG_SCALE_SHIFT;
  for (int r = 0; r < w; r++) {
    spk_op_args *a = &c->a[r];
    memset(a, 0, sizeof(*a));
    a->op = k;
    a->dtype = dt;
    a->in = in;
    switch (k) {
    case SPK_OP_SPLIT:
    case SPK_OP_ALL_GATHER:
    case SPK_OP_REDUCE_SCATTER:
      a->ndims = 1, a->dims[0] = d;
      if (k == SPK_OP_ALL_GATHER)
        a->in.dim[d] = 1 + (r * 7 + (int)in.dim[d]) % 5; /* unequal pieces */
      if (k == SPK_OP_ALL_GATHER) {
        a->nsizes = w;
        a->sizes = c->sizes[0];
      }
      break;
    case SPK_OP_ALL_TO_ALL:
      a->ndims = 2, a->dims[0] = d, a->dims[1] = g;
      a->in.dim[d] = w * per;
      a->in.dim[g] = in.dim[g] * w;
      break;
    case SPK_OP_ALL_REDUCE:
      a->flags = red;
      break;
    case SPK_OP_ZIGZAG_SPLIT:
    case SPK_OP_ZIGZAG_GATHER:
      a->ndims = 1, a->dims[0] = d;
      a->in.dim[d] = 2 * w * per;
      if (k == SPK_OP_ZIGZAG_GATHER)
        a->in.dim[d] /= w;
      break;
    case SPK_OP_ALL_TO_ALL_V:
      a->in.ndim = 2;
      a->in.dim[1] = cols;
      a->nsizes = a->nsizes2 = w;
      a->sizes = c->sizes[r];
      a->sizes2 = c->sizes2[r];
      break;
    default:
      return 0;
    }
    if (k == SPK_OP_SPLIT || k == SPK_OP_ZIGZAG_SPLIT ||
        k == SPK_OP_ZIGZAG_GATHER || k == SPK_OP_ALL_GATHER)
      a->flags = scale;
  }
  if (k == SPK_OP_ALL_GATHER)
    for (int r = 0; r < w; r++)
      c->sizes[0][r] = c->a[r].in.dim[d];
  if (k == SPK_OP_ALL_TO_ALL_V) {
    for (int i = 0; i < w; i++)
      for (int j = 0; j < w; j++)
        c->sizes[i][j] = range(0, 3); /* rank i sends rank j */
    for (int i = 0; i < w; i++) {
      int64_t rows = 0;
      for (int j = 0; j < w; j++)
        rows += c->sizes[i][j], c->sizes2[j][i] = c->sizes[i][j];
      c->a[i].in.dim[0] = rows;
    }
  }
  for (int r = 0; r < w; r++) {
    spk_err err;
    ck_assert_msg(spk_out_shape(&c->a[r], w, r, &c->a[r].out, &err) == 0,
                  "%s: rank %d: %s", c->tag, r, err.msg);
  }
  return 1;
}

static size_t shape_bytes(const spk_shape *s, spk_dtype dt) {
  size_t n = spk_dtype_size(dt);
  for (int i = 0; i < s->ndim; i++)
    n *= (size_t)s->dim[i];
  return n;
}

/* Small integral values: exact in every dtype, so sums and scales agree
 * however they are ordered. */
static void fill(uint8_t *p, size_t bytes, spk_dtype dt) {
  size_t es = spk_dtype_size(dt);
  for (size_t i = 0; i + es <= bytes; i += es)
    store(dt, p + i, (double)range(-8, 8));
}

/* Plan the case, make inputs and the spk_plan_exec reference; outputs of
 * the run under test start as garbage. Returns 0 when skipped. */
static int case_make(op_case *c, spk_op_kind k, int it) {
  memset(c, 0, sizeof(*c));
  c->world = (int)range(1, MAXW);
  spk_dtype dt = dtypes[it % (int)(sizeof(dtypes) / sizeof(dtypes[0]))];
  snprintf(c->tag, sizeof(c->tag), "%s w=%d %s it=%d", spk_op_name(k),
           c->world, spk_dtype_name(dt), it);
  if (!case_args(c, k, dt))
    return 0;
  const spk_op_args *argp[MAXW];
  for (int r = 0; r < c->world; r++)
    argp[r] = &c->a[r];
  spk_plan_init(&c->plan, c->world);
  spk_err err;
  ck_assert_msg(spk_plan_build(argp, c->world, &c->plan, &err) == 0,
                "%s: %s", c->tag, err.msg);
  uint8_t *bases[MAXW * SPK_T_COUNT];
  for (int r = 0; r < c->world; r++) {
    c->in_bytes[r] = shape_bytes(&c->a[r].in, dt);
    c->out_bytes[r] = shape_bytes(&c->a[r].out, dt);
    /* 16 spare bytes, and 16-byte aligned like device allocations */
    c->in[r] = aligned_alloc(16, (c->in_bytes[r] + 31) & ~(size_t)15);
    c->out_ref[r] = aligned_alloc(16, (c->out_bytes[r] + 31) & ~(size_t)15);
    c->out[r] = aligned_alloc(16, (c->out_bytes[r] + 31) & ~(size_t)15);
    fill(c->in[r], c->in_bytes[r], dt);
    memset(c->out_ref[r], 0x5a, c->out_bytes[r] + 16);
    memset(c->out[r], 0x5a, c->out_bytes[r] + 16);
    bases[r * SPK_T_COUNT + SPK_T_IN] = c->in[r];
    bases[r * SPK_T_COUNT + SPK_T_OUT] = c->out_ref[r];
  }
  spk_plan_exec(&c->plan, bases);
  return 1;
}

static void case_bases(op_case *c, uint8_t **bases) {
  for (int r = 0; r < c->world; r++) {
    bases[r * SPK_T_COUNT + SPK_T_IN] = c->in[r];
    bases[r * SPK_T_COUNT + SPK_T_OUT] = c->out[r];
  }
}

static void case_compare(op_case *c, const char *how) {
  for (int r = 0; r < c->world; r++)
    ck_assert_msg(memcmp(c->out[r], c->out_ref[r], c->out_bytes[r] + 16) == 0,
                  "%s (%s): rank %d's output differs from spk_plan_exec's",
                  c->tag, how, r);
}

static void case_free(op_case *c) {
  for (int r = 0; r < c->world; r++)
    free(c->in[r]), free(c->out_ref[r]), free(c->out[r]);
  spk_plan_free(&c->plan);
}

static emu_params case_params(const op_case *c) {
  emu_params e = {c->plan.dtype, c->plan.scale, c->plan.red_op, c->world};
  return e;
}

static const spk_op_kind kinds[] = {
    SPK_OP_SPLIT, SPK_OP_ALL_GATHER, SPK_OP_ALL_TO_ALL, SPK_OP_ALL_TO_ALL_V,
    SPK_OP_ALL_REDUCE, SPK_OP_REDUCE_SCATTER, SPK_OP_ZIGZAG_SPLIT,
    SPK_OP_ZIGZAG_GATHER};

/* The CUDA mover's lists: phase 0 (reduce steps), then phase 1 (moves). */
START_TEST(flattened_plans_match_plan_exec) {
  rng_state = 11;
  for (int it = 0; it < 600; it++) {
    op_case c;
    if (!case_make(&c, kinds[it % 8], it))
      continue;
    uint8_t *bases[MAXW * SPK_T_COUNT];
    case_bases(&c, bases);
    emu_params e = case_params(&c);
    uint64_t written = 0;
    for (int ph = 0; ph < 2; ph++) {
      spk_cdesc_list l;
      spk_err err;
      /* small chunks, so the cases' blocks are cut and batched */
      spk_cdesc_list_init(&l, (uint64_t)16 << range(0, 5));
      ck_assert_int_eq(spk_cdesc_from_plan(&l, &c.plan, bases, ph, &err), 0);
      written += emu_list(&l, &e);
      spk_cdesc_list_free(&l);
    }
    ck_assert_msg(written == c.plan.bytes, "%s: descriptors write %llu "
                  "bytes, the plan %llu", c.tag, (unsigned long long)written,
                  (unsigned long long)c.plan.bytes);
    case_compare(&c, "flattened");
    case_free(&c);
  }
}
END_TEST

/* The NCCL mover's exchange over 1..world emulated devices. */
START_TEST(routed_plans_match_plan_exec) {
  rng_state = 23;
  for (int it = 0; it < 600; it++) {
    op_case c;
    if (!case_make(&c, kinds[it % 8], it))
      continue;
    int ndev = (int)range(1, c.world), rank_dev[MAXW];
    for (int r = 0; r < c.world; r++)
      rank_dev[r] = r < ndev ? r : (int)range(0, ndev - 1);
    int self = (int)range(0, 1);
    spk_route rt;
    spk_err err;
    ck_assert_int_eq(spk_route_init(&rt, &c.plan, rank_dev, ndev, self,
                                    (uint64_t)16 << range(0, 5), &err), 0);
    uint8_t *stage[MAXW];
    for (int d = 0; d < ndev; d++) {
      stage[d] = aligned_alloc(256, (rt.stage_bytes[d] + 256) & ~(size_t)255);
      memset(stage[d], 0xc3, rt.stage_bytes[d]);
    }
    uint8_t *bases[MAXW * SPK_T_COUNT];
    case_bases(&c, bases);
    ck_assert_int_eq(spk_route_build(&rt, &c.plan, bases, rank_dev, stage,
                                     &err), 0);
    emu_params e = case_params(&c);
    for (int ph = 0; ph < 2; ph++) {
      for (int d = 0; d < ndev; d++)
        emu_list(&rt.pack[ph * ndev + d], &e);
      for (int s = 0; s < ndev; s++)
        for (int d = 0; d < ndev; d++) {
          uint64_t n = rt.bytes[SPK_ROUTE_AT(&rt, ph, s, d)];
          ck_assert(self || s != d || n == 0);
          if (n)
            memcpy(stage[d] + rt.recv_base[d] +
                       rt.recv_off[SPK_ROUTE_AT(&rt, ph, d, s)],
                   stage[s] + rt.send_off[SPK_ROUTE_AT(&rt, ph, s, d)], n);
        }
      for (int d = 0; d < ndev; d++)
        emu_list(&rt.post[ph * ndev + d], &e);
    }
    case_compare(&c, self ? "routed, self exchange" : "routed");
    for (int d = 0; d < ndev; d++)
      free(stage[d]);
    spk_route_free(&rt);
    case_free(&c);
  }
}
END_TEST

/* Big rows are cut in SPK_CU_CHUNK pieces; odd addresses fall back to
 * narrower accesses; tiny rows are batched up to SPK_CU_MAX_ROWS. */
START_TEST(chunk_geometry) {
  spk_cdesc_list l;
  spk_err err;
  spk_cdesc_list_init(&l, 0);
  ck_assert_uint_eq(spk_cdesc_chunk_for(1 << 20, 132), SPK_CU_CHUNK_MIN);
  ck_assert_uint_eq(spk_cdesc_chunk_for(64 << 20, 132), 64 << 10);
  ck_assert_uint_eq(spk_cdesc_chunk_for(1ull << 30, 132), SPK_CU_CHUNK_MAX);
  spk_move big = {.nd = 2, .len = {3, 3 * SPK_CU_CHUNK + 48},
                  .src_stride = {4 * SPK_CU_CHUNK, 1},
                  .dst_stride = {4 * SPK_CU_CHUNK, 1}};
  ck_assert_int_eq(spk_cdesc_add_copy(&l, &big, 0x1000, 0x100000000ull,
                                      SPK_CU_COPY, 4, 0, &err), 0);
  ck_assert_uint_eq(l.descs[0].nchunks, 3 * 4);
  ck_assert_uint_eq(l.descs[0].vec, 16);
  spk_move odd = {.nd = 1, .len = {100}};
  ck_assert_int_eq(spk_cdesc_add_copy(&l, &odd, 0x1004, 0x2008, SPK_CU_COPY,
                                      4, 0, &err), 0);
  ck_assert_uint_eq(l.descs[1].vec, 4);
  ck_assert_uint_eq(l.descs[1].chunk0, 12);
  spk_move tiny = {.nd = 2, .len = {5000, 4}, .src_stride = {8, 1},
                   .dst_stride = {4, 1}};
  ck_assert_int_eq(spk_cdesc_add_copy(&l, &tiny, 0x3000, 0x9000, SPK_CU_COPY,
                                      4, 0, &err), 0);
  ck_assert_uint_eq(l.descs[2].rows_per_chunk, SPK_CU_MAX_ROWS);
  ck_assert_uint_eq(l.descs[2].nchunks, 5);
  ck_assert_uint_eq(l.nchunks, 12 + 1 + 5);
  ck_assert_uint_eq(spk_cdesc_find(l.descs, l.n, 12), 1);
  ck_assert_uint_eq(spk_cdesc_find(l.descs, l.n, 13), 2);
  ck_assert_uint_eq(spk_cdesc_find(l.descs, l.n, 11), 0);
  spk_cdesc_list_free(&l);
}
END_TEST

/* ---- exact collectives --------------------------------------------- */

static spk_coll classify(spk_op_kind k, int world, spk_dtype dt, int nd,
                         const int64_t *shape, int d, int g, uint32_t flags) {
  spk_op_args a[MAXW];
  const spk_op_args *argp[MAXW];
  uint64_t in_b[MAXW], out_b[MAXW];
  for (int r = 0; r < world; r++) {
    memset(&a[r], 0, sizeof(a[r]));
    a[r].op = k, a[r].dtype = dt, a[r].flags = flags;
    a[r].in.ndim = nd;
    memcpy(a[r].in.dim, shape, (size_t)nd * sizeof(int64_t));
    if (k != SPK_OP_ALL_REDUCE)
      a[r].ndims = k == SPK_OP_ALL_TO_ALL ? 2 : 1;
    a[r].dims[0] = d, a[r].dims[1] = g;
    spk_err err;
    ck_assert_msg(spk_out_shape(&a[r], world, r, &a[r].out, &err) == 0,
                  "%s: %s", spk_op_name(k), err.msg);
    in_b[r] = shape_bytes(&a[r].in, dt);
    out_b[r] = shape_bytes(&a[r].out, dt);
    argp[r] = &a[r];
  }
  spk_plan p;
  spk_err err;
  spk_plan_init(&p, world);
  ck_assert_int_eq(spk_plan_build(argp, world, &p, &err), 0);
  uint64_t count = 0;
  spk_coll c = spk_route_collective(&p, k, in_b, out_b, &count);
  spk_plan_free(&p);
  return c;
}

START_TEST(exact_collectives) {
  int64_t s[3] = {4, 3, 2}, s12[3] = {12, 3, 2}, row[2] = {2, 6};
  int64_t one[3] = {1, 12, 2};
  ck_assert_int_eq(classify(SPK_OP_ALL_GATHER, 4, SPK_F32, 3, s, 0, 0, 0),
                   SPK_COLL_ALL_GATHER);
  ck_assert_int_eq(classify(SPK_OP_ALL_GATHER, 1, SPK_F32, 3, s, 0, 0, 0),
                   SPK_COLL_ALL_GATHER);
  /* along a later dim with an outer dim > 1: interleaved, not NCCL's */
  ck_assert_int_eq(classify(SPK_OP_ALL_GATHER, 2, SPK_F32, 2, row, 1, 0, 0),
                   SPK_COLL_NONE);
  /* scaled copies are not a collective */
  ck_assert_int_eq(classify(SPK_OP_ALL_GATHER, 2, SPK_F32, 3, s, 0, 0,
                            SPK_SCALE_UP << SPK_FLAG_SCALE_SHIFT),
                   SPK_COLL_NONE);
  /* leading dims of 1: every piece is one contiguous run on both sides */
  ck_assert_int_eq(classify(SPK_OP_ALL_TO_ALL, 3, SPK_BF16, 3, one, 1, 0, 0),
                   SPK_COLL_ALL_TO_ALL);
  ck_assert_int_eq(classify(SPK_OP_ALL_TO_ALL, 3, SPK_BF16, 3, s12, 0, 1, 0),
                   SPK_COLL_NONE);
  ck_assert_int_eq(classify(SPK_OP_REDUCE_SCATTER, 3, SPK_F32, 3, s12, 0, 0,
                            0), SPK_COLL_REDUCE_SCATTER);
  ck_assert_int_eq(classify(SPK_OP_REDUCE_SCATTER, 3, SPK_BF16, 3, s12, 0, 0,
                            0), SPK_COLL_NONE);
  ck_assert_int_eq(classify(SPK_OP_ALL_REDUCE, 4, SPK_I64, 3, s, 0, 0,
                            SPK_RED_MAX), SPK_COLL_ALL_REDUCE);
  ck_assert_int_eq(classify(SPK_OP_ALL_REDUCE, 2, SPK_F16, 3, s, 0, 0, 0),
                   SPK_COLL_ALL_REDUCE);
  ck_assert_int_eq(classify(SPK_OP_ALL_REDUCE, 3, SPK_F16, 3, s, 0, 0, 0),
                   SPK_COLL_NONE);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_desc");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, flattened_plans_match_plan_exec);
  tcase_add_test(tc, routed_plans_match_plan_exec);
  tcase_add_test(tc, chunk_geometry);
  tcase_add_test(tc, exact_collectives);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
