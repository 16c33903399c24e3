/* The copy ops through a real daemon: split, all_gather, all_to_all (and
 * its backward), all_to_all_v, sp2hp/hp2sp, zigzag and packed split and
 * gather with their backward ops. Every case runs with 2, 3 and 4 ranks on
 * random data; every output element is compared with a naive reference
 * that each rank computes on its own by regenerating every rank's input
 * (plain index loops, nothing from kernels/). */
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

/* ---- split and all_gather ------------------------------------------- */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* the full tensor; T along dim */
  int dim;
  int pat;        /* how T is cut over the ranks */
  int pass_sizes; /* pass the list (else NULL) */
} dim_case;

/* split: every rank passes the same full x and gets piece r. */
static int split_rank(int rank, int w, void *arg) {
  const dim_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int d = norm(c->dim, c->ndim);
  int64_t sz[8], oshape[SPC_MAX_DIMS], outer, inner;
  pieces(c->pat, c->shape[d], w, sz);
  memcpy(oshape, c->shape, sizeof(oshape));
  oshape[d] = sz[rank];
  spc_tensor in, out;
  void *x = rk_tensor(&k, &in, c->dt, c->ndim, c->shape);
  void *y = rk_tensor(&k, &out, c->dt, c->ndim, oshape);
  if (x == NULL || y == NULL)
    return rk_close(&k, 1);
  fill(x, c->dt, numel(c->shape, c->ndim), SEED, 0); /* same x everywhere */
  int rc = spc_split(k.g, &in, &out, c->dim, c->pass_sizes ? sz : NULL);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "split", rc));
  void *full = fresh(c->dt, numel(c->shape, c->ndim), SEED, 0);
  void *ref = malloc(numel(oshape, c->ndim) * spc_dtype_size(c->dt) + 1);
  around(c->shape, c->ndim, d, &outer, &inner);
  rows_copy(ref, sz[rank], 0, full, c->shape[d], sum_before(sz, rank),
            sz[rank], outer, inner, spc_dtype_size(c->dt));
  int bad = expect_same(rank, "split", c->dt, y, ref, numel(oshape, c->ndim));
  free(full), free(ref);
  return rk_close(&k, bad);
}

/* all_gather: rank r holds piece r (its own data); out is the whole. */
static int gather_rank(int rank, int w, void *arg) {
  const dim_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int d = norm(c->dim, c->ndim);
  int64_t sz[8], ishape[SPC_MAX_DIMS], outer, inner;
  size_t es = spc_dtype_size(c->dt), on = numel(c->shape, c->ndim);
  pieces(c->pat, c->shape[d], w, sz);
  memcpy(ishape, c->shape, sizeof(ishape));
  ishape[d] = sz[rank];
  spc_tensor in, out;
  void *x = rk_tensor(&k, &in, c->dt, c->ndim, ishape);
  void *y = rk_tensor(&k, &out, c->dt, c->ndim, c->shape);
  if (x == NULL || y == NULL)
    return rk_close(&k, 1);
  fill(x, c->dt, numel(ishape, c->ndim), SEED, rank);
  int rc = spc_all_gather(k.g, &in, &out, c->dim, c->pass_sizes ? sz : NULL);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "all_gather", rc));
  void *ref = malloc(on * es + 1);
  around(c->shape, c->ndim, d, &outer, &inner);
  for (int j = 0; j < w; j++) {
    void *xj = fresh(c->dt, (size_t)(outer * sz[j] * inner), SEED, j);
    rows_copy(ref, c->shape[d], sum_before(sz, j), xj, sz[j], 0, sz[j], outer,
              inner, es);
    free(xj);
  }
  int bad = expect_same(rank, "all_gather", c->dt, y, ref, on);
  free(ref);
  return rk_close(&k, bad);
}

