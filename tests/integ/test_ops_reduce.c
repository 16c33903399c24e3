/* The reducing ops, the backward ops of split and all_gather, group split
 * (ring and Ulysses sub-groups, a hybrid 2x2 run) and bad input, through a
 * real daemon. Cases run with 2, 3 and 4 ranks on random data; every
 * output element is compared with a naive reference that each rank
 * computes on its own by regenerating every rank's input (plain index
 * loops, nothing from kernels/). The helpers up to norm() are the same as
 * in test_ops_copy.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static spt_daemon daemon_;
static char gname[64]; /* group name of the run in progress (case + world) */

enum { SEED = 42, SEED_GRAD = 77, SEED_GRAD2 = 91 };
#define BUF_BYTES (16u << 20)

/* ---- references: sizes, 16-bit floats, row copies ------------------- */

static size_t numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

static int64_t rule(int64_t n, int w, int r) { return n / w + (r < n % w); }

static int64_t rule_off(int64_t n, int w, int r) {
  int64_t o = 0;
  for (int k = 0; k < r; k++)
    o += rule(n, w, k);
  return o;
}

/* How n is cut over w ranks: the rule, the rule reversed (small pieces
 * first), or with rank 1 holding nothing. */
enum { P_RULE, P_REV, P_HOLE };
static void pieces(int pat, int64_t n, int w, int64_t *sz) {
  for (int r = 0; r < w; r++)
    sz[r] = pat == P_RULE ? rule(n, w, r)
            : pat == P_REV ? rule(n, w, w - 1 - r)
            : r == 1      ? 0
                          : rule(n, w - 1, r < 1 ? r : r - 1);
}

static int64_t sum_before(const int64_t *sz, int r) {
  int64_t o = 0;
  for (int k = 0; k < r; k++)
    o += sz[k];
  return o;
}

static float f16_to_f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Round to nearest even through the value: rintf of |f| in units of the
 * f16 quantum at its exponent is exact arithmetic. */
static uint16_t f_to_f16(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  float a = fabsf(f);
  if (isnan(f))
    return 0x7e00;
  int e;
  frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int qe = (e - 1 > -14 ? e - 1 : -14) - 10;
  a = ldexpf(rintf(ldexpf(a, -qe)), qe);
  if (a >= 65536.0f || isinf(a))
    return sign | 0x7c00;
  if (a < ldexpf(1.0f, -14))
    return sign | (uint16_t)ldexpf(a, 24);
  float m = frexpf(a, &e);
  return sign | (uint16_t)((e + 14) << 10) |
         (uint16_t)ldexpf(m * 2.0f - 1.0f, 10);
}

static float bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f))
    return (uint16_t)((u >> 16) | 0x40);
  uint32_t low = u & 0xffff, hi = u >> 16;
  if (low > 0x8000 || (low == 0x8000 && (hi & 1)))
    hi++;
  return (uint16_t)hi;
}

/* Test data: spt_fill's; 16-bit floats get its float values (multiples of
 * 1/64 in [-32, 32), exact in f16, rounded once in bf16), not raw bits, so
 * scaled copies stay finite. */
static void fill(void *p, spc_dtype dt, size_t n, uint64_t seed, int rank) {
  if (dt != SPC_FLOAT16 && dt != SPC_BFLOAT16) {
    spt_fill(p, dt, n, seed, rank);
    return;
  }
  float *f = malloc(n * sizeof(float) + 1);
  spt_fill(f, SPC_FLOAT32, n, seed, rank);
  for (size_t i = 0; i < n; i++)
    ((uint16_t *)p)[i] = dt == SPC_FLOAT16 ? f_to_f16(f[i]) : f_to_bf16(f[i]);
  free(f);
}

/* Grad scale of n elements in place: one IEEE x * w or x / w in float
 * (16-bit floats: convert, operate, round back). */
static void scale_ref(spc_dtype dt, void *p, size_t n, int scale, int w) {
  for (size_t i = 0; i < n && scale != SPC_SCALE_NONE; i++) {
    int up = scale == SPC_SCALE_UP;
    if (dt == SPC_FLOAT32) {
      float *x = (float *)p + i;
      *x = up ? *x * (float)w : *x / (float)w;
    } else if (dt == SPC_FLOAT16 || dt == SPC_BFLOAT16) {
      uint16_t *x = (uint16_t *)p + i;
      float v = dt == SPC_FLOAT16 ? f16_to_f(*x) : bf16_to_f(*x);
      v = up ? v * (float)w : v / (float)w;
      *x = dt == SPC_FLOAT16 ? f_to_f16(v) : f_to_bf16(v);
    }
  }
}

