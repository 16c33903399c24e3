/* Scaffolding shared by the planner suites: see plan_testlib.h. */
#include "check_run.h"
#include "plan_testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- seeded random numbers (splitmix64) ------------------------------- */

static uint64_t rng_state;

void ptl_rng_seed(uint64_t seed) { rng_state = seed; }

uint64_t ptl_rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t ptl_rng_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(ptl_rng_next() % (uint64_t)(hi - lo + 1));
}

void ptl_fill_random(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)ptl_rng_next();
}

void ptl_random_dims(int64_t *dim, int n, int64_t empty_odds, int64_t maxd) {
  for (int i = 0; i < n; i++)
    dim[i] = ptl_rng_range(0, empty_odds - 1) == 0 ? 0 : ptl_rng_range(1, maxd);
}

void ptl_respell_dim(spk_op_args *args, int world, int k, int d, int nd) {
  for (int r = 0; r < world; r++)
    if (ptl_rng_range(0, 1))
      args[r].dims[k] = d - nd;
}

void ptl_tag(char *tag, uint64_t seed, int it, const char *op, int w, int nd,
             int d) {
  snprintf(tag, PTL_TAG, "seed %#llx case %d (%s%sw %d nd %d d %d)",
           (unsigned long long)seed, it, op ? op : "", op ? " " : "", w, nd, d);
}

const spk_dtype ptl_dtypes[8] = {SPK_I8,  SPK_U8,  SPK_F16, SPK_BF16,
                                 SPK_F32, SPK_I32, SPK_F64, SPK_I64};

/* ---- shapes and elements -------------------------------------------- */

size_t ptl_numel(const spk_shape *s) {
  size_t n = 1;
  for (int i = 0; i < s->ndim; i++)
    n *= (size_t)s->dim[i];
  return n;
}

void ptl_unravel(size_t o, const spk_shape *s, int64_t *idx) {
  for (int i = s->ndim - 1; i >= 0; i--) {
    idx[i] = (int64_t)(o % (size_t)s->dim[i]);
    o /= (size_t)s->dim[i];
  }
}

size_t ptl_ravel(const int64_t *idx, const spk_shape *s) {
  size_t at = 0;
  for (int i = 0; i < s->ndim; i++)
    at = at * (size_t)s->dim[i] + (size_t)idx[i];
  return at;
}

int64_t ptl_dealt(int64_t n, int w, int r) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    k += i % w == r;
  return k;
}

uint32_t ptl_scale_flags(int k) {
  return (uint32_t)(k % 2 ? SPK_SCALE_UP : SPK_SCALE_DOWN)
         << SPK_FLAG_SCALE_SHIFT;
}

void ptl_put(uint8_t *dst, const uint8_t *src, spk_dtype dt, uint32_t flags,
             int world) {
  uint32_t scale = flags >> SPK_FLAG_SCALE_SHIFT;
  float x;
  if (scale == SPK_SCALE_NONE)
    return (void)memcpy(dst, src, spk_dtype_size(dt));
  memcpy(&x, src, sizeof(x));
  x = scale == SPK_SCALE_UP ? x * (float)world : x / (float)world;
  memcpy(dst, &x, sizeof(x));
}

/* ---- moves ------------------------------------------------------------ */

uint64_t ptl_move_end(const spk_move *m, int dst_side) {
  uint64_t end = dst_side ? m->dst_off : m->src_off;
  for (int i = 0; i < m->nd - 1; i++)
    end += (m->len[i] - 1) * (dst_side ? m->dst_stride[i] : m->src_stride[i]);
  return end + m->len[m->nd - 1];
}

void ptl_check_move(const spk_move *m, size_t i, int world, const size_t *sz,
                    int own_rank, const char *tag) {
  ck_assert_msg(m->src_t == SPK_T_IN && m->dst_t == SPK_T_OUT &&
                    m->src_rank < (uint32_t)world &&
                    m->dst_rank < (uint32_t)world &&
                    (!own_rank || m->src_rank == m->dst_rank),
                "%s: move %zu has bad ends", tag, i);
  ck_assert_msg(ptl_move_end(m, 0) <= sz[PTL_IN(m->src_rank)] &&
                    ptl_move_end(m, 1) <= sz[PTL_OUT(m->dst_rank)],
                "%s: move %zu leaves its tensors", tag, i);
}

/* ---- per-rank buffers ------------------------------------------------- */

