/* The split planner (kernels/plan_split.c): plans run by the reference
 * executor (spk_plan_exec) over per-rank byte arrays are compared with a
 * naive per-element reference that shares no code with the planner (its
 * pieces come from dealing elements round-robin, not from split_rule).
 * Ranks hold different contents: each must keep a slice of its own input.
 * Also: the grad scale flag, all_gather after split is the identity, and
 * bad arguments fail with the right status and a message naming them. */
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

#define MAXW 8

/* One split as every rank describes it; each rank owns a copy of the size
 * list, as on the wire. piece[r] / off[r]: rank r's slice along d. */
typedef struct {
  int world, nd, d;
  spk_dtype dt;
  int64_t piece[MAXW], off[MAXW];
  int64_t sizes[MAXW][MAXW];
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} scase;

static void mk(scase *c, int world, int nd, const int64_t *shape, int d,
               const int64_t *sizes, spk_dtype dt, uint32_t flags) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->d = d, c->dt = dt;
  for (int r = 0; r < world; r++) {
    c->piece[r] = sizes ? sizes[r] : ptl_dealt(shape[d], world, r);
    c->off[r] = r ? c->off[r - 1] + c->piece[r - 1] : 0;
    spk_op_args *a = &c->args[r];
    a->op = SPK_OP_SPLIT, a->dtype = dt, a->ndims = 1, a->dims[0] = d;
    a->flags = flags;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 0; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = shape[i];
    a->out.dim[d] = c->piece[r];
    if (sizes) {
      memcpy(c->sizes[r], sizes, sizeof(int64_t) * (size_t)world);
      a->nsizes = world, a->sizes = c->sizes[r];
    }
    c->argp[r] = a;
  }
}

/* Reference: out_r element idx is rank r's input element idx with idx[d]
 * moved by the start of r's piece. */
static int source(const void *cv, int r, int64_t *idx) {
  const scase *c = cv;
  idx[c->d] += c->off[r];
  return r;
}

/* The plan keeps every rank on its own input. */
static void run_case(const scase *c, const char *tag) {
  ptl_run_case(c->argp, c->world, source, c, 1, tag);
}

/* A random split: shape, dim (spelled from either end per rank), pieces
 * with empty ones, with or without a size list. */
static void random_case(scase *c, uint32_t flags, spk_dtype dt) {
  int world = (int)ptl_rng_range(1, MAXW), nd = (int)ptl_rng_range(1, 5);
  int d = (int)ptl_rng_range(0, nd - 1), with_sizes = (int)ptl_rng_range(0, 1);
  int64_t shape[SPK_MAX_DIMS], sizes[MAXW], n = 0;
  ptl_random_dims(shape, nd, 20, nd > 3 ? 3 : 4);
  ptl_random_dims(sizes, world, 3, 4);
  for (int r = 0; r < world; r++)
    n += sizes[r];
  shape[d] = with_sizes ? n : ptl_rng_range(0, 3 * world);
  mk(c, world, nd, shape, d, with_sizes ? sizes : NULL, dt, flags);
  ptl_respell_dim(c->args, world, 0, d, nd);
}

static void random_run(uint64_t seed, int n, int scaled) {
  scase c;
  ptl_rng_seed(seed);
  for (int it = 0; it < n; it++) {
    uint32_t f = scaled ? ptl_scale_flags(it) : 0;
    random_case(&c, f, scaled ? SPK_F32 : ptl_dtypes[it % 8]);
    char tag[PTL_TAG];
    ptl_tag(tag, seed, it, NULL, c.world, c.nd, c.d);
    run_case(&c, tag);
  }
}

START_TEST(test_random) { random_run(0x5b117ull, 800, 0); }
END_TEST

/* The gather-backward use: float32 scaled by 1/w (one IEEE division per
 * element, bitwise), and by w. */
START_TEST(test_scale) { random_run(0x5ca1eull, 100, 1); }
END_TEST

