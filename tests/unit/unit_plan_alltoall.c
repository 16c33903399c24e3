/* The all-to-all planner (kernels/plan_alltoall.c). Plans run on per-rank
 * byte arrays and are compared with a naive reference that finds, for
 * every output element, its source rank and input element by plain index
 * arithmetic; it and its split rule share no code with the planner. Every
 * plan is also checked to copy each output byte exactly once, straight
 * from an input (no staging), and to give the input back when followed by
 * the backward all-to-all. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

#define MAXW 8

static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int64_t rng_range(int64_t lo, int64_t hi) { /* inclusive */
  return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* The split rule dealt out one by one: item k goes to rank k % w. */
static int64_t naive_piece(int64_t n, int w, int r) {
  int64_t c = 0;
  for (int64_t k = 0; k < n; k++)
    c += k % w == r;
  return c;
}

/* One all-to-all as every rank describes it. full[] is the logical shape:
 * full[s] = S, full[g] = G; gp[r] is rank r's piece of G, soff[r] the start
 * of its piece of S. */
typedef struct {
  int world, nd, s, g;
  int64_t full[SPK_MAX_DIMS], gp[MAXW], soff[MAXW];
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} acase;

static void mk(acase *c, int world, int nd, const int64_t *full, int s, int g,
               int64_t scalar, spk_dtype dt) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->s = s, c->g = g;
  memcpy(c->full, full, sizeof(int64_t) * (size_t)nd);
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = SPK_OP_ALL_TO_ALL, a->dtype = dt, a->scalar = scalar;
    a->ndims = 2, a->dims[0] = s, a->dims[1] = g;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 0; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = full[i];
    a->in.dim[g] = c->gp[r] = naive_piece(full[g], world, r);
    a->out.dim[s] = naive_piece(full[s], world, r);
    c->soff[r] = r ? c->soff[r - 1] + c->args[r - 1].out.dim[s] : 0;
    c->argp[r] = a;
  }
}

static size_t nbytes(const spk_shape *sh, size_t es) {
  size_t n = es;
  for (int i = 0; i < sh->ndim; i++)
    n *= (size_t)sh->dim[i];
  return n;
}

static void unravel(size_t o, const spk_shape *sh, int64_t *idx) {
  for (int i = sh->ndim - 1; i >= 0; i--) {
    idx[i] = (int64_t)(o % (size_t)sh->dim[i]);
    o /= (size_t)sh->dim[i];
  }
}
static size_t ravel(const int64_t *idx, const spk_shape *sh) {
  size_t o = 0;
  for (int i = 0; i < sh->ndim; i++)
    o = o * (size_t)sh->dim[i] + (size_t)idx[i];
  return o;
}

/* out_r[idx]: idx[g] = p falls in rank j's slice of G; the source is x_j at
 * idx with idx[g] = p - off_j and idx[s] moved to piece r of S. */
static void naive_a2a(const acase *c, uint8_t *const *in, int r,
                      uint8_t *out) {
  const spk_shape *os = &c->args[r].out;
  size_t es = spk_dtype_size(c->args[0].dtype);
  size_t n = nbytes(os, 1);
  for (size_t o = 0; o < n; o++) {
    int64_t idx[SPK_MAX_DIMS];
    unravel(o, os, idx);
    int j = 0;
    int64_t p = idx[c->g], off = 0;
    while (p >= off + c->gp[j])
      off += c->gp[j++];
    idx[c->g] = p - off;
    idx[c->s] += c->soff[r];
    memcpy(out + o * es, in[j] + ravel(idx, &c->args[j].in) * es, es);
  }
}

/* Per-rank tensors of one op: in[r], out[r] and their byte sizes. */
typedef struct {
  int world;
  uint8_t *t[MAXW][SPK_T_COUNT];
  size_t n[MAXW][SPK_T_COUNT];
} bufs;