/* A tensor of shape s seen as [outer, s[d], inner]. */
static void around(const int64_t *s, int nd, int d, int64_t *outer,
                   int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < nd; i++) {
    if (i < d)
      *outer *= s[i];
    if (i > d)
      *inner *= s[i];
  }
}

/* Rows [so, so + len) of src ([outer, sD, inner]) to rows [dof, ...) of
 * dst ([outer, dD, inner]). */
static void rows_copy(void *dst, int64_t dD, int64_t dof, const void *src,
                      int64_t sD, int64_t so, int64_t len, int64_t outer,
                      int64_t inner, size_t es) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t t = 0; t < len; t++)
      memcpy((char *)dst + (size_t)((o * dD + dof + t) * inner) * es,
             (const char *)src + (size_t)((o * sD + so + t) * inner) * es,
             (size_t)inner * es);
}

static void *fresh(spc_dtype dt, size_t n, uint64_t seed, int rank) {
  void *p = malloc(n * spc_dtype_size(dt) + 1);
  fill(p, dt, n, seed, rank);
  return p;
}

static void fmt_elem(char *b, size_t len, spc_dtype dt, const void *p,
                     size_t i) {
  switch (dt) {
  case SPC_FLOAT32:
    snprintf(b, len, "%g", (double)((const float *)p)[i]);
    break;
  case SPC_INT64:
    snprintf(b, len, "%lld", (long long)((const int64_t *)p)[i]);
    break;
  case SPC_FLOAT16:
  case SPC_BFLOAT16: {
    uint16_t h = ((const uint16_t *)p)[i];
    snprintf(b, len, "0x%04x (%g)", h,
             (double)(dt == SPC_FLOAT16 ? f16_to_f(h) : bf16_to_f(h)));
    break;
  }
  default: snprintf(b, len, "?"); break;
  }
}

/* Bitwise comparison; prints the first difference and the count. */
static int expect_same(int rank, const char *what, spc_dtype dt,
                       const void *got, const void *want, size_t n) {
  size_t es = spc_dtype_size(dt), bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) &&
        bad++ == 0)
      first = i;
  if (bad) {
    char g[48], w[48];
    fmt_elem(g, sizeof(g), dt, got, first);
    fmt_elem(w, sizeof(w), dt, want, first);
    fprintf(stderr, "[%s] rank %d: %s: %zu of %zu elements differ; first at "
            "%zu: got %s, want %s\n", gname, rank, what, bad, n, first, g, w);
  }
  return bad != 0;
}

/* ---- one rank's connection, group and shared buffer ----------------- */

typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *buf;
  size_t used;
  int rank, world;
} rk;

static int rk_open(rk *k, int rank, int world) {
  memset(k, 0, sizeof(*k));
  k->rank = rank, k->world = world;
  k->c = spt_connect(daemon_.socket);
  if (k->c == NULL)
    return -1;
  if (spc_group_join(k->c, gname, world, rank, &k->g) < 0 ||
      spc_buffer_alloc(k->c, BUF_BYTES, &k->buf) < 0) {
    fprintf(stderr, "[%s] rank %d setup: %s\n", gname, rank,
            spc_last_error(k->c));
    return -1;
  }
  return 0;
}

/* Carve a tensor out of the buffer, filled with garbage (0xEE bytes). */
static void *rk_tensor(rk *k, spc_tensor *t, spc_dtype dt, int nd,
                       const int64_t *shape) {
  size_t b = numel(shape, nd) * spc_dtype_size(dt);
  if (spc_tensor_init(t, k->buf, k->used, dt, nd, shape) < 0) {
    fprintf(stderr, "[%s] rank %d: tensor: %s\n", gname, k->rank,
            spc_last_error(k->c));
    return NULL;
  }
  k->used += (b + 63) / 64 * 64;
  memset(spc_tensor_data(t), 0xEE, b);
  return spc_tensor_data(t);
}

static int rk_close(rk *k, int bad) {
  spc_buffer_free(k->buf);
  spc_group_leave(k->g);
  spc_disconnect(k->c);
  return bad;
}

static int op_failed(rk *k, const char *op, int rc) {
  fprintf(stderr, "[%s] rank %d: %s failed: %s: %s\n", gname, k->rank, op,
          spc_strerror(rc), spc_last_error(k->c));
  return 1;
}