static dim_case split_cases[] = {
    {"split-d0-rule", SPC_FLOAT32, 3, {7, 5, 4}, 0, P_RULE, 0},
    {"split-d1-rule-sizes", SPC_FLOAT32, 3, {3, 10, 4}, 1, P_RULE, 1},
    {"split-last-rev-sizes", SPC_FLOAT32, 3, {2, 3, 11}, -1, P_REV, 1},
    {"split-hole", SPC_FLOAT32, 2, {9, 6}, 0, P_HOLE, 1},
    {"split-i64", SPC_INT64, 2, {5, 13}, 1, P_RULE, 0},
    {"split-bf16", SPC_BFLOAT16, 4, {2, 3, 9, 5}, 2, P_REV, 1},
    {"split-f16-1d", SPC_FLOAT16, 1, {37}, 0, P_RULE, 0},
};

static dim_case gather_cases[] = {
    {"gather-first-rev", SPC_FLOAT32, 3, {11, 3, 4}, 0, P_REV, 1},
    {"gather-first-rule", SPC_FLOAT32, 3, {10, 3, 4}, 0, P_RULE, 0},
    {"gather-last-rev", SPC_FLOAT32, 3, {2, 3, 11}, -1, P_REV, 0},
    {"gather-last-hole", SPC_FLOAT32, 2, {5, 9}, 1, P_HOLE, 1},
    {"gather-i64", SPC_INT64, 2, {7, 3}, 0, P_REV, 1},
    {"gather-bf16-last", SPC_BFLOAT16, 3, {2, 2, 9}, 2, P_RULE, 0},
};

START_TEST(split_cases_all) { RUN_TABLE(split_cases, split_rank); }
END_TEST

START_TEST(all_gather_cases) { RUN_TABLE(gather_cases, gather_rank); }
END_TEST

/* ---- all_to_all ----------------------------------------------------- */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* S along s, the total G along g */
  int s, g;
  int always_g; /* pass G even when it divides evenly (else 0 then) */
} a2a_case;

/* Output element e of rank r (shape: s -> piece r of S, g -> G) is, with
 * j the rank whose block holds it along g, x_j at e shifted by -start_j
 * along g and by +start_r along s. */
static int a2a_rank(int rank, int w, void *arg) {
  const a2a_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, s = norm(c->s, nd), g = norm(c->g, nd);
  int64_t S = c->shape[s], G = c->shape[g];
  size_t es = spc_dtype_size(c->dt);
  int64_t ish[8][SPC_MAX_DIMS], osh[SPC_MAX_DIMS];
  void *xs[8];
  for (int j = 0; j < w; j++) {
    memcpy(ish[j], c->shape, sizeof(ish[j]));
    ish[j][g] = rule(G, w, j);
    xs[j] = fresh(c->dt, numel(ish[j], nd), SEED, j);
  }
  memcpy(osh, c->shape, sizeof(osh));
  osh[s] = rule(S, w, rank);
  spc_tensor in, out, back;
  void *x = rk_tensor(&k, &in, c->dt, nd, ish[rank]);
  void *y = rk_tensor(&k, &out, c->dt, nd, osh);
  void *z = rk_tensor(&k, &back, c->dt, nd, ish[rank]);
  if (x == NULL || y == NULL || z == NULL)
    return rk_close(&k, 1);
  fill(x, c->dt, numel(ish[rank], nd), SEED, rank);
  int64_t gsz = c->always_g || G % w ? G : 0;
  int rc = spc_all_to_all(k.g, &in, &out, c->s, c->g, gsz);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "all_to_all", rc));
  size_t on = numel(osh, nd);
  char *ref = calloc(on + 1, es);
  for (size_t e = 0; e < on; e++) {
    int64_t idx[SPC_MAX_DIMS];
    size_t rem = e, si = 0;
    for (int i = nd - 1; i >= 0; i--) {
      idx[i] = (int64_t)(rem % (size_t)osh[i]);
      rem /= (size_t)osh[i];
    }
    int j = 0;
    while (idx[g] >= rule_off(G, w, j) + rule(G, w, j))
      j++;
    idx[g] -= rule_off(G, w, j);
    idx[s] += rule_off(S, w, rank);
    for (int i = 0; i < nd; i++)
      si = si * (size_t)ish[j][i] + (size_t)idx[i];
    memcpy(ref + e * es, (char *)xs[j] + si * es, es);
  }
  int bad = expect_same(rank, "all_to_all", c->dt, y, ref, on);
  /* The backward op (scatter and gather swapped) restores the input. */
  rc = spc_all_to_all_backward(k.g, &out, &back, c->s, c->g, S);
  if (rc < 0)
    bad |= op_failed(&k, "all_to_all_backward", rc);
  else
    bad |= expect_same(rank, "all_to_all_backward round trip", c->dt, z,
                       xs[rank], numel(ish[rank], nd));
  free(ref);
  for (int j = 0; j < w; j++)
    free(xs[j]);
  return rk_close(&k, bad);
}