static void bufs_alloc(bufs *b, const spk_op_args *const *argp, int world) {
  b->world = world;
  for (int r = 0; r < world; r++) {
    size_t es = spk_dtype_size(argp[r]->dtype);
    b->n[r][SPK_T_IN] = nbytes(&argp[r]->in, es);
    b->n[r][SPK_T_OUT] = nbytes(&argp[r]->out, es);
    for (int t = 0; t < SPK_T_COUNT; t++)
      b->t[r][t] = malloc(b->n[r][t] + 1);
  }
}
static void bufs_free(bufs *b) {
  for (int r = 0; r < b->world; r++)
    free(b->t[r][SPK_T_IN]), free(b->t[r][SPK_T_OUT]);
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
static uint64_t move_end(const spk_move *m, int dst_side) {
  uint64_t end = dst_side ? m->dst_off : m->src_off;
  for (int i = 0; i < m->nd - 1; i++)
    end += (m->len[i] - 1) * (dst_side ? m->dst_stride[i] : m->src_stride[i]);
  return end + m->len[m->nd - 1];
}

/* One copy per byte: every move reads an input and writes an output inside
 * their bounds, and every output byte is written exactly once. */
static void check_moves(const spk_plan *p, const bufs *b, const char *tag) {
  uint64_t total = 0;
  uint8_t *cnt[MAXW];
  for (int r = 0; r < b->world; r++) {
    total += b->n[r][SPK_T_OUT];
    cnt[r] = calloc(b->n[r][SPK_T_OUT] + 1, 1);
  }
  ck_assert_msg(p->bytes == total, "%s: plan.bytes %llu, outputs hold %llu",
                tag, (unsigned long long)p->bytes, (unsigned long long)total);
  for (size_t i = 0; i < p->nmoves; i++) {
    const spk_move *m = &p->moves[i];
    ck_assert_msg(m->src_rank < (uint32_t)b->world &&
                      m->dst_rank < (uint32_t)b->world &&
                      m->src_t == SPK_T_IN && m->dst_t == SPK_T_OUT,
                  "%s: move %zu is not input -> output", tag, i);
    ck_assert_msg(move_end(m, 0) <= b->n[m->src_rank][SPK_T_IN] &&
                      move_end(m, 1) <= b->n[m->dst_rank][SPK_T_OUT],
                  "%s: move %zu leaves its tensors", tag, i);
    touch(m, 0, m->dst_off, cnt[m->dst_rank]);
  }
  for (int r = 0; r < b->world; r++) {
    size_t k = 0; /* one assertion per rank: check's are costly */
    while (k < b->n[r][SPK_T_OUT] && cnt[r][k] == 1)
      k++;
    ck_assert_msg(k == b->n[r][SPK_T_OUT], "%s: rank %d output byte %zu "
                  "written %d times", tag, r, k, cnt[r][k]);
    free(cnt[r]);
  }
}

/* Build the plan of argp, check its moves, run it with outputs prefilled
 * with two patterns (a byte never written shows up) and compare each
 * output with want[r]. Outputs keep the last run's bytes. */
static void run_plan(const spk_op_args *const *argp, bufs *b,
                     uint8_t *const *want, const char *tag) {
  spk_plan plan;
  spk_plan_init(&plan, b->world);
  spk_err err = {{0}};
  int rc = spk_plan_build(argp, b->world, &plan, &err);
  ck_assert_msg(rc == SPK_OK, "%s: plan_build: %d %s", tag, rc, err.msg);
  check_moves(&plan, b, tag);
  uint8_t *bases[MAXW * SPK_T_COUNT];
  for (int r = 0; r < b->world; r++)
    for (int t = 0; t < SPK_T_COUNT; t++)
      bases[r * SPK_T_COUNT + t] = b->t[r][t];
  for (int fill = 0; fill < 2; fill++) {
    for (int r = 0; r < b->world; r++)
      for (size_t k = 0; k < b->n[r][SPK_T_OUT]; k++)
        b->t[r][SPK_T_OUT][k] = fill ? (uint8_t)(k * 7 + 3) : 0xa5;
    spk_plan_exec(&plan, bases);
    for (int r = 0; r < b->world; r++)
      ck_assert_msg(memcmp(b->t[r][SPK_T_OUT], want[r],
                           b->n[r][SPK_T_OUT]) == 0,
                    "%s: rank %d output differs (fill %d)", tag, r, fill);
  }
  spk_plan_free(&plan);
}

/* The backward op of c: scatter g, gather s with gather_size S. */
static void mk_backward(const acase *c, acase *bw) {
  mk(bw, c->world, c->nd, c->full, c->g, c->s, c->full[c->s],
     c->args[0].dtype);
}

/* Forward against the reference; then backward on the forward's outputs
 * must give every rank its input back. */
static void run_case(const acase *c, const char *tag) {
  bufs f, bk;
  bufs_alloc(&f, c->argp, c->world);
  uint8_t *in[MAXW], *want[MAXW];
  for (int r = 0; r < c->world; r++) {
    in[r] = f.t[r][SPK_T_IN];
    for (size_t k = 0; k < f.n[r][SPK_T_IN]; k++)
      in[r][k] = (uint8_t)rng_next();
  }
  for (int r = 0; r < c->world; r++) {
    want[r] = malloc(f.n[r][SPK_T_OUT] + 1);
    naive_a2a(c, in, r, want[r]);
  }
  run_plan(c->argp, &f, want, tag);
  acase bw;
  mk_backward(c, &bw);
  bufs_alloc(&bk, bw.argp, c->world);
  for (int r = 0; r < c->world; r++)
    memcpy(bk.t[r][SPK_T_IN], f.t[r][SPK_T_OUT], f.n[r][SPK_T_OUT]);
  char btag[160];
  snprintf(btag, sizeof(btag), "%s backward", tag);
  run_plan(bw.argp, &bk, in, btag);
  for (int r = 0; r < c->world; r++)
    free(want[r]);
  bufs_free(&f), bufs_free(&bk);
}

static const spk_dtype dts[] = {SPK_I8,  SPK_U8,  SPK_F16, SPK_BF16,
                                SPK_F32, SPK_I32, SPK_F64, SPK_I64};

/* A size n over w: a multiple of w (0 included: every piece empty), or
 * with a remainder when `unaligned` (pieces of unequal, maybe 0, size). */
static int64_t pick_size(int w, int unaligned) {
  int64_t n = w * rng_range(0, 2);
  if (unaligned && w > 1)
    n += rng_range(1, w - 1);
  return n;
}

/* mode bit 0: S unaligned, bit 1: G unaligned. */
static void random_case(int nd, int s, int g, int mode, int it,
                        uint64_t seed) {
  int world = (int)rng_range(1, MAXW);
  int64_t full[SPK_MAX_DIMS];
  for (int i = 0; i < nd; i++) /* now and then an empty other dim */
    full[i] = rng_range(0, 39) == 0 ? 0 : rng_range(1, nd > 5 ? 2 : 3);
  full[s] = pick_size(world, mode & 1);
  full[g] = pick_size(world, mode & 2);
  /* Unequal gather sizes need gather_size; equal ones may give it. */
  int64_t scalar = (mode & 2) || rng_range(0, 1) ? full[g] : 0;
  acase c;
  mk(&c, world, nd, full, s, g, scalar, dts[it % 8]);
  for (int r = 0; r < world; r++) { /* spelled from either end */
    if (rng_range(0, 1))
      c.args[r].dims[0] = s - nd;
    if (rng_range(0, 1))
      c.args[r].dims[1] = g - nd;
  }
  char tag[128];
  snprintf(tag, sizeof(tag),
           "seed %#llx case %d (w %d nd %d s %d g %d S %lld G %lld)",
           (unsigned long long)seed, it, world, nd, s, g, (long long)full[s],
           (long long)full[g]);
  run_case(&c, tag);
}

START_TEST(test_random) {
  const uint64_t seed = 0xa2a5eedull;
  rng_state = seed;
  int it = 0;
  for (int nd = 2; nd <= 5; nd++)
    for (int s = 0; s < nd; s++)
      for (int g = 0; g < nd; g++)
        for (int k = 0; s != g && k < 16; k++)
          random_case(nd, s, g, k % 4, it++, seed);
  for (int k = 0; k < 48; k++) { /* a few 6-d to 8-d */
    int nd = (int)rng_range(6, 8), s = (int)rng_range(0, nd - 1);
    int g = (s + (int)rng_range(1, nd - 1)) % nd;
    random_case(nd, s, g, k % 4, it++, seed);
  }
}
END_TEST

/* 5-d aligned, every (scatter, gather) pair: each rank holds [2,4,3,2,4]. */
START_TEST(test_5d_aligned) {
  rng_state = 5;
  const int64_t local[5] = {2, 4, 3, 2, 4};
  for (int s = 0; s < 5; s++)
    for (int g = 0; g < 5; g++) {
      if (s == g)
        continue;
      int64_t full[5];
      memcpy(full, local, sizeof(full));
      full[g] *= 2;
      acase c;
      mk(&c, 2, 5, full, s, g, 0, SPK_F32);
      char tag[64];
      snprintf(tag, sizeof(tag), "5-d w 2 s %d g %d", s, g);
      run_case(&c, tag);
    }
}
END_TEST

/* The reference itself, on values worked out by hand. */
START_TEST(test_by_hand) {
  acase c;
  mk(&c, 2, 2, (const int64_t[]){2, 4}, 0, 1, 0, SPK_U8);
  bufs b;
  bufs_alloc(&b, c.argp, 2);
  memcpy(b.t[0][SPK_T_IN], (const uint8_t[]){0, 1, 2, 3}, 4);
  memcpy(b.t[1][SPK_T_IN], (const uint8_t[]){4, 5, 6, 7}, 4);
  uint8_t w0[] = {0, 1, 4, 5}, w1[] = {2, 3, 6, 7};
  uint8_t *want[2] = {w0, w1}, got[4];
  uint8_t *in[2] = {b.t[0][SPK_T_IN], b.t[1][SPK_T_IN]};
  naive_a2a(&c, in, 1, got);
  ck_assert(memcmp(got, w1, 4) == 0);
  run_plan(c.argp, &b, want, "2x2 by hand");
  bufs_free(&b);
  /* S = 3 over 2 and G = 3 over 2: rank 0 holds [1, 2], rank 1 [1, 1]. */
  mk(&c, 2, 2, (const int64_t[]){3, 3}, 1, 0, 3, SPK_U8);
  bufs_alloc(&b, c.argp, 2);
  memcpy(b.t[0][SPK_T_IN], (const uint8_t[]){0, 1, 2, 3, 4, 5}, 6);
  memcpy(b.t[1][SPK_T_IN], (const uint8_t[]){6, 7, 8}, 3);
  uint8_t u0[] = {0, 1, 3, 4, 6, 7}, u1[] = {2, 5, 8};
  uint8_t *uw[2] = {u0, u1};
  run_plan(c.argp, &b, uw, "unaligned by hand");
  bufs_free(&b);
}
END_TEST

static void expect_build(acase *c, int rc, const char *n1, const char *n2) {
  spk_plan plan;
  spk_plan_init(&plan, c->world);
  spk_err err = {{0}};
  int got = spk_plan_build(c->argp, c->world, &plan, &err);
  spk_plan_free(&plan);
  ck_assert_msg(got == rc, "plan_build gave %d (%s), want %d", got, err.msg,
                rc);
  ck_assert_msg(strstr(err.msg, n1) != NULL, "'%s' lacks '%s'", err.msg, n1);
  ck_assert_msg(n2 == NULL || strstr(err.msg, n2) != NULL, "'%s' lacks '%s'",
                err.msg, n2);
}

static const int64_t F234[] = {6, 3, 4}; /* w 3: S = 6 along 0, G = 3 */

START_TEST(test_bad_dims) {
  acase c;
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].ndims = 1;
  expect_build(&c, SPK_EINVAL, "2 dims", "got 1");
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[1].dims[0] = 3;
  expect_build(&c, SPK_EINVAL, "scatter dim 3", NULL);
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[2].dims[1] = -4;
  expect_build(&c, SPK_EINVAL, "gather dim -4", NULL);
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].dims[0] = 2, c.args[r].dims[1] = -1;
  expect_build(&c, SPK_EINVAL, "same dim", "(2)");
  mk(&c, 1, 1, (const int64_t[]){4}, 0, 0, 0, SPK_F32);
  c.args[0].dims[1] = -1;
  expect_build(&c, SPK_EINVAL, "same dim", NULL);
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[1].dims[1] = 2, c.args[1].out.dim[1] = 1, c.args[1].out.dim[2] = 12;
  expect_build(&c, SPK_EMISMATCH, "rank 1", NULL);
}
END_TEST

