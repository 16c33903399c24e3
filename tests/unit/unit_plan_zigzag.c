/* The zigzag planners (kernels/plan_zigzag.c): plans run by the reference
 * executor (spk_plan_exec) over per-rank byte arrays are compared with a
 * naive per-element reference that shares no code with the planner, for
 * worlds of 1..8 ranks and of 100 (the seeds' int8 chunk indices stopped at
 * 63). Also: the grad scale flag, gather after split is the identity, and
 * bad arguments fail with the right status and a message naming them. */
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

#define MAXW PTL_MAXW

/* One zigzag op as every rank describes it: the full sequence has shape
 * `shape` with 2w chunks of c along d; ranks hold 2c. */
typedef struct {
  int world, nd, d, gather;
  int64_t c;
  spk_dtype dt;
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} zcase;

static void mk(zcase *c, int gather, int world, int nd, const int64_t *shape,
               int d, spk_dtype dt, uint32_t flags) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->d = d, c->gather = gather, c->dt = dt;
  c->c = shape[d] / (2 * world);
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = gather ? SPK_OP_ZIGZAG_GATHER : SPK_OP_ZIGZAG_SPLIT;
    a->dtype = dt, a->ndims = 1, a->dims[0] = d, a->flags = flags;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 0; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = shape[i];
    (gather ? &a->in : &a->out)->dim[d] = 2 * c->c;
    c->argp[r] = a;
  }
}

/* Reference: output position j = idx[d] of rank r comes from the
 * returned rank, at the position along d put in idx[d]. Chunk q of the
 * sequence is [q*c, (q+1)*c); rank r holds chunks r and 2w-1-r. */
static int source(const void *cv, int r, int64_t *idx) {
  const zcase *c = cv;
  int64_t w2 = 2 * (int64_t)c->world, j = idx[c->d];
  if (!c->gather) {
    int64_t q = j < c->c ? r : w2 - 1 - r;
    idx[c->d] = q * c->c + j % c->c;
    return r;
  }
  int64_t q = j / c->c;
  idx[c->d] = (q < c->world ? 0 : c->c) + j % c->c;
  return (int)(q < c->world ? q : w2 - 1 - q);
}

static void run_case(const zcase *c, const char *tag) {
  ptl_run_case(c->argp, c->world, source, c, 0, tag);
}

/* A random case: shape (now and then an empty dim), chunks of 0..3, the
 * dim spelled from either end per rank. */
static void random_case(zcase *c, int gather, int world, uint32_t flags,
                        spk_dtype dt) {
  int nd = (int)ptl_rng_range(1, world > 8 ? 3 : 5);
  int d = (int)ptl_rng_range(0, nd - 1);
  int64_t shape[SPK_MAX_DIMS];
  ptl_random_dims(shape, nd, 20, nd > 3 ? 3 : 4);
  shape[d] = 2 * world * ptl_rng_range(ptl_rng_range(0, 5) == 0 ? 0 : 1, 3);
  mk(c, gather, world, nd, shape, d, dt, flags);
  ptl_respell_dim(c->args, world, 0, d, nd);
}

static void random_run(uint64_t seed, int n, int world, uint32_t flags) {
  static zcase c;
  ptl_rng_seed(seed);
  for (int it = 0; it < n; it++) {
    int w = world ? world : (int)ptl_rng_range(1, 8), gather = it % 2;
    uint32_t f = flags ? ptl_scale_flags(it / 2) : 0;
    random_case(&c, gather, w, f, f ? SPK_F32 : ptl_dtypes[it / 2 % 8]);
    char tag[PTL_TAG];
    ptl_tag(tag, seed, it, gather ? "gather" : "split", w, c.nd, c.d);
    run_case(&c, tag);
  }
}

START_TEST(test_random) { random_run(0x2192a9ull, 1000, 0, 0); }
END_TEST

START_TEST(test_world_100) { random_run(0x100ull, 12, 100, 0); }
END_TEST