/* Run fn on `world` ranks for world = 2, 3, 4; a failed world is counted
 * and named, the remaining ones still run. */
static int run_worlds(const char *name, spt_rank_fn fn, void *arg) {
  int failed = 0;
  for (int w = 2; w <= 4; w++) {
    snprintf(gname, sizeof(gname), "%s-w%d", name, w);
    if (spt_run_ranks(w, fn, arg, 60) != 0) {
      fprintf(stderr, "FAILED: %s\n", gname);
      failed++;
    }
  }
  return failed;
}

#define RUN_TABLE(table, fn)                                               \
  do {                                                                     \
    int failed_ = 0;                                                       \
    for (size_t i_ = 0; i_ < sizeof(table) / sizeof(table[0]); i_++)       \
      failed_ += run_worlds(table[i_].name, fn, &table[i_]);               \
    ck_assert_msg(failed_ == 0, "%d case runs failed (see stderr)",        \
                  failed_);                                                \
  } while (0)

static int norm(int d, int nd) { return d < 0 ? d + nd : d; }

/* ---- reductions ----------------------------------------------------- */

static float load_f(spc_dtype dt, const void *p, size_t i) {
  if (dt == SPC_FLOAT32)
    return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == SPC_FLOAT16 ? f16_to_f(h) : bf16_to_f(h);
}

static void store_f(spc_dtype dt, void *p, size_t i, float v) {
  if (dt == SPC_FLOAT32)
    ((float *)p)[i] = v;
  else
    ((uint16_t *)p)[i] = dt == SPC_FLOAT16 ? f_to_f16(v) : f_to_bf16(v);
}

/* ref = op over ranks 0..w-1 of fill(seed, k), elementwise, in rank
 * order: floats in fp32 (16-bit rounded once at the end), int64 sums
 * wrapping. */
static void reduce_ref(spc_dtype dt, int op, size_t n, uint64_t seed, int w,
                       void *ref) {
  void *xs[8];
  for (int k = 0; k < w; k++)
    xs[k] = fresh(dt, n, seed, k);
  for (size_t i = 0; i < n; i++) {
    if (dt == SPC_INT64) {
      int64_t a = ((int64_t *)xs[0])[i];
      for (int k = 1; k < w; k++) {
        int64_t v = ((int64_t *)xs[k])[i];
        a = op == SPC_SUM ? (int64_t)((uint64_t)a + (uint64_t)v)
            : op == SPC_MAX ? (v > a ? v : a)
                            : (v < a ? v : a);
      }
      ((int64_t *)ref)[i] = a;
      continue;
    }
    float a = load_f(dt, xs[0], i);
    for (int k = 1; k < w; k++) {
      float v = load_f(dt, xs[k], i);
      a = op == SPC_SUM ? a + v : op == SPC_MAX ? (v > a ? v : a)
                                                : (v < a ? v : a);
    }
    store_f(dt, ref, i, a);
  }
  for (int k = 0; k < w; k++)
    free(xs[k]);
}

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS];
  int op;
  int async;
} ar_case;

static int ar_rank(int rank, int w, void *arg) {
  const ar_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  size_t n = numel(c->shape, c->ndim), es = spc_dtype_size(c->dt);
  spc_tensor in, out;
  void *x = rk_tensor(&k, &in, c->dt, c->ndim, c->shape);
  void *y = rk_tensor(&k, &out, c->dt, c->ndim, c->shape);
  if (x == NULL || y == NULL)
    return rk_close(&k, 1);
  fill(x, c->dt, n, SEED, rank);
  spc_op op = spc_op_all_reduce((spc_reduce_op)c->op);
  spc_request *req;
  int rc = c->async ? spc_start(k.g, &op, &in, &out, &req)
                    : spc_all_reduce(k.g, &in, &out, (spc_reduce_op)c->op);
  if (rc == 0 && c->async)
    rc = spc_wait(&req);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "all_reduce", rc));
  void *ref = malloc(n * es + 1);
  reduce_ref(c->dt, c->op, n, SEED, w, ref);
  int bad = expect_same(rank, "all_reduce", c->dt, y, ref, n);
  free(ref);
  return rk_close(&k, bad);
}