static a2a_case a2a_cases[] = {
    /* 3-d, every (scatter, gather) pair; sizes even for some worlds only */
    {"a2a-3d-s0g1", SPC_FLOAT32, 3, {12, 6, 5}, 0, 1, 0},
    {"a2a-3d-s0g2", SPC_FLOAT32, 3, {7, 3, 12}, 0, 2, 1},
    {"a2a-3d-s1g0", SPC_FLOAT32, 3, {12, 24, 2}, 1, 0, 0},
    {"a2a-3d-s1g2", SPC_FLOAT32, 3, {2, 9, 10}, -2, -1, 0},
    {"a2a-3d-s2g0", SPC_FLOAT32, 3, {5, 3, 12}, 2, 0, 0},
    {"a2a-3d-s2g1", SPC_FLOAT32, 3, {2, 12, 12}, -1, 1, 1},
    /* Ulysses [b, s/P, h, d] -> [b, s, h/P, d] */
    {"a2a-ulysses", SPC_FLOAT32, 4, {2, 24, 12, 8}, 2, 1, 0},
    {"a2a-ulysses-bf16", SPC_BFLOAT16, 4, {2, 12, 24, 4}, 2, 1, 0},
    /* 2 MiB per tensor: moves cut into several mover tasks */
    {"a2a-ulysses-large", SPC_FLOAT32, 4, {1, 256, 16, 128}, 2, 1, 0},
    {"a2a-5d", SPC_FLOAT32, 5, {2, 3, 5, 4, 3}, 3, 1, 1},
    {"a2a-unaligned", SPC_FLOAT32, 3, {3, 7, 5}, 1, 2, 1},
    {"a2a-tiny", SPC_FLOAT32, 3, {2, 3, 2}, 1, 0, 1}, /* empty pieces */
    {"a2a-i64", SPC_INT64, 2, {11, 9}, 0, 1, 1},
    {"a2a-2d-f16", SPC_FLOAT16, 2, {13, 12}, 1, 0, 0},
};

START_TEST(all_to_all_cases) { RUN_TABLE(a2a_cases, a2a_rank); }
END_TEST

/* ---- all_to_all_v, sp2hp / hp2sp ------------------------------------ */

typedef struct {
  const char *name;
  spc_dtype dt;
  int nrow;                   /* trailing dims of a row */
  int64_t row[SPC_MAX_DIMS - 1];
  int pat;
} a2av_case;

/* Rows rank i sends to rank j. Pattern 1: rank 0 sends nothing. */
static int64_t a2av_m(int pat, int i, int j) {
  return pat == 0 ? (3 * i + j + 1) % 4 : (i * j) % 3 + (j == 2 && i);
}