START_TEST(test_mismatch) {
  acase c;
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[2].in.dim[0] = 9, c.args[2].out.dim[0] = 3; /* its own S is 9 */
  expect_build(&c, SPK_EMISMATCH, "dim 0 (the scatter dim)", "rank 2 has 9");
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[1].in.dim[2] = c.args[1].out.dim[2] = 5;
  expect_build(&c, SPK_EMISMATCH, "input dim 2", "rank 1 has 5");
  mk(&c, 3, 3, F234, 0, 1, 3, SPK_F32);
  c.args[1].scalar = 0;
  expect_build(&c, SPK_EMISMATCH, "scalar", "rank 1");
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[2].dtype = SPK_I32;
  expect_build(&c, SPK_EMISMATCH, "dtype", "rank 2");
}
END_TEST

START_TEST(test_bad_gather) {
  acase c;
  /* Unequal sizes without gather_size: rank 0's G = 2 * 3 says 2 each. */
  mk(&c, 3, 2, (const int64_t[]){3, 5}, 0, 1, 0, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].out.dim[1] = c.args[r].in.dim[1] * 3;
  expect_build(&c, SPK_EINVAL, "rank 2 holds 1 along gather dim 1",
               "expected 2");
  /* gather_size given but a rank holds the wrong piece. */
  mk(&c, 3, 2, (const int64_t[]){3, 5}, 0, 1, 5, SPK_F32);
  c.args[1].in.dim[1] = 1;
  expect_build(&c, SPK_EINVAL, "rank 1 holds 1", "expected 2");
  mk(&c, 3, 2, (const int64_t[]){3, 5}, 0, 1, 6, SPK_F32);
  for (int r = 0; r < 3; r++) /* outputs fit G = 6; rank 2 holds 1, not 2 */
    c.args[r].out.dim[1] = 6;
  expect_build(&c, SPK_EINVAL, "rank 2 holds 1", "gather_size 6");
  mk(&c, 3, 2, (const int64_t[]){3, 6}, 0, 1, 0, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].scalar = -1;
  expect_build(&c, SPK_EINVAL, "gather_size -1", NULL);
  /* The local gather size times w overflows. */
  mk(&c, 8, 2, (const int64_t[]){1, 8}, 0, 1, 0, SPK_U8);
  for (int r = 0; r < 8; r++) /* [1, 2^61] bytes fits, 2^64 does not */
    c.args[r].in.dim[1] = (int64_t)1 << 61, c.args[r].out.dim[1] = 1;
  expect_build(&c, SPK_EINVAL, "overflows", NULL);
}
END_TEST