static ar_case ar_cases[] = {
    {"ar-sum-f32", SPC_FLOAT32, 3, {3, 5, 7}, SPC_SUM, 0},
    {"ar-max-f32", SPC_FLOAT32, 2, {4, 33}, SPC_MAX, 0},
    {"ar-min-f32-async", SPC_FLOAT32, 1, {1001}, SPC_MIN, 1},
    {"ar-sum-f32-large", SPC_FLOAT32, 2, {512, 1100}, SPC_SUM, 1},
    {"ar-sum-i64", SPC_INT64, 2, {6, 7}, SPC_SUM, 0},
    {"ar-max-i64", SPC_INT64, 1, {50}, SPC_MAX, 0},
    {"ar-min-i64", SPC_INT64, 3, {2, 3, 5}, SPC_MIN, 0},
    {"ar-sum-bf16", SPC_BFLOAT16, 2, {5, 301}, SPC_SUM, 0},
    {"ar-max-bf16", SPC_BFLOAT16, 1, {77}, SPC_MAX, 0},
    {"ar-min-bf16", SPC_BFLOAT16, 2, {3, 9}, SPC_MIN, 0},
    {"ar-sum-f16", SPC_FLOAT16, 2, {9, 31}, SPC_SUM, 0},
};

START_TEST(all_reduce_cases) { RUN_TABLE(ar_cases, ar_rank); }
END_TEST

/* ---- reduce_scatter and the backward ops of split / all_gather ------ */

enum { K_RS, K_SPLIT_BWD, K_AG_OWN, K_AG_SUM };

typedef struct {
  const char *name;
  int kind;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* the full tensor; T along dim */
  int dim;
  int pat;        /* how T is cut over the ranks */
  int pass_sizes;
  int scale;      /* split_backward and all_gather_backward_own */
} bw_case;

/* K_SPLIT_BWD: grad_out is piece r (own data), grad_in the full tensor
 * cat_k scale(g_k). The others: grad_out is full (own data per rank),
 * grad_in piece r: K_AG_OWN of scale(own grad), K_RS / K_AG_SUM of the sum
 * over ranks. */
static int bw_rank(int rank, int w, void *arg) {
  const bw_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, d = norm(c->dim, nd), gather = c->kind == K_SPLIT_BWD;
  int64_t sz[8], part[SPC_MAX_DIMS], outer, inner, T = c->shape[d];
  pieces(c->pat, T, w, sz);
  memcpy(part, c->shape, sizeof(part));
  part[d] = sz[rank];
  size_t es = spc_dtype_size(c->dt), fn = numel(c->shape, nd),
         pn = numel(part, nd);
  around(c->shape, nd, d, &outer, &inner);
  const int64_t *sizes = c->pass_sizes ? sz : NULL;
  spc_tensor go, gi;
  void *x = rk_tensor(&k, &go, c->dt, nd, gather ? part : c->shape);
  void *y = rk_tensor(&k, &gi, c->dt, nd, gather ? c->shape : part);
  if (x == NULL || y == NULL)
    return rk_close(&k, 1);
  fill(x, c->dt, gather ? pn : fn, SEED, rank);
  static const char *names[] = {"reduce_scatter", "split_backward",
                                "all_gather_backward_own",
                                "all_gather_backward_sum"};
  int rc = c->kind == K_RS ? spc_reduce_scatter(k.g, &go, &gi, c->dim, sizes)
           : c->kind == K_SPLIT_BWD
               ? spc_split_backward(k.g, &go, &gi, c->dim, sizes,
                                    (spc_grad_scale)c->scale)
           : c->kind == K_AG_OWN
               ? spc_all_gather_backward_own(k.g, &go, &gi, c->dim, sizes,
                                             (spc_grad_scale)c->scale)
               : spc_all_gather_backward_sum(k.g, &go, &gi, c->dim, sizes);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, names[c->kind], rc));
  char *ref = malloc(fn * es + 1), *src;
  if (c->kind == K_SPLIT_BWD) {
    for (int j = 0; j < w; j++) {
      src = fresh(c->dt, (size_t)(outer * sz[j] * inner), SEED, j);
      rows_copy(ref, T, sum_before(sz, j), src, sz[j], 0, sz[j], outer, inner,
                es);
      free(src);
    }
    scale_ref(c->dt, ref, fn, c->scale, w);
  } else {
    src = malloc(fn * es + 1);
    if (c->kind == K_AG_OWN)
      fill(src, c->dt, fn, SEED, rank);
    else
      reduce_ref(c->dt, SPC_SUM, fn, SEED, w, src);
    rows_copy(ref, sz[rank], 0, src, T, sum_before(sz, rank), sz[rank], outer,
              inner, es);
    if (c->kind == K_AG_OWN)
      scale_ref(c->dt, ref, pn, c->scale, w);
    free(src);
  }
  int bad = expect_same(rank, names[c->kind], c->dt, y, ref, gather ? fn : pn);
  free(ref);
  return rk_close(&k, bad);
}