static int a2av_rank(int rank, int w, void *arg) {
  const a2av_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int nd = 1 + c->nrow;
  int64_t ins[8], outs[8], ish[SPC_MAX_DIMS], osh[SPC_MAX_DIMS], rowlen = 1;
  size_t es = spc_dtype_size(c->dt);
  for (int j = 0; j < w; j++) {
    ins[j] = a2av_m(c->pat, rank, j);
    outs[j] = a2av_m(c->pat, j, rank);
  }
  for (int i = 0; i < c->nrow; i++)
    rowlen *= ish[i + 1] = osh[i + 1] = c->row[i];
  ish[0] = sum_before(ins, w);
  osh[0] = sum_before(outs, w);
  spc_tensor in, out;
  void *x = rk_tensor(&k, &in, c->dt, nd, ish);
  void *y = rk_tensor(&k, &out, c->dt, nd, osh);
  if (x == NULL || y == NULL)
    return rk_close(&k, 1);
  fill(x, c->dt, numel(ish, nd), SEED, rank);
  int rc = spc_all_to_all_v(k.g, &in, &out, ins, outs);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "all_to_all_v", rc));
  char *ref = malloc(numel(osh, nd) * es + 1);
  for (int i = 0, at = 0; i < w; i++) {
    int64_t rows_i = 0, from = 0;
    for (int j = 0; j < w; j++) {
      rows_i += a2av_m(c->pat, i, j);
      from += j < rank ? a2av_m(c->pat, i, j) : 0;
    }
    void *xi = fresh(c->dt, (size_t)(rows_i * rowlen), SEED, i);
    rows_copy(ref, osh[0], at, xi, rows_i, from, outs[i], 1, rowlen, es);
    at += (int)outs[i];
    free(xi);
  }
  int bad = expect_same(rank, "all_to_all_v", c->dt, y, ref, numel(osh, nd));
  free(ref);
  return rk_close(&k, bad);
}

static a2av_case a2av_cases[] = {
    {"a2av-f32", SPC_FLOAT32, 2, {3, 2}, 0},
    {"a2av-f32-rank0-silent", SPC_FLOAT32, 1, {5}, 1},
    {"a2av-i64", SPC_INT64, 1, {3}, 0},
    {"a2av-bf16", SPC_BFLOAT16, 2, {2, 3}, 1},
};

START_TEST(all_to_all_v_cases) { RUN_TABLE(a2av_cases, a2av_rank); }
END_TEST

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;                      /* the sp2hp input: [..., H], H = w * hh */
  int64_t lead[SPC_MAX_DIMS - 1]; /* dims before H (n = their product) */
  int64_t hh;
} mega_case;

/* sp2hp: out_r[j*n + a][b] = x_j[a][r*hh + b]; hp2sp of that is x_r. */
static int mega_rank(int rank, int w, void *arg) {
  const mega_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int64_t ish[SPC_MAX_DIMS], n = 1, H = w * c->hh;
  for (int i = 0; i < c->ndim - 1; i++)
    n *= ish[i] = c->lead[i];
  ish[c->ndim - 1] = H;
  int64_t osh[2] = {w * n, c->hh};
  size_t es = spc_dtype_size(c->dt);
  spc_tensor in, mid, back;
  void *x = rk_tensor(&k, &in, c->dt, c->ndim, ish);
  void *y = rk_tensor(&k, &mid, c->dt, 2, osh);
  void *z = rk_tensor(&k, &back, c->dt, c->ndim, ish);
  if (x == NULL || y == NULL || z == NULL)
    return rk_close(&k, 1);
  fill(x, c->dt, (size_t)(n * H), SEED, rank);
  int rc = spc_sp2hp(k.g, &in, &mid);
  if (rc < 0)
    return rk_close(&k, op_failed(&k, "sp2hp", rc));
  char *ref = malloc((size_t)(n * H) * es + 1);
  for (int j = 0; j < w; j++) {
    char *xj = fresh(c->dt, (size_t)(n * H), SEED, j);
    for (int64_t a = 0; a < n; a++)
      for (int64_t b = 0; b < c->hh; b++)
        memcpy(ref + (size_t)((j * n + a) * c->hh + b) * es,
               xj + (size_t)(a * H + rank * c->hh + b) * es, es);
    free(xj);
  }
  int bad = expect_same(rank, "sp2hp", c->dt, y, ref, (size_t)(n * H));
  rc = spc_hp2sp(k.g, &mid, &back);
  if (rc < 0)
    bad |= op_failed(&k, "hp2sp", rc);
  else {
    fill(ref, c->dt, (size_t)(n * H), SEED, rank);
    bad |= expect_same(rank, "hp2sp(sp2hp(x)) == x", c->dt, z, ref,
                       (size_t)(n * H));
  }
  free(ref);
  return rk_close(&k, bad);
}

static mega_case mega_cases[] = {
    {"sp2hp-2d", SPC_FLOAT32, 2, {5}, 3},
    {"sp2hp-3d", SPC_FLOAT32, 3, {2, 3}, 4},
    {"sp2hp-bf16", SPC_BFLOAT16, 2, {7}, 2},
};