void ptl_bufs_alloc(ptl_bufs *b, const spk_op_args *const *argp, int world,
                    int fill) {
  b->world = world;
  for (int r = 0; r < world; r++) {
    size_t es = spk_dtype_size(argp[r]->dtype);
    size_t i = PTL_IN(r), o = PTL_OUT(r);
    b->sz[i] = ptl_numel(&argp[r]->in) * es;
    b->sz[o] = ptl_numel(&argp[r]->out) * es;
    b->b[i] = malloc(b->sz[i] + 1);
    b->b[o] = malloc(b->sz[o] + 1);
    for (size_t k = 0; fill && k < b->sz[i]; k++) /* |float| < 2 if scaled */
      b->b[i][k] = (uint8_t)ptl_rng_next() &
                   (argp[0]->flags && k % 4 == 3 ? 0xbf : 0xff);
  }
}

void ptl_bufs_free(ptl_bufs *b) {
  for (int i = 0; i < b->world * SPK_T_COUNT; i++)
    free(b->b[i]);
}

void ptl_bufs_replicate_in(ptl_bufs *b) {
  for (int r = 1; r < b->world; r++)
    memcpy(b->b[PTL_IN(r)], b->b[PTL_IN(0)], b->sz[PTL_IN(0)]);
}

void ptl_bufs_chain(ptl_bufs *next, const ptl_bufs *prev,
                    const spk_op_args *const *argp) {
  next->world = prev->world;
  for (int r = 0; r < prev->world; r++) {
    size_t i = PTL_IN(r), o = PTL_OUT(r);
    next->b[i] = prev->b[o], next->sz[i] = prev->sz[o];
    next->sz[o] = ptl_numel(&argp[r]->out) * spk_dtype_size(argp[r]->dtype);
    next->b[o] = malloc(next->sz[o] + 1);
    memset(next->b[o], 0xa5, next->sz[o]);
  }
}

void ptl_bufs_chain_free(ptl_bufs *next) {
  for (int r = 0; r < next->world; r++)
    free(next->b[PTL_OUT(r)]);
}

/* ---- executors -------------------------------------------------------- */

void ptl_exec(const spk_op_args *const *argp, int world, uint8_t **bases,
              const size_t *sz, int own_rank, const char *tag) {
  spk_plan plan;
  spk_plan_init(&plan, world);
  spk_err err = {{0}};
  int rc = spk_plan_build(argp, world, &plan, &err);
  ck_assert_msg(rc == SPK_OK, "%s: plan_build: %d %s", tag, rc, err.msg);
  uint64_t out_total = 0;
  for (int r = 0; r < world; r++)
    out_total += sz[PTL_OUT(r)];
  ck_assert_msg(plan.bytes == out_total, "%s: plan.bytes %llu want %llu", tag,
                (unsigned long long)plan.bytes, (unsigned long long)out_total);
  for (size_t i = 0; i < plan.nmoves; i++)
    ptl_check_move(&plan.moves[i], i, world, sz, own_rank, tag);
  spk_plan_exec(&plan, bases);
  spk_plan_free(&plan);
}

void ptl_naive(const spk_op_args *const *argp, int world, ptl_source_fn src,
               const void *c, uint8_t *const *in, uint8_t **want) {
  size_t es = spk_dtype_size(argp[0]->dtype);
  for (int r = 0; r < world; r++) {
    const spk_shape *os = &argp[r]->out;
    for (size_t o = 0; o < ptl_numel(os); o++) {
      int64_t idx[SPK_MAX_DIMS];
      ptl_unravel(o, os, idx);
      int k = src(c, r, idx);
      ptl_put(want[r] + o * es, in[k] + ptl_ravel(idx, &argp[k]->in) * es,
              argp[0]->dtype, argp[0]->flags, world);
    }
  }
}

void ptl_run_case(const spk_op_args *const *argp, int world, ptl_source_fn src,
                  const void *c, int own_rank, const char *tag) {
  uint8_t *in[PTL_MAXW], *want[PTL_MAXW];
  ptl_bufs b;
  ptl_bufs_alloc(&b, argp, world, 1);
  for (int r = 0; r < world; r++)
    in[r] = b.b[PTL_IN(r)], want[r] = malloc(b.sz[PTL_OUT(r)] + 1);
  ptl_naive(argp, world, src, c, in, want);
  for (int fill = 0; fill < 2; fill++) {
    for (int r = 0; r < world; r++)
      memset(b.b[PTL_OUT(r)], fill ? 0xff : 0, b.sz[PTL_OUT(r)]);
    ptl_exec(argp, world, b.b, b.sz, own_rank, tag);
    for (int r = 0; r < world; r++)
      ck_assert_msg(memcmp(b.b[PTL_OUT(r)], want[r], b.sz[PTL_OUT(r)]) == 0,
                    "%s: rank %d output differs from reference (fill %d)", tag,
                    r, fill);
  }
  for (int r = 0; r < world; r++)
    free(want[r]);
  ptl_bufs_free(&b);
}