static bw_case rs_cases[] = {
    {"rs-first-rule", K_RS, SPC_FLOAT32, 3, {11, 3, 2}, 0, P_RULE, 0, 0},
    {"rs-first-rev-sizes", K_RS, SPC_FLOAT32, 2, {10, 5}, 0, P_REV, 1, 0},
    {"rs-last-rule", K_RS, SPC_FLOAT32, 3, {2, 3, 13}, -1, P_RULE, 0, 0},
    {"rs-last-hole-sizes", K_RS, SPC_FLOAT32, 2, {4, 9}, 1, P_HOLE, 1, 0},
    {"rs-large", K_RS, SPC_FLOAT32, 2, {1100, 512}, 0, P_RULE, 0, 0},
    {"rs-i64", K_RS, SPC_INT64, 2, {7, 6}, 0, P_RULE, 1, 0},
    {"rs-bf16-last", K_RS, SPC_BFLOAT16, 2, {3, 17}, -1, P_REV, 1, 0},
};

static bw_case bw_cases[] = {
    {"split-bwd-down", K_SPLIT_BWD, SPC_FLOAT32, 3, {3, 10, 2}, 1, P_RULE, 0,
     SPC_SCALE_DOWN},
    {"split-bwd-down-rev", K_SPLIT_BWD, SPC_FLOAT32, 2, {11, 3}, 0, P_REV, 1,
     SPC_SCALE_DOWN},
    {"split-bwd-none-last", K_SPLIT_BWD, SPC_FLOAT32, 2, {3, 7}, -1, P_RULE, 0,
     SPC_SCALE_NONE},
    {"split-bwd-up", K_SPLIT_BWD, SPC_FLOAT32, 2, {5, 4}, 0, P_HOLE, 1,
     SPC_SCALE_UP},
    {"split-bwd-bf16", K_SPLIT_BWD, SPC_BFLOAT16, 2, {9, 5}, 0, P_RULE, 0,
     SPC_SCALE_DOWN},
    {"split-bwd-f16", K_SPLIT_BWD, SPC_FLOAT16, 3, {2, 3, 13}, 2, P_REV, 1,
     SPC_SCALE_DOWN},
    {"ag-own-up", K_AG_OWN, SPC_FLOAT32, 3, {2, 11, 3}, 1, P_RULE, 0,
     SPC_SCALE_UP},
    {"ag-own-up-rev", K_AG_OWN, SPC_FLOAT32, 2, {10, 3}, 0, P_REV, 1,
     SPC_SCALE_UP},
    {"ag-own-none", K_AG_OWN, SPC_FLOAT32, 2, {3, 9}, -1, P_RULE, 0,
     SPC_SCALE_NONE},
    {"ag-own-down", K_AG_OWN, SPC_FLOAT32, 2, {7, 2}, 0, P_RULE, 0,
     SPC_SCALE_DOWN},
    {"ag-own-bf16", K_AG_OWN, SPC_BFLOAT16, 2, {9, 4}, 0, P_RULE, 1,
     SPC_SCALE_UP},
    {"ag-sum", K_AG_SUM, SPC_FLOAT32, 3, {2, 3, 10}, -1, P_RULE, 0, 0},
    {"ag-sum-sizes", K_AG_SUM, SPC_FLOAT32, 2, {11, 3}, 0, P_REV, 1, 0},
    {"ag-sum-bf16", K_AG_SUM, SPC_BFLOAT16, 2, {7, 5}, 0, P_RULE, 0, 0},
};

START_TEST(reduce_scatter_cases) { RUN_TABLE(rs_cases, bw_rank); }
END_TEST

START_TEST(backward_cases) { RUN_TABLE(bw_cases, bw_rank); }
END_TEST

/* ---- group split ---------------------------------------------------- */

/* all_gather along dim 0 in `sub`, whose ranks should be the parent
 * ranks members[0..n) in order, this process being members[me]. Pieces of
 * 7 rows by the rule, data from (seed, parent rank). */
