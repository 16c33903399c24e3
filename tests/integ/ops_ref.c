/* What the op suites share: see ops_ref.h. */
#include "check_run.h"
#include "ops_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

spt_daemon opr_daemon;
spt_nodes opr_nodes;
char opr_gname[64];

/* ---- references: sizes, 16-bit floats, row copies ------------------- */

size_t opr_numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

int64_t opr_rule(int64_t n, int w, int r) { return n / w + (r < n % w); }

int64_t opr_rule_off(int64_t n, int w, int r) {
  int64_t o = 0;
  for (int k = 0; k < r; k++)
    o += opr_rule(n, w, k);
  return o;
}

void opr_pieces(int pat, int64_t n, int w, int64_t *sz) {
  for (int r = 0; r < w; r++)
    sz[r] = pat == OPR_P_RULE  ? opr_rule(n, w, r)
            : pat == OPR_P_REV ? opr_rule(n, w, w - 1 - r)
            : r == 1           ? 0
                               : opr_rule(n, w - 1, r < 1 ? r : r - 1);
}

int64_t opr_sum_before(const int64_t *sz, int r) {
  int64_t o = 0;
  for (int k = 0; k < r; k++)
    o += sz[k];
  return o;
}

float opr_f16_to_f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0    ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Round to nearest even through the value: rintf of |f| in units of the
 * f16 quantum at its exponent is exact arithmetic. */
uint16_t opr_f_to_f16(float f) {
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

float opr_bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t opr_f_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f))
    return (uint16_t)((u >> 16) | 0x40);
  uint32_t low = u & 0xffff, hi = u >> 16;
  if (low > 0x8000 || (low == 0x8000 && (hi & 1)))
    hi++;
  return (uint16_t)hi;
}

void opr_fill(void *p, spc_dtype dt, size_t n, uint64_t seed, int rank) {
  if (dt != SPC_FLOAT16 && dt != SPC_BFLOAT16) {
    spt_fill(p, dt, n, seed, rank);
    return;
  }
  float *f = malloc(n * sizeof(float) + 1);
  spt_fill(f, SPC_FLOAT32, n, seed, rank);
  for (size_t i = 0; i < n; i++)
    ((uint16_t *)p)[i] =
        dt == SPC_FLOAT16 ? opr_f_to_f16(f[i]) : opr_f_to_bf16(f[i]);
  free(f);
}

void opr_scale_ref(spc_dtype dt, void *p, size_t n, int scale, int w) {
  for (size_t i = 0; i < n && scale != SPC_SCALE_NONE; i++) {
    int up = scale == SPC_SCALE_UP;
    if (dt == SPC_FLOAT32) {
      float *x = (float *)p + i;
      *x = up ? *x * (float)w : *x / (float)w;
    } else if (dt == SPC_FLOAT16 || dt == SPC_BFLOAT16) {
      uint16_t *x = (uint16_t *)p + i;
      float v = dt == SPC_FLOAT16 ? opr_f16_to_f(*x) : opr_bf16_to_f(*x);
      v = up ? v * (float)w : v / (float)w;
      *x = dt == SPC_FLOAT16 ? opr_f_to_f16(v) : opr_f_to_bf16(v);
    }
  }
}

void opr_around(const int64_t *s, int nd, int d, int64_t *outer,
                int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < nd; i++) {
    if (i < d)
      *outer *= s[i];
    if (i > d)
      *inner *= s[i];
  }
}

void opr_rows_copy(void *dst, int64_t dD, int64_t dof, const void *src,
                   int64_t sD, int64_t so, int64_t len, int64_t outer,
                   int64_t inner, size_t es) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t t = 0; t < len; t++)
      memcpy((char *)dst + (size_t)((o * dD + dof + t) * inner) * es,
             (const char *)src + (size_t)((o * sD + so + t) * inner) * es,
             (size_t)inner * es);
}

void *opr_fresh(spc_dtype dt, size_t n, uint64_t seed, int rank) {
  void *p = malloc(n * spc_dtype_size(dt) + 1);
  opr_fill(p, dt, n, seed, rank);
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
             (double)(dt == SPC_FLOAT16 ? opr_f16_to_f(h) : opr_bf16_to_f(h)));
    break;
  }
  default:
    snprintf(b, len, "?");
    break;
  }
}

int opr_expect_same(int rank, const char *what, spc_dtype dt, const void *got,
                    const void *want, size_t n) {
  size_t es = spc_dtype_size(dt), bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) &&
        bad++ == 0)
      first = i;
  if (bad) {
    char g[48], w[48];
    fmt_elem(g, sizeof(g), dt, got, first);
    fmt_elem(w, sizeof(w), dt, want, first);
    fprintf(stderr,
            "[%s] rank %d: %s: %zu of %zu elements differ; first at "
            "%zu: got %s, want %s\n",
            opr_gname, rank, what, bad, n, first, g, w);
  }
  return bad != 0;
}