START_TEST(sp2hp_hp2sp_cases) { RUN_TABLE(mega_cases, mega_rank); }
END_TEST

/* ---- zigzag --------------------------------------------------------- */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* chunk length c along dim: L = 2wc */
  int dim;
} zz_case;

/* split, gather back, split backward (gather / w), gather backward (own
 * chunks * w). Chunk q of the full sequence sits on rank min(q, 2w-1-q). */
static int zz_rank(int rank, int w, void *arg) {
  const zz_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, d = norm(c->dim, nd);
  int64_t ch = c->shape[d], L = 2 * w * ch, full[SPC_MAX_DIMS],
          part[SPC_MAX_DIMS], outer, inner;
  memcpy(full, c->shape, sizeof(full));
  memcpy(part, c->shape, sizeof(part));
  full[d] = L, part[d] = 2 * ch;
  size_t es = spc_dtype_size(c->dt), fn = numel(full, nd), pn = numel(part, nd);
  around(full, nd, d, &outer, &inner);
  spc_tensor x_t, y_t, z_t, gy_t, gx_t, gz_t, gyy_t;
  void *x = rk_tensor(&k, &x_t, c->dt, nd, full);
  void *y = rk_tensor(&k, &y_t, c->dt, nd, part);
  void *z = rk_tensor(&k, &z_t, c->dt, nd, full);
  void *gy = rk_tensor(&k, &gy_t, c->dt, nd, part);
  void *gx = rk_tensor(&k, &gx_t, c->dt, nd, full);
  void *gz = rk_tensor(&k, &gz_t, c->dt, nd, full);
  void *gyy = rk_tensor(&k, &gyy_t, c->dt, nd, part);
  if (!x || !y || !z || !gy || !gx || !gz || !gyy)
    return rk_close(&k, 1);
  fill(x, c->dt, fn, SEED, 0);
  fill(gy, c->dt, pn, SEED_GRAD, rank);
  fill(gz, c->dt, fn, SEED_GRAD2, rank);
  char *xf = fresh(c->dt, fn, SEED, 0), *ref = malloc(fn * es + 1);
  int bad = 0, rc;
  /* forward split: chunk r then chunk 2w-1-r */
  if ((rc = spc_zigzag_split(k.g, &x_t, &y_t, c->dim)) < 0)
    bad |= op_failed(&k, "zigzag_split", rc);
  else {
    rows_copy(ref, 2 * ch, 0, xf, L, rank * ch, ch, outer, inner, es);
    rows_copy(ref, 2 * ch, ch, xf, L, (2 * w - 1 - rank) * ch, ch, outer,
              inner, es);
    bad |= expect_same(rank, "zigzag_split", c->dt, y, ref, pn);
    if ((rc = spc_zigzag_gather(k.g, &y_t, &z_t, c->dim)) < 0)
      bad |= op_failed(&k, "zigzag_gather", rc);
    else
      bad |= expect_same(rank, "zigzag_gather(split(x)) == x", c->dt, z, xf,
                         fn);
  }
  /* split backward: every rank's grad chunks in natural order, / w */
  if ((rc = spc_zigzag_split_backward(k.g, &gy_t, &gx_t, c->dim)) < 0)
    bad |= op_failed(&k, "zigzag_split_backward", rc);
  else {
    for (int j = 0; j < w; j++) {
      char *gj = fresh(c->dt, pn, SEED_GRAD, j);
      rows_copy(ref, L, j * ch, gj, 2 * ch, 0, ch, outer, inner, es);
      rows_copy(ref, L, (2 * w - 1 - j) * ch, gj, 2 * ch, ch, ch, outer, inner,
                es);
      free(gj);
    }
    scale_ref(c->dt, ref, fn, SPC_SCALE_DOWN, w);
    bad |= expect_same(rank, "zigzag_split_backward", c->dt, gx, ref, fn);
  }
  /* gather backward: own chunks of own grad, * w */
  if ((rc = spc_zigzag_gather_backward(k.g, &gz_t, &gyy_t, c->dim)) < 0)
    bad |= op_failed(&k, "zigzag_gather_backward", rc);
  else {
    char *gf = fresh(c->dt, fn, SEED_GRAD2, rank);
    rows_copy(ref, 2 * ch, 0, gf, L, rank * ch, ch, outer, inner, es);
    rows_copy(ref, 2 * ch, ch, gf, L, (2 * w - 1 - rank) * ch, ch, outer,
              inner, es);
    scale_ref(c->dt, ref, pn, SPC_SCALE_UP, w);
    bad |= expect_same(rank, "zigzag_gather_backward", c->dt, gyy, ref, pn);
    free(gf);
  }
  free(xf), free(ref);
  return rk_close(&k, bad);
}