static int sub_gather(rk *k, spc_group *sub, const int *members, int n,
                      int me, uint64_t seed, const char *what) {
  if (sub == NULL || spc_group_size(sub) != n || spc_group_rank(sub) != me) {
    fprintf(stderr, "[%s] rank %d: %s group: %s, size %d, rank %d; want "
            "size %d, rank %d\n", gname, k->rank, what,
            sub ? "present" : "NULL", sub ? spc_group_size(sub) : -1,
            sub ? spc_group_rank(sub) : -1, n, me);
    return 1;
  }
  int64_t ish[2] = {rule(7, n, me), 3}, osh[2] = {7, 3};
  spc_tensor in, out;
  void *x = rk_tensor(k, &in, SPC_FLOAT32, 2, ish);
  void *y = rk_tensor(k, &out, SPC_FLOAT32, 2, osh);
  if (x == NULL || y == NULL)
    return 1;
  fill(x, SPC_FLOAT32, (size_t)ish[0] * 3, seed, k->rank);
  int rc = spc_all_gather(sub, &in, &out, 0, NULL);
  if (rc < 0)
    return op_failed(k, what, rc);
  float ref[21];
  for (int m = 0; m < n; m++)
    fill(ref + rule_off(7, n, m) * 3, SPC_FLOAT32, (size_t)rule(7, n, m) * 3,
         seed, members[m]);
  return expect_same(k->rank, what, SPC_FLOAT32, y, ref, 21);
}

static int split_groups_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  spc_group *ring = NULL, *uly = NULL, *rev = NULL, *three = NULL;
  int rc = spc_group_split(k.g, rank / 2, rank, &ring);
  if (rc == 0)
    rc = spc_group_split(k.g, rank % 2, rank, &uly);
  if (rc == 0)
    rc = spc_group_split(k.g, 7, -rank, &rev); /* keys reverse the order */
  if (rc == 0)
    rc = spc_group_split(k.g, rank == 3 ? -1 : 5, rank, &three);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "group_split", rc));
  int ring_m[2] = {rank / 2 * 2, rank / 2 * 2 + 1}, uly_m[2] = {rank % 2,
                                                              rank % 2 + 2};
  int rev_m[4] = {3, 2, 1, 0}, three_m[3] = {0, 1, 2};
  int bad = sub_gather(&k, ring, ring_m, 2, rank % 2, 1, "ring all_gather");
  bad |= sub_gather(&k, uly, uly_m, 2, rank / 2, 2, "ulysses all_gather");
  bad |= sub_gather(&k, rev, rev_m, 4, 3 - rank, 3, "reversed all_gather");
  if (rank == 3 && three != NULL) {
    fprintf(stderr, "[%s] rank 3: color -1 gave a group\n", gname);
    bad = 1;
  }
  if (rank != 3)
    bad |= sub_gather(&k, three, three_m, 3, rank, 4, "three all_gather");
  /* the parent still works */
  int all_m[4] = {0, 1, 2, 3};
  bad |= sub_gather(&k, k.g, all_m, 4, rank, 5, "parent all_gather");
  spc_group *subs[] = {ring, uly, rev, three};
  for (int i = 0; i < 4; i++)
    if (subs[i] != NULL)
      spc_group_leave(subs[i]);
  return rk_close(&k, bad);
}

START_TEST(group_split_ring_ulysses) {
  snprintf(gname, sizeof(gname), "gsplit");
  ck_assert_int_eq(spt_run_ranks(4, split_groups_rank, NULL, 60), 0);
}
END_TEST

/* Hybrid 2x2: x [4c, H] is zigzag-split over the ring group (rank r gets
 * chunks r and 3-r), that over the Ulysses group (rank u gets chunk u of
 * the two); global rank = u * 2 + r. Then back: gather over Ulysses,
 * zigzag gather over the ring. */