START_TEST(test_edges) {
  scase c;
  mk(&c, 1, 1, (const int64_t[]){7}, 0, NULL, SPK_I8, 0);
  run_case(&c, "world 1");
  mk(&c, 5, 2, (const int64_t[]){3, 2}, 1, NULL, SPK_F32, 0);
  run_case(&c, "fewer elements than ranks");
  mk(&c, 3, 2, (const int64_t[]){4, 0}, 1, NULL, SPK_F64, 0);
  run_case(&c, "empty split dim");
  mk(&c, 3, 3, (const int64_t[]){2, 5, 3}, 1, (const int64_t[]){0, 5, 0},
     SPK_U8, 0);
  run_case(&c, "one rank takes all");
  mk(&c, 2, 8, (const int64_t[]){2, 1, 2, 1, 2, 1, 2, 3}, 7, NULL, SPK_I64, 0);
  for (int r = 0; r < 2; r++)
    c.args[r].dims[0] = -1;
  run_case(&c, "8-d, last dim");
}
END_TEST

/* all_gather with the split's sizes undoes the split when every rank holds
 * the same tensor. */
static void gather_back(const scase *c, const ptl_bufs *b, const char *tag) {
  spk_op_args g[MAXW];
  const spk_op_args *gp[MAXW];
  ptl_bufs gb;
  for (int r = 0; r < c->world; r++) {
    g[r] = c->args[r];
    g[r].op = SPK_OP_ALL_GATHER;
    g[r].in = c->args[r].out, g[r].out = c->args[r].in;
    g[r].nsizes = c->world, g[r].sizes = c->piece;
    gp[r] = &g[r];
  }
  ptl_bufs_chain(&gb, b, gp);
  ptl_exec(gp, c->world, gb.b, gb.sz, 0, tag);
  for (int r = 0; r < c->world; r++)
    ck_assert_msg(
        memcmp(gb.b[PTL_OUT(r)], b->b[PTL_IN(0)], gb.sz[PTL_OUT(r)]) == 0,
        "%s: rank %d: gather(split(x)) != x", tag, r);
  ptl_bufs_chain_free(&gb);
}

START_TEST(test_gather_inverse) {
  const uint64_t seed = 0x1d3e7ull;
  ptl_rng_seed(seed);
  for (int it = 0; it < 300; it++) {
    scase c;
    ptl_bufs b;
    random_case(&c, 0, ptl_dtypes[it % 8]);
    ptl_bufs_alloc(&b, c.argp, c.world, 1);
    ptl_bufs_replicate_in(&b);
    char tag[PTL_TAG];
    ptl_tag(tag, seed, it, NULL, c.world, c.nd, c.d);
    ptl_exec(c.argp, c.world, b.b, b.sz, 1, tag);
    gather_back(&c, &b, tag);
    ptl_bufs_free(&b);
  }
}
END_TEST

/* spk_plan_build must give rc, with a message holding both needles. */
static void expect_build(scase *c, int rc, const char *n1, const char *n2) {
  ptl_expect_build(c->argp, c->world, rc, n1, n2);
}

static const int64_t S64[] = {6, 4}, P123[] = {1, 2, 3};

START_TEST(test_bad_args) {
  scase c;
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  for (int r = 0; r < 3; r++)
    c.args[r].ndims = 2;
  expect_build(&c, SPK_EINVAL, "split takes 1 dim", "got 2");
  for (int r = 0; r < 3; r++)
    c.args[r].ndims = 1, c.args[r].dims[0] = 2;
  expect_build(&c, SPK_EINVAL, "split dim 2", NULL);
  c.args[0].dims[0] = c.args[2].dims[0] = 0; /* only rank 1 is wrong */
  c.args[1].dims[0] = -3;
  expect_build(&c, SPK_EINVAL, "split dim -3", NULL);
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  for (int r = 0; r < 3; r++)
    c.args[r].nsizes = 2;
  expect_build(&c, SPK_EINVAL, "2 entries", "world size is 3");
  mk(&c, 3, 2, S64, 0, (const int64_t[]){1, 2, 4}, SPK_F32, 0);
  expect_build(&c, SPK_EINVAL, "sum to 7", "size 6");
  mk(&c, 3, 2, S64, 0, (const int64_t[]){-1, 3, 4}, SPK_F32, 0);
  c.args[0].out.dim[0] = 0;
  expect_build(&c, SPK_EINVAL, "sizes[0] is negative", NULL);
}
END_TEST