/* Float32 scaled by 1/w (one IEEE division, bitwise) and by w. */
START_TEST(test_scale) { random_run(0x5ca1eull, 100, 0, 1); }
END_TEST

/* The worked example: w = 2, L = 8, positions as values. */
START_TEST(test_example) {
  static zcase c;
  uint8_t x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, o[2][4], back[2][8];
  uint8_t *sb[4] = {x, o[0], x, o[1]}, *gb[4] = {o[0], back[0], o[1], back[1]};
  size_t ssz[4] = {8, 4, 8, 4}, gsz[4] = {4, 8, 4, 8};
  mk(&c, 0, 2, 1, (const int64_t[]){8}, 0, SPK_U8, 0);
  ptl_exec(c.argp, 2, sb, ssz, 0, "example split");
  ck_assert_mem_eq(o[0], ((const uint8_t[]){0, 1, 6, 7}), 4);
  ck_assert_mem_eq(o[1], ((const uint8_t[]){2, 3, 4, 5}), 4);
  mk(&c, 1, 2, 1, (const int64_t[]){8}, 0, SPK_U8, 0);
  ptl_exec(c.argp, 2, gb, gsz, 0, "example gather");
  ck_assert_mem_eq(back[0], x, 8);
  ck_assert_mem_eq(back[1], x, 8);
}
END_TEST

/* zigzag_gather(zigzag_split(x)) == x on every rank when every rank holds
 * x: the gather's inputs are the split's outputs. */
START_TEST(test_inverse) {
  const uint64_t seed = 0x1d3e7ull;
  static zcase s, g;
  ptl_rng_seed(seed);
  for (int it = 0; it < 300; it++) {
    ptl_bufs b, gb;
    int w = it % 50 == 0 ? 100 : (int)ptl_rng_range(1, 8);
    random_case(&s, 0, w, 0, ptl_dtypes[it % 8]);
    mk(&g, 1, w, s.nd, s.args[0].in.dim, s.d, s.dt, 0);
    ptl_bufs_alloc(&b, s.argp, w, 1);
    ptl_bufs_replicate_in(&b);
    char tag[PTL_TAG];
    ptl_tag(tag, seed, it, NULL, w, s.nd, s.d);
    ptl_exec(s.argp, w, b.b, b.sz, 0, tag);
    ptl_bufs_chain(&gb, &b, g.argp);
    ptl_exec(g.argp, w, gb.b, gb.sz, 0, tag);
    for (int r = 0; r < w; r++)
      ck_assert_msg(
          memcmp(gb.b[PTL_OUT(r)], b.b[PTL_IN(0)], gb.sz[PTL_OUT(r)]) == 0,
          "%s: rank %d: gather(split(x)) != x", tag, r);
    ptl_bufs_chain_free(&gb);
    ptl_bufs_free(&b);
  }
}
END_TEST

/* spk_plan_build must give rc, with a message holding both needles. */
static void expect_build(zcase *c, int rc, const char *n1, const char *n2) {
  ptl_expect_build(c->argp, c->world, rc, n1, n2);
}

static const int64_t S38[] = {3, 8};

START_TEST(test_bad_args) {
  static zcase c;
  for (int gather = 0; gather < 2; gather++) {
    mk(&c, gather, 2, 2, S38, 1, SPK_F32, 0);
    for (int r = 0; r < 2; r++)
      c.args[r].ndims = 2;
    expect_build(&c, SPK_EINVAL,
                 gather ? "zigzag_gather takes 1 dim"
                        : "zigzag_split takes 1 dim",
                 "got 2");
    mk(&c, gather, 2, 2, S38, 1, SPK_F32, 0);
    c.args[1].dims[0] = -3;
    expect_build(&c, SPK_EINVAL, "zigzag dim -3", NULL);
  }
  mk(&c, 0, 2, 2, S38, 1, SPK_F32, 0);
  for (int r = 0; r < 2; r++)
    c.args[r].in.dim[1] = 7;
  expect_build(&c, SPK_EINVAL,
               "zigzag length 7 along dim 1 is not divisible by 2*cp = 4",
               NULL);
  mk(&c, 0, 3, 2, (const int64_t[]){3, 12}, 1, SPK_F32, 0);
  for (int r = 0; r < 3; r++) /* even, and divisible by w, not by 2w */
    c.args[r].in.dim[1] = 9, c.args[r].out.dim[1] = 3;
  expect_build(&c, SPK_EINVAL, "length 9", "2*cp = 6");
  mk(&c, 1, 2, 2, S38, 1, SPK_F32, 0);
  for (int r = 0; r < 2; r++)
    c.args[r].in.dim[1] = 3, c.args[r].out.dim[1] = 6;
  expect_build(&c, SPK_EINVAL, "input length 3 along dim 1 is odd", NULL);
}
END_TEST