static int hybrid_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  enum { C = 3, H = 5 };
  spc_group *ring = NULL, *uly = NULL;
  int rc = spc_group_split(k.g, rank / 2, rank, &ring);
  if (rc == 0)
    rc = spc_group_split(k.g, rank % 2, rank, &uly);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "group_split", rc));
  if (ring == NULL || uly == NULL) {
    fprintf(stderr, "[%s] rank %d: no sub-group\n", gname, rank);
    return rk_close(&k, 1);
  }
  int r = spc_group_rank(ring), u = spc_group_rank(uly), bad = 0;
  if (u * 2 + r != rank) {
    fprintf(stderr, "[%s] rank %d: ring rank %d, ulysses rank %d\n", gname,
            rank, r, u);
    bad = 1;
  }
  int64_t fs[2] = {4 * C, H}, ys[2] = {2 * C, H}, zs[2] = {C, H};
  spc_tensor x_t, y_t, z_t, y2_t, x2_t;
  void *x = rk_tensor(&k, &x_t, SPC_FLOAT32, 2, fs);
  void *y = rk_tensor(&k, &y_t, SPC_FLOAT32, 2, ys);
  void *z = rk_tensor(&k, &z_t, SPC_FLOAT32, 2, zs);
  void *y2 = rk_tensor(&k, &y2_t, SPC_FLOAT32, 2, ys);
  void *x2 = rk_tensor(&k, &x2_t, SPC_FLOAT32, 2, fs);
  if (!x || !y || !z || !y2 || !x2)
    return rk_close(&k, 1);
  fill(x, SPC_FLOAT32, 4 * C * H, SEED, 0);
  float xf[4 * C * H], ref[2 * C * H];
  fill(xf, SPC_FLOAT32, 4 * C * H, SEED, 0);
  memcpy(ref, xf + r * C * H, sizeof(float) * C * H);
  memcpy(ref + C * H, xf + (3 - r) * C * H, sizeof(float) * C * H);
  if ((rc = spc_zigzag_split(ring, &x_t, &y_t, 0)) < 0 ||
      (rc = spc_split(uly, &y_t, &z_t, 0, NULL)) < 0)
    bad |= op_failed(&k, "zigzag_split / split", rc);
  else
    bad |= expect_same(rank, "hybrid piece", SPC_FLOAT32, z,
                       ref + u * C * H, C * H);
  if ((rc = spc_all_gather(uly, &z_t, &y2_t, 0, NULL)) < 0 ||
      (rc = spc_zigzag_gather(ring, &y2_t, &x2_t, 0)) < 0)
    bad |= op_failed(&k, "all_gather / zigzag_gather", rc);
  else {
    bad |= expect_same(rank, "hybrid ring piece", SPC_FLOAT32, y2, ref,
                       2 * C * H);
    bad |= expect_same(rank, "hybrid round trip", SPC_FLOAT32, x2, xf,
                       4 * C * H);
  }
  spc_group_leave(ring);
  spc_group_leave(uly);
  return rk_close(&k, bad);
}

START_TEST(hybrid_2x2) {
  snprintf(gname, sizeof(gname), "hybrid");
  ck_assert_int_eq(spt_run_ranks(4, hybrid_rank, NULL, 60), 0);
}
END_TEST

/* ---- bad input ------------------------------------------------------ */

enum { B_OP, B_DTYPE, B_DIM, B_INSHAPE, B_SIZES, B_ZIGZAG, B_SUM, B_RANGE,
       B_OUTSHAPE, B_A2A_G, B_A2AV, B_GSPLIT };

typedef struct {
  const char *name;
  int kind;
  int status;
  const char *needle; /* in the message on every rank */
} bad_case;

/* Every rank asks for an all_gather of [2, 3] along 0 unless the case
 * says otherwise; the last rank is the odd one out where one is needed. */
