/* The all-to-all planner (kernels/plan_alltoall.c). Plans run on per-rank
 * byte arrays and are compared with a naive reference that finds, for
 * every output element, its source rank and input element by plain index
 * arithmetic; it and its split rule share no code with the planner. Every
 * plan is also checked to copy each output byte exactly once, straight
 * from an input (no staging), and to give the input back when followed by
 * the backward all-to-all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

#define MAXW 8

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
    /* The split rule dealt out one by one: item k goes to rank k % w. */
    a->in.dim[g] = c->gp[r] = ptl_dealt(full[g], world, r);
    a->out.dim[s] = ptl_dealt(full[s], world, r);
    c->soff[r] = r ? c->soff[r - 1] + c->args[r - 1].out.dim[s] : 0;
    c->argp[r] = a;
  }
}

/* out_r[idx]: idx[g] = p falls in rank j's slice of G; the source is x_j at
 * idx with idx[g] = p - off_j and idx[s] moved to piece r of S. */
static void naive_a2a(const acase *c, uint8_t *const *in, int r,
                      uint8_t *out) {
  const spk_shape *os = &c->args[r].out;
  size_t es = spk_dtype_size(c->args[0].dtype);
  size_t n = ptl_numel(os);
  for (size_t o = 0; o < n; o++) {
    int64_t idx[SPK_MAX_DIMS];
    ptl_unravel(o, os, idx);
    int j = 0;
    int64_t p = idx[c->g], off = 0;
    while (p >= off + c->gp[j])
      off += c->gp[j++];
    idx[c->g] = p - off;
    idx[c->s] += c->soff[r];
    memcpy(out + o * es, in[j] + ptl_ravel(idx, &c->args[j].in) * es, es);
  }
}

/* The backward op of c: scatter g, gather s with gather_size S. */
static void mk_backward(const acase *c, acase *bw) {
  mk(bw, c->world, c->nd, c->full, c->g, c->s, c->full[c->s],
     c->args[0].dtype);
}

/* Forward against the reference; then backward on the forward's outputs
 * must give every rank its input back. */
static void run_case(const acase *c, const char *tag) {
  ptl_bufs f, bk;
  ptl_bufs_alloc(&f, c->argp, c->world, 1);
  uint8_t *in[MAXW], *want[MAXW];
  for (int r = 0; r < c->world; r++)
    in[r] = f.b[PTL_IN(r)];
  for (int r = 0; r < c->world; r++) {
    want[r] = malloc(f.sz[PTL_OUT(r)] + 1);
    naive_a2a(c, in, r, want[r]);
  }
  ptl_run_plan(c->argp, &f, want, tag);
  acase bw;
  mk_backward(c, &bw);
  ptl_bufs_alloc(&bk, bw.argp, c->world, 0);
  for (int r = 0; r < c->world; r++)
    memcpy(bk.b[PTL_IN(r)], f.b[PTL_OUT(r)], f.sz[PTL_OUT(r)]);
  char btag[160];
  snprintf(btag, sizeof(btag), "%s backward", tag);
  ptl_run_plan(bw.argp, &bk, in, btag);
  for (int r = 0; r < c->world; r++)
    free(want[r]);
  ptl_bufs_free(&f), ptl_bufs_free(&bk);
}

/* A size n over w: a multiple of w (0 included: every piece empty), or
 * with a remainder when `unaligned` (pieces of unequal, maybe 0, size). */
static int64_t pick_size(int w, int unaligned) {
  int64_t n = w * ptl_rng_range(0, 2);
  if (unaligned && w > 1)
    n += ptl_rng_range(1, w - 1);
  return n;
}

/* mode bit 0: S unaligned, bit 1: G unaligned. */
static void random_case(int nd, int s, int g, int mode, int it,
                        uint64_t seed) {
  int world = (int)ptl_rng_range(1, MAXW);
  int64_t full[SPK_MAX_DIMS];
  /* now and then an empty other dim */
  ptl_random_dims(full, nd, 40, nd > 5 ? 2 : 3);
  full[s] = pick_size(world, mode & 1);
  full[g] = pick_size(world, mode & 2);
  /* Unequal gather sizes need gather_size; equal ones may give it. */
  int64_t scalar = (mode & 2) || ptl_rng_range(0, 1) ? full[g] : 0;
  acase c;
  mk(&c, world, nd, full, s, g, scalar, ptl_dtypes[it % 8]);
  for (int r = 0; r < world; r++) { /* spelled from either end */
    if (ptl_rng_range(0, 1))
      c.args[r].dims[0] = s - nd;
    if (ptl_rng_range(0, 1))
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
  ptl_rng_seed(seed);
  int it = 0;
  for (int nd = 2; nd <= 5; nd++)
    for (int s = 0; s < nd; s++)
      for (int g = 0; g < nd; g++)
        for (int k = 0; s != g && k < 16; k++)
          random_case(nd, s, g, k % 4, it++, seed);
  for (int k = 0; k < 48; k++) { /* a few 6-d to 8-d */
    int nd = (int)ptl_rng_range(6, 8), s = (int)ptl_rng_range(0, nd - 1);
    int g = (s + (int)ptl_rng_range(1, nd - 1)) % nd;
    random_case(nd, s, g, k % 4, it++, seed);
  }
}
END_TEST

/* 5-d aligned, every (scatter, gather) pair: each rank holds [2,4,3,2,4]. */
START_TEST(test_5d_aligned) {
  ptl_rng_seed(5);
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
  ptl_bufs b;
  ptl_bufs_alloc(&b, c.argp, 2, 0);
  memcpy(b.b[PTL_IN(0)], (const uint8_t[]){0, 1, 2, 3}, 4);
  memcpy(b.b[PTL_IN(1)], (const uint8_t[]){4, 5, 6, 7}, 4);
  uint8_t w0[] = {0, 1, 4, 5}, w1[] = {2, 3, 6, 7};
  uint8_t *want[2] = {w0, w1}, got[4];
  uint8_t *in[2] = {b.b[PTL_IN(0)], b.b[PTL_IN(1)]};
  naive_a2a(&c, in, 1, got);
  ck_assert(memcmp(got, w1, 4) == 0);
  ptl_run_plan(c.argp, &b, want, "2x2 by hand");
  ptl_bufs_free(&b);
  /* S = 3 over 2 and G = 3 over 2: rank 0 holds [1, 2], rank 1 [1, 1]. */
  mk(&c, 2, 2, (const int64_t[]){3, 3}, 1, 0, 3, SPK_U8);
  ptl_bufs_alloc(&b, c.argp, 2, 0);
  memcpy(b.b[PTL_IN(0)], (const uint8_t[]){0, 1, 2, 3, 4, 5}, 6);
  memcpy(b.b[PTL_IN(1)], (const uint8_t[]){6, 7, 8}, 3);
  uint8_t u0[] = {0, 1, 3, 4, 6, 7}, u1[] = {2, 5, 8};
  uint8_t *uw[2] = {u0, u1};
  ptl_run_plan(c.argp, &b, uw, "unaligned by hand");
  ptl_bufs_free(&b);
}
END_TEST

/* spk_plan_build must give rc, with a message holding both needles. */
static void expect_build(acase *c, int rc, const char *n1, const char *n2) {
  ptl_expect_build(c->argp, c->world, rc, n1, n2);
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

int main(void) {
  const TTest *tests[] = {test_random,    test_5d_aligned, test_by_hand,
                          test_bad_dims,  test_mismatch,   test_bad_gather,
                          test_bad_output};
  return ptl_run_suite("plan_alltoall", 600, tests, PTL_LEN(tests));
}