START_TEST(test_bad_output) {
  static zcase c;
  mk(&c, 0, 2, 2, S38, 1, SPK_F32, 0);
  c.args[1].out.dim[1] = 8;
  expect_build(&c, SPK_EINVAL, "rank 1", "should be [3, 4]");
  mk(&c, 0, 2, 2, S38, 1, SPK_F32, 0);
  c.args[0].out.dim[0] = 1;
  expect_build(&c, SPK_EINVAL, "rank 0", "should be [3, 4]");
  mk(&c, 1, 2, 2, S38, 1, SPK_F32, 0);
  c.args[1].out.dim[1] = 4;
  expect_build(&c, SPK_EINVAL, "rank 1", "should be [3, 8]");
  mk(&c, 1, 2, 2, S38, 1, SPK_F32, 0);
  c.args[0].out.ndim = 1;
  expect_build(&c, SPK_EINVAL, "output shape [3]", "should be [3, 8]");
}
END_TEST

START_TEST(test_mismatch) {
  static zcase c;
  for (int gather = 0; gather < 2; gather++) {
    /* Off the zigzag dim; each rank's output fits its own input. */
    mk(&c, gather, 3, 2, (const int64_t[]){3, 12}, 1, SPK_F32, 0);
    c.args[2].in.dim[0] = c.args[2].out.dim[0] = 2;
    expect_build(&c, SPK_EMISMATCH, "input shape", "rank 2 has [2, ");
    /* Along it: rank 1 splits 24 (gathers chunks of 4) instead of 12. */
    mk(&c, gather, 3, 2, (const int64_t[]){3, 12}, 1, SPK_F32, 0);
    c.args[1].in.dim[1] = gather ? 8 : 24;
    c.args[1].out.dim[1] = gather ? 24 : 8;
    expect_build(&c, SPK_EMISMATCH, "input shape", "rank 1 has [3, ");
  }
}
END_TEST

START_TEST(test_args_check) {
  static zcase c;
  mk(&c, 0, 100, 2, (const int64_t[]){2, 600}, 1, SPK_F32, 0);
  spk_op_args a = c.args[99];
  ptl_expect_check(&a, 100, 99, SPK_OK, NULL);
  a.in.dim[1] = 500;
  ptl_expect_check(&a, 100, 99, SPK_EINVAL, "2*cp = 200");
  mk(&c, 1, 100, 2, (const int64_t[]){2, 600}, 1, SPK_F32, 0);
  a = c.args[42];
  ptl_expect_check(&a, 100, 42, SPK_OK, NULL);
  a.out.dim[1] = 599;
  ptl_expect_check(&a, 100, 42, SPK_EINVAL, "should be [2, 600]");
  /* 2^62 uint8 per rank is a valid input; 4 of them overflow int64. */
  mk(&c, 1, 4, 1, (const int64_t[]){8}, 0, SPK_U8, 0);
  a = c.args[0], a.in.dim[0] = (int64_t)1 << 62;
  ptl_expect_check(&a, 4, 0, SPK_EINVAL, "overflows");
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_random,     test_world_100, test_scale,
                          test_example,    test_inverse,   test_bad_args,
                          test_bad_output, test_mismatch,  test_args_check};
  return ptl_run_suite("plan_zigzag", 120, tests, PTL_LEN(tests));
}