START_TEST(test_bad_output) {
  scase c;
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[1].out.dim[1] = 5;
  expect_build(&c, SPK_EINVAL, "rank 1", "should be [2, 4]");
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  c.args[2].out.dim[0] = 2;
  expect_build(&c, SPK_EINVAL, "rank 2", "should be [3, 4]");
  mk(&c, 3, 2, S64, 1, NULL, SPK_F32, 0); /* 4 over 3: 2, 1, 1 */
  c.args[0].out.dim[1] = 1;
  expect_build(&c, SPK_EINVAL, "rank 0", "should be [6, 2]");
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[0].out.ndim = 3, c.args[0].out.dim[2] = 1;
  expect_build(&c, SPK_EINVAL, "output shape [2, 4, 1]", "[2, 4]");
}
END_TEST

START_TEST(test_mismatch) {
  scase c;
  /* Rank 2's input differs off the split dim; its output fits it. */
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[2].in.dim[1] = c.args[2].out.dim[1] = 5;
  expect_build(&c, SPK_EMISMATCH, "input shape", "rank 2 has [6, 5]");
  /* Rank 1's input is longer along the split dim: 7 over 3 gives it 2 too. */
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[1].in.dim[0] = 7;
  expect_build(&c, SPK_EMISMATCH, "input shape", "rank 1 has [7, 4]");
  /* Size lists that each fit their own rank. */
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  c.sizes[1][0] = 2, c.sizes[1][2] = 2;
  expect_build(&c, SPK_EMISMATCH, "sizes", "rank 1");
  mk(&c, 2, 2, (const int64_t[]){4, 4}, 0, NULL, SPK_F32, 0);
  c.args[1].dims[0] = 1, c.args[1].out.dim[0] = 4, c.args[1].out.dim[1] = 2;
  expect_build(&c, SPK_EMISMATCH, "dim", "rank 1");
  mk(&c, 2, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[1].flags = SPK_SCALE_DOWN << SPK_FLAG_SCALE_SHIFT;
  expect_build(&c, SPK_EMISMATCH, "flags", "rank 1");
}
END_TEST

/* What one rank can check alone: everything but the other ranks' shapes. */
START_TEST(test_args_check) {
  scase c;
  mk(&c, 3, 2, S64, 1, NULL, SPK_F32, 0);
  spk_op_args a = c.args[2];
  ptl_expect_check(&a, 3, 2, SPK_OK, NULL);
  a.dims[0] = -1;
  ptl_expect_check(&a, 3, 2, SPK_OK, NULL);
  a.dims[0] = -3;
  ptl_expect_check(&a, 3, 2, SPK_EINVAL, "split dim -3");
  a = c.args[2], a.ndims = 0;
  ptl_expect_check(&a, 3, 2, SPK_EINVAL, "1 dim");
  a = c.args[2], a.out.dim[1] = 2;
  ptl_expect_check(&a, 3, 2, SPK_EINVAL, "should be [6, 1]");
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  a = c.args[0];
  ptl_expect_check(&a, 3, 0, SPK_OK, NULL);
  a.in.dim[0] = 5;
  ptl_expect_check(&a, 3, 0, SPK_EINVAL, "input dim 0 has size 5");
  a = c.args[0], a.nsizes = 2; /* {1, 2} for a world of 2 */
  ptl_expect_check(&a, 2, 0, SPK_EINVAL, "sum to 3");
  a = c.args[0];
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "rank 1");
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_random,         test_scale,     test_edges,
                          test_gather_inverse, test_bad_args,  test_bad_output,
                          test_mismatch,       test_args_check};
  return ptl_run_suite("plan_split", 120, tests, PTL_LEN(tests));
}