/* ---- one rank's connection, group and shared buffer ----------------- */

int opr_node_of(int rank) { return opr_nodes.n ? rank % opr_nodes.n : 0; }

int opr_rk_open(opr_rk *k, int rank, int world) {
  memset(k, 0, sizeof(*k));
  k->rank = rank, k->world = world;
  /* Across nodes, ranks go round the nodes: a map no plan expects. */
  k->c = spt_connect(opr_nodes.n ? opr_nodes.d[opr_node_of(rank)].socket
                                 : opr_daemon.socket);
  if (k->c == NULL)
    return -1;
  if (spc_group_join(k->c, opr_gname, world, rank, &k->g) < 0 ||
      spc_buffer_alloc(k->c, OPR_BUF_BYTES, &k->buf) < 0) {
    fprintf(stderr, "[%s] rank %d setup: %s\n", opr_gname, rank,
            spc_last_error(k->c));
    return -1;
  }
  return 0;
}

void *opr_rk_tensor(opr_rk *k, spc_tensor *t, spc_dtype dt, int nd,
                    const int64_t *shape) {
  size_t b = opr_numel(shape, nd) * spc_dtype_size(dt);
  if (spc_tensor_init(t, k->buf, k->used, dt, nd, shape) < 0) {
    fprintf(stderr, "[%s] rank %d: tensor: %s\n", opr_gname, k->rank,
            spc_last_error(k->c));
    return NULL;
  }
  k->used += (b + 63) / 64 * 64;
  memset(spc_tensor_data(t), 0xEE, b);
  return spc_tensor_data(t);
}

int opr_rk_close(opr_rk *k, int bad) {
  spc_buffer_free(k->buf);
  spc_group_leave(k->g);
  spc_disconnect(k->c);
  return bad;
}

int opr_op_failed(opr_rk *k, const char *op, int rc) {
  fprintf(stderr, "[%s] rank %d: %s failed: %s: %s\n", opr_gname, k->rank, op,
          spc_strerror(rc), spc_last_error(k->c));
  return 1;
}

int opr_run_worlds(const char *name, spt_rank_fn fn, void *arg) {
  int failed = 0;
  const char *only = getenv("SPT_CASE"); /* debugging: cases matching it */
  if (only != NULL && strstr(name, only) == NULL)
    return 0;
  int n = opr_nodes.n, lo = n ? n : 2, hi = n ? 2 * n : 4, step = n ? n : 1;
  /* SPT_WORLD=w: that world only (the 16-daemon scale suite's 64). */
  if (getenv("SPT_WORLD") != NULL)
    lo = hi = atoi(getenv("SPT_WORLD"));
  for (int w = lo; w <= hi; w += step) {
    snprintf(opr_gname, sizeof(opr_gname), "%s-w%d", name, w);
    /* The references cost O(world^2) on this machine's few cores: the
     * hang guard grows with the world past 32 ranks. */
    if (spt_run_ranks(w, fn, arg, w <= 32 ? 60 : 60 * w / 32) != 0) {
      fprintf(stderr, "FAILED: %s\n", opr_gname);
      failed++;
    }
  }
  return failed;
}

int opr_norm(int d, int nd) { return d < 0 ? d + nd : d; }

static void setup(void) {
  if (opr_nodes.n == 0)
    ck_assert_int_eq(spt_daemon_start(&opr_daemon, NULL), 0);
  else
    ck_assert_int_eq(spt_nodes_start(&opr_nodes, opr_nodes.n, NULL), 0);
}

static void teardown(void) {
  if (opr_nodes.n == 0)
    ck_assert_int_eq(spt_daemon_stop(&opr_daemon), 0);
  else
    ck_assert_int_eq(spt_nodes_stop(&opr_nodes), 0);
}

int opr_run_suite(const char *name, const TTest *const *tests, size_t n) {
  const char *nodes = getenv("SPT_NODES");
  opr_nodes.n = nodes ? atoi(nodes) : 0;
  if (opr_nodes.n < 0 || opr_nodes.n > SPT_MAX_NODES)
    opr_nodes.n = 0;
  Suite *s = suite_create(name);
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, setup, teardown);
  int w = getenv("SPT_WORLD") ? atoi(getenv("SPT_WORLD")) : 0;
  tcase_set_timeout(tc, w > 64 ? 300 * w / 64 : 300);
  for (size_t i = 0; i < n; i++)
    tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