static zz_case zz_cases[] = {
    {"zz-seq-first", SPC_FLOAT32, 3, {3, 4, 2}, 0},
    {"zz-seq-mid", SPC_FLOAT32, 4, {2, 5, 3, 2}, 1},
    {"zz-seq-last", SPC_FLOAT32, 2, {3, 1}, -1},
    {"zz-bf16", SPC_BFLOAT16, 3, {2, 3, 4}, 1},
    {"zz-f16", SPC_FLOAT16, 2, {2, 5}, 0},
};

START_TEST(zigzag_cases) { RUN_TABLE(zz_cases, zz_rank); }
END_TEST

/* ---- packed (varlen) ------------------------------------------------ */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* padding rows along dim (past the seqs) */
  int dim;
  int nseq;
  int64_t lens[8];
} pk_case;

/* Rows of rank r's pieces between the packing (full, D rows) and rank r's
 * pieces back to back (part, P rows): to_part picks, else places. */
static void pk_rows(const pk_case *c, int w, int r, void *part, int64_t P,
                    void *full, int64_t D, int to_part, int64_t outer,
                    int64_t inner, size_t es) {
  int64_t start = 0, at = 0;
  for (int i = 0; i < c->nseq; i++) {
    int64_t len = rule(c->lens[i], w, r);
    int64_t from = start + rule_off(c->lens[i], w, r);
    if (to_part)
      rows_copy(part, P, at, full, D, from, len, outer, inner, es);
    else
      rows_copy(full, D, from, part, P, at, len, outer, inner, es);
    at += len;
    start += c->lens[i];
  }
}