/* Count the writes of move m's bytes on the destination side. */
static void touch(const spk_move *m, int d, uint64_t off, uint8_t *cnt) {
  if (d == m->nd - 1) {
    for (uint64_t k = 0; k < m->len[d]; k++)
      cnt[off + k]++;
    return;
  }
  for (uint64_t k = 0; k < m->len[d]; k++)
    touch(m, d + 1, off + k * m->dst_stride[d], cnt);
}

void ptl_check_moves(const spk_plan *p, const ptl_bufs *b, const char *tag) {
  uint64_t total = 0;
  uint8_t *cnt[PTL_MAXW];
  for (int r = 0; r < b->world; r++) {
    total += b->sz[PTL_OUT(r)];
    cnt[r] = calloc(b->sz[PTL_OUT(r)] + 1, 1);
  }
  ck_assert_msg(p->bytes == total, "%s: plan.bytes %llu, outputs hold %llu",
                tag, (unsigned long long)p->bytes, (unsigned long long)total);
  for (size_t i = 0; i < p->nmoves; i++) {
    const spk_move *m = &p->moves[i];
    ptl_check_move(m, i, b->world, b->sz, 0, tag);
    touch(m, 0, m->dst_off, cnt[m->dst_rank]);
  }
  /* One assertion per rank: check's are costly. */
  for (int r = 0; r < b->world; r++) {
    size_t k = 0, n = b->sz[PTL_OUT(r)];
    while (k < n && cnt[r][k] == 1)
      k++;
    ck_assert_msg(k == n, "%s: rank %d output byte %zu written %d times", tag,
                  r, k, cnt[r][k]);
    free(cnt[r]);
  }
}

void ptl_run_plan(const spk_op_args *const *argp, ptl_bufs *b,
                  uint8_t *const *want, const char *tag) {
  spk_plan plan;
  spk_plan_init(&plan, b->world);
  spk_err err = {{0}};
  int rc = spk_plan_build(argp, b->world, &plan, &err);
  ck_assert_msg(rc == SPK_OK, "%s: plan_build: %d %s", tag, rc, err.msg);
  ptl_check_moves(&plan, b, tag);
  for (int fill = 0; fill < 2; fill++) {
    for (int r = 0; r < b->world; r++)
      for (size_t k = 0; k < b->sz[PTL_OUT(r)]; k++)
        b->b[PTL_OUT(r)][k] = fill ? (uint8_t)(k * 7 + 3) : 0xa5;
    spk_plan_exec(&plan, b->b);
    for (int r = 0; r < b->world; r++)
      ck_assert_msg(memcmp(b->b[PTL_OUT(r)], want[r], b->sz[PTL_OUT(r)]) == 0,
                    "%s: rank %d output differs (fill %d)", tag, r, fill);
  }
  spk_plan_free(&plan);
}

/* ---- expected errors -------------------------------------------------- */

void ptl_expect(int got, const char *msg, int rc, const char *n1,
                const char *n2) {
  ck_assert_msg(got == rc, "gave %d (%s), want %d", got, msg, rc);
  ck_assert_msg(n1 == NULL || strstr(msg, n1) != NULL, "'%s' lacks '%s'", msg,
                n1);
  ck_assert_msg(n2 == NULL || strstr(msg, n2) != NULL, "'%s' lacks '%s'", msg,
                n2);
}

void ptl_expect_build(const spk_op_args *const *argp, int world, int rc,
                      const char *n1, const char *n2) {
  spk_plan plan;
  spk_err err = {{0}};
  spk_plan_init(&plan, world);
  int got = spk_plan_build(argp, world, &plan, &err);
  spk_plan_free(&plan);
  ptl_expect(got, err.msg, rc, n1, n2);
}

void ptl_expect_check(const spk_op_args *a, int world, int rank, int rc,
                      const char *needle) {
  spk_err err = {{0}};
  ptl_expect(spk_args_check(a, world, rank, &err), err.msg, rc, needle, NULL);
}

/* ---- suite ------------------------------------------------------------ */

int ptl_run_suite(const char *name, double timeout, const TTest *const *tests,
                  size_t n) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, timeout);
  for (size_t i = 0; i < n; i++)
    tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