static int bad_rank(int rank, int w, void *arg) {
  const bad_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int last = rank == w - 1, nd = 2;
  spc_dtype dt = SPC_FLOAT32;
  int64_t is[3] = {2, 3, 2}, os[3] = {2 * w, 3, 2}, sz[8], sz2[8];
  for (int j = 0; j < w; j++)
    sz[j] = 2, sz2[j] = 1;
  spc_op op = spc_op_all_gather(0, NULL);
  switch (c->kind) {
  case B_OP: /* rank 0 all_gather, the others split */
    if (rank > 0)
      is[0] = 2 * w, os[0] = 2, op = spc_op_split(0, NULL);
    break;
  case B_DTYPE: dt = last ? SPC_INT32 : SPC_FLOAT32; break;
  case B_DIM: /* the last rank gathers along dim 1 */
    if (last)
      os[0] = 2, os[1] = 3 * w, op = spc_op_all_gather(1, NULL);
    break;
  case B_INSHAPE: is[1] = os[1] = last ? 4 : 3; break;
  case B_SIZES: /* split size lists differ; each fits its own rank */
    if (last)
      sz[0] = 3, sz[1] = 1;
    is[0] = 2 * w, os[0] = sz[rank], op = spc_op_split(0, sz);
    break;
  case B_ZIGZAG: is[0] = 2 * w + 2, os[0] = 2, op = spc_op_zigzag_split(0);
    break;
  case B_SUM:
    sz[w - 1] = 3;
    is[0] = 2 * w, os[0] = sz[rank], op = spc_op_split(0, sz);
    break;
  case B_RANGE: op = spc_op_all_gather(2, NULL); break;
  case B_OUTSHAPE: os[0] += last; break;
  case B_A2A_G: /* unequal gather sizes, no gather_size */
    nd = 3, is[0] = 4, is[1] = rule(2 * w + 1, w, rank);
    os[0] = rule(4, w, rank), os[1] = is[1] * w;
    op = spc_op_all_to_all(0, 1, 0);
    break;
  case B_A2AV: /* rank 0 sends 2 rows to rank 1, which expects 1 */
    sz[0] = sz2[0] = 1;
    for (int j = 1; j < w; j++)
      sz[j] = 1;
    if (rank == 0)
      sz[1] = 2;
    is[0] = w + (rank == 0), os[0] = w;
    op = spc_op_all_to_all_v(sz, sz2);
    break;
  }
  spc_tensor in, out;
  void *x = rk_tensor(&k, &in, dt, nd, is);
  if (x == NULL || rk_tensor(&k, &out, dt, nd, os) == NULL)
    return rk_close(&k, 1);
  fill(x, dt, numel(is, nd), SEED, rank);
  spc_group *sub = NULL; /* B_GSPLIT: rank 0 splits, the others gather */
  int rc = c->kind == B_GSPLIT && rank == 0
               ? spc_group_split(k.g, 0, 0, &sub)
               : spc_run(k.g, &op, &in, &out);
  int bad = 0;
  if (rc != c->status || !strstr(spc_last_error(k.c), c->needle)) {
    fprintf(stderr, "[%s] rank %d: got %d (%s) '%s'; want %d (%s) with "
            "'%s'\n", gname, rank, rc, spc_strerror(rc),
            rc < 0 ? spc_last_error(k.c) : "", c->status,
            spc_strerror(c->status), c->needle);
    bad = 1;
  }
  /* the group still works */
  /* spt_check_gather reads SPC_MAX_DIMS entries of the shape */
  int64_t gs[2] = {2, 3}, go[SPC_MAX_DIMS] = {2 * w, 3};
  int64_t twos[4] = {2, 2, 2, 2};
  spc_tensor gin, gout;
  void *gx = rk_tensor(&k, &gin, SPC_FLOAT32, 2, gs);
  void *gy = rk_tensor(&k, &gout, SPC_FLOAT32, 2, go);
  if (gx == NULL || gy == NULL)
    return rk_close(&k, 1);
  fill(gx, SPC_FLOAT32, 6, SEED + 1, rank);
  rc = spc_all_gather(k.g, &gin, &gout, 0, NULL);
  if (rc < 0)
    bad |= op_failed(&k, "all_gather after the bad op", rc);
  else
    bad |= spt_check_gather(gy, SPC_FLOAT32, 2, go, 0, twos, w, SEED + 1,
                            rank);
  return rk_close(&k, bad);
}

static bad_case bad_cases[] = {
    {"bad-op", B_OP, SPC_EMISMATCH, "ranks disagree on op"},
    {"bad-dtype", B_DTYPE, SPC_EMISMATCH, "ranks disagree on dtype"},
    {"bad-dim", B_DIM, SPC_EMISMATCH, "ranks disagree on dim"},
    {"bad-input-shape", B_INSHAPE, SPC_EMISMATCH, "input dim 1"},
    {"bad-sizes", B_SIZES, SPC_EMISMATCH, "ranks disagree on sizes"},
    {"bad-zigzag-len", B_ZIGZAG, SPC_EINVAL, "not divisible by 2*cp"},
    {"bad-split-sum", B_SUM, SPC_EINVAL, "split sizes sum to"},
    {"bad-dim-range", B_RANGE, SPC_EINVAL, "gather dim 2 out of range"},
    {"bad-out-shape", B_OUTSHAPE, SPC_EINVAL, "output shape"},
    {"bad-a2a-gather-size", B_A2A_G, SPC_EINVAL, "need gather_size"},
    {"bad-a2av-pair", B_A2AV, SPC_EMISMATCH, "rank 0 sends 2 rows to rank 1"},
    {"bad-split-vs-op", B_GSPLIT, SPC_EMISMATCH, "ranks disagree on op"},
};

START_TEST(bad_input_cases) { RUN_TABLE(bad_cases, bad_rank); }
END_TEST

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}

static void teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

int main(void) {
  Suite *s = suite_create("ops_reduce");
  TCase *tc = tcase_create("ops_reduce");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, all_reduce_cases);
  tcase_add_test(tc, reduce_scatter_cases);
  tcase_add_test(tc, backward_cases);
  tcase_add_test(tc, group_split_ring_ulysses);
  tcase_add_test(tc, hybrid_2x2);
  tcase_add_test(tc, bad_input_cases);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