static int pk_rank(int rank, int w, void *arg) {
  const pk_case *c = arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, d = norm(c->dim, nd);
  int64_t total = 0, local = 0, outer, inner;
  for (int i = 0; i < c->nseq; i++)
    total += c->lens[i], local += rule(c->lens[i], w, rank);
  int64_t padded[SPC_MAX_DIMS], packed[SPC_MAX_DIMS], part[SPC_MAX_DIMS];
  memcpy(padded, c->shape, sizeof(padded));
  memcpy(packed, c->shape, sizeof(packed));
  memcpy(part, c->shape, sizeof(part));
  padded[d] = total + c->shape[d], packed[d] = total, part[d] = local;
  size_t es = spc_dtype_size(c->dt), xn = numel(padded, nd),
         fn = numel(packed, nd), pn = numel(part, nd);
  around(padded, nd, d, &outer, &inner);
  spc_tensor x_t, y_t, z_t, gy_t, gx_t, gz_t, gyy_t;
  void *x = rk_tensor(&k, &x_t, c->dt, nd, padded);
  void *y = rk_tensor(&k, &y_t, c->dt, nd, part);
  void *z = rk_tensor(&k, &z_t, c->dt, nd, packed);
  void *gy = rk_tensor(&k, &gy_t, c->dt, nd, part);
  void *gx = rk_tensor(&k, &gx_t, c->dt, nd, padded);
  void *gz = rk_tensor(&k, &gz_t, c->dt, nd, packed);
  void *gyy = rk_tensor(&k, &gyy_t, c->dt, nd, part);
  if (!x || !y || !z || !gy || !gx || !gz || !gyy)
    return rk_close(&k, 1);
  fill(x, c->dt, xn, SEED, 0);
  fill(gy, c->dt, pn, SEED_GRAD, rank);
  fill(gz, c->dt, fn, SEED_GRAD2, rank);
  char *xf = fresh(c->dt, xn, SEED, 0), *ref = calloc(xn + 1, es);
  int bad = 0, rc;
  if ((rc = spc_packed_split(k.g, &x_t, &y_t, c->dim, c->lens, c->nseq)) < 0)
    bad |= op_failed(&k, "packed_split", rc);
  else {
    pk_rows(c, w, rank, ref, local, xf, padded[d], 1, outer, inner, es);
    bad |= expect_same(rank, "packed_split", c->dt, y, ref, pn);
    rc = spc_packed_gather(k.g, &y_t, &z_t, c->dim, c->lens, c->nseq);
    if (rc < 0)
      bad |= op_failed(&k, "packed_gather", rc);
    else { /* the packed rows of x, padding dropped */
      rows_copy(ref, total, 0, xf, padded[d], 0, total, outer, inner, es);
      bad |= expect_same(rank, "packed_gather(split(x)) == x", c->dt, z, ref,
                         fn);
    }
  }
  /* split backward: every rank's pieces placed, / w; padding rows zero */
  rc = spc_packed_split_backward(k.g, &gy_t, &gx_t, c->dim, c->lens, c->nseq);
  if (rc < 0)
    bad |= op_failed(&k, "packed_split_backward", rc);
  else {
    memset(ref, 0, xn * es);
    for (int j = 0; j < w; j++) {
      int64_t lj = 0;
      for (int i = 0; i < c->nseq; i++)
        lj += rule(c->lens[i], w, j);
      char *gj = fresh(c->dt, (size_t)(outer * lj * inner), SEED_GRAD, j);
      pk_rows(c, w, j, gj, lj, ref, padded[d], 0, outer, inner, es);
      free(gj);
    }
    scale_ref(c->dt, ref, xn, SPC_SCALE_DOWN, w);
    bad |= expect_same(rank, "packed_split_backward", c->dt, gx, ref, xn);
  }
  /* gather backward: own pieces of own grad, * w */
  rc = spc_packed_gather_backward(k.g, &gz_t, &gyy_t, c->dim, c->lens,
                                  c->nseq);
  if (rc < 0)
    bad |= op_failed(&k, "packed_gather_backward", rc);
  else {
    char *gf = fresh(c->dt, fn, SEED_GRAD2, rank);
    pk_rows(c, w, rank, ref, local, gf, total, 1, outer, inner, es);
    scale_ref(c->dt, ref, pn, SPC_SCALE_UP, w);
    bad |= expect_same(rank, "packed_gather_backward", c->dt, gyy, ref, pn);
    free(gf);
  }
  free(xf), free(ref);
  return rk_close(&k, bad);
}

static pk_case pk_cases[] = {
    {"packed-first", SPC_FLOAT32, 3, {0, 3, 2}, 0, 4, {5, 1, 7, 3}},
    {"packed-mid-zero-len", SPC_FLOAT32, 3, {2, 0, 3}, 1, 3, {6, 0, 9}},
    {"packed-last-one-seq", SPC_FLOAT32, 2, {3, 0}, -1, 1, {11}},
    {"packed-bf16", SPC_BFLOAT16, 2, {0, 4}, 0, 3, {4, 2, 5}},
    {"packed-equal", SPC_FLOAT32, 2, {0, 3}, 0, 2, {8, 8}},
    {"packed-padded", SPC_FLOAT32, 2, {2, 3}, 0, 2, {5, 4}},
};

START_TEST(packed_cases) { RUN_TABLE(pk_cases, pk_rank); }
END_TEST

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}

static void teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

int main(void) {
  Suite *s = suite_create("ops_copy");
  TCase *tc = tcase_create("ops_copy");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, split_cases_all);
  tcase_add_test(tc, all_gather_cases);
  tcase_add_test(tc, all_to_all_cases);
  tcase_add_test(tc, all_to_all_v_cases);
  tcase_add_test(tc, sp2hp_hp2sp_cases);
  tcase_add_test(tc, zigzag_cases);
  tcase_add_test(tc, packed_cases);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