START_TEST(test_bad_output) {
  acase c;
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[1].out.dim[1] = 4;
  expect_build(&c, SPK_EINVAL, "rank 1: output shape [2, 4, 4]",
               "should be [2, 3, 4]");
  mk(&c, 3, 3, (const int64_t[]){5, 3, 4}, 0, 1, 0, SPK_F32);
  c.args[2].out.dim[0] = 2; /* piece 2 of 5 over 3 is 1 */
  expect_build(&c, SPK_EINVAL, "rank 2", "should be [1, 3, 4]");
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[0].out.dim[2] = 2;
  expect_build(&c, SPK_EINVAL, "rank 0", "should be [2, 3, 4]");
  mk(&c, 3, 3, F234, 0, 1, 0, SPK_F32);
  c.args[0].out.ndim = 4, c.args[0].out.dim[3] = 1;
  expect_build(&c, SPK_EINVAL, "output shape", "rank 0");
}
END_TEST

static Suite *a2a_suite(void) {
  Suite *s = suite_create("plan_alltoall");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_random);
  tcase_add_test(tc, test_5d_aligned);
  tcase_add_test(tc, test_by_hand);
  tcase_add_test(tc, test_bad_dims);
  tcase_add_test(tc, test_mismatch);
  tcase_add_test(tc, test_bad_gather);
  tcase_add_test(tc, test_bad_output);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(a2a_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
