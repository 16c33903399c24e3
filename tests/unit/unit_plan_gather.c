/* The all-gather planner (kernels/planner.h, plan_gather.c): plans are run
 * by a tiny executor over per-rank byte arrays and compared with a naive
 * reference that computes, for every output element, which rank and which
 * input element it comes from. The reference shares no code with the
 * planner. Error cases check the status and that the message names the
 * field, rank or expected shape. */
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

#define MAXW 8

/* One all-gather as every rank describes it. Each rank has its own copy of
 * the size list, as ranks do on the wire. */
typedef struct {
  int world, nd, d; /* d: the gather dim, normalized */
  int64_t gsz[MAXW];
  int64_t sizes[MAXW][MAXW];
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} gcase;

static void mk(gcase *c, int world, int nd, const int64_t *shape, int d,
               const int64_t *gsz, int with_sizes, spk_dtype dt) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->d = d;
  int64_t total = 0;
  for (int r = 0; r < world; r++) /* wraps like the planner, without UB */
    total = (int64_t)((uint64_t)total + (uint64_t)(c->gsz[r] = gsz[r]));
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = SPK_OP_ALL_GATHER, a->dtype = dt, a->ndims = 1, a->dims[0] = d;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 0; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = shape[i];
    a->in.dim[d] = gsz[r], a->out.dim[d] = total;
    if (with_sizes) {
      memcpy(c->sizes[r], gsz, sizeof(int64_t) * (size_t)world);
      a->nsizes = world, a->sizes = c->sizes[r];
    }
    c->argp[r] = a;
  }
}

/* Reference: out element at index idx (C order) has idx[d] = j; the source
 * is the rank k whose slice [off_k, off_k + gsz[k]) holds j, at the same
 * index with idx[d] = j - off_k. */
static void naive_gather(const gcase *c, uint8_t *const *in, uint8_t *out) {
  const spk_shape *os = &c->args[0].out;
  size_t es = spk_dtype_size(c->args[0].dtype);
  size_t n = ptl_numel(os);
  for (size_t o = 0; o < n; o++) {
    int64_t idx[SPK_MAX_DIMS];
    ptl_unravel(o, os, idx);
    int64_t j = idx[c->d], off = 0;
    int k = 0;
    while (j >= off + c->gsz[k])
      off += c->gsz[k++];
    idx[c->d] = j - off;
    memcpy(out + o * es, in[k] + ptl_ravel(idx, &c->args[k].in) * es, es);
  }
}

/* Build the plan, execute it move by move twice (outputs prefilled with
 * 0x00, then 0xff, so a byte the plan never writes shows up), and compare
 * every rank's output with the reference. */
static void run_case(gcase *c, const char *tag) {
  ptl_bufs b;
  ptl_bufs_alloc(&b, c->argp, c->world, 1);
  uint8_t *in[MAXW];
  uint64_t out_total = 0;
  for (int r = 0; r < c->world; r++)
    in[r] = b.b[PTL_IN(r)], out_total += b.sz[PTL_OUT(r)];
  uint8_t *want = malloc(b.sz[PTL_OUT(0)] + 1);
  naive_gather(c, in, want);

  for (int r = 0; r < c->world; r++) {
    spk_err e = {{0}};
    ck_assert_msg(spk_args_check(&c->args[r], c->world, r, &e) == SPK_OK,
                  "%s: args_check rank %d: %s", tag, r, e.msg);
  }
  spk_plan plan;
  spk_plan_init(&plan, c->world);
  spk_err err = {{0}};
  int rc = spk_plan_build(c->argp, c->world, &plan, &err);
  ck_assert_msg(rc == SPK_OK, "%s: plan_build: %d %s", tag, rc, err.msg);
  ck_assert_msg(plan.bytes == out_total, "%s: plan.bytes %llu want %llu",
                tag, (unsigned long long)plan.bytes,
                (unsigned long long)out_total);
  for (int fill = 0; fill < 2; fill++) {
    for (int r = 0; r < c->world; r++)
      memset(b.b[PTL_OUT(r)], fill ? 0xff : 0x00, b.sz[PTL_OUT(r)]);
    for (size_t i = 0; i < plan.nmoves; i++) {
      const spk_move *m = &plan.moves[i];
      ptl_check_move(m, i, c->world, b.sz, 0, tag);
      spk_move_run(m, b.b[m->src_rank * SPK_T_COUNT + m->src_t],
                   b.b[m->dst_rank * SPK_T_COUNT + m->dst_t], 0,
                   spk_move_units(m));
    }
    for (int r = 0; r < c->world; r++)
      ck_assert_msg(memcmp(b.b[PTL_OUT(r)], want, b.sz[PTL_OUT(r)]) == 0,
                    "%s: rank %d output differs from reference (fill %d)", tag,
                    r, fill);
  }
  spk_plan_free(&plan);
  ptl_bufs_free(&b);
  free(want);
}

START_TEST(test_random) {
  const uint64_t seed = 0xa11ea7e5ull;
  ptl_rng_seed(seed);
  for (int it = 0; it < 800; it++) {
    int world = (int)ptl_rng_range(1, MAXW), nd = (int)ptl_rng_range(1, 5);
    int d = (int)ptl_rng_range(0, nd - 1);
    int64_t shape[SPK_MAX_DIMS], gsz[MAXW];
    /* now and then an empty non-gather dim */
    ptl_random_dims(shape, nd, 20, nd > 3 ? 3 : 4);
    ptl_random_dims(gsz, world, 4, 4);
    gcase c;
    mk(&c, world, nd, shape, d, gsz, (int)ptl_rng_range(0, 1),
       ptl_dtypes[it % 8]);
    /* Ranks may spell the dim from either end: -1 is the last. */
    ptl_respell_dim(c.args, world, 0, d, nd);
    char tag[PTL_TAG];
    ptl_tag(tag, seed, it, NULL, world, nd, d);
    run_case(&c, tag);
  }
}
END_TEST

/* Hand-picked shapes: every rank empty, one rank holding everything. */
START_TEST(test_edges) {
  gcase c;
  mk(&c, 4, 2, (const int64_t[]){3, 2}, 1, (const int64_t[]){0, 0, 0, 0}, 1,
     SPK_F32);
  run_case(&c, "all empty");
  mk(&c, 3, 3, (const int64_t[]){2, 3, 4}, 2, (const int64_t[]){0, 5, 0}, 0,
     SPK_F64);
  run_case(&c, "one rank");
  mk(&c, 1, 1, (const int64_t[]){7}, 0, (const int64_t[]){7}, 1, SPK_I8);
  run_case(&c, "world 1");
  mk(&c, 2, 8, (const int64_t[]){2, 1, 2, 1, 2, 1, 2, 2}, 7,
     (const int64_t[]){1, 2}, 1, SPK_I64);
  run_case(&c, "8-d");
}
END_TEST

/* spk_plan_build must fail with `rc` and a message holding both needles. */
static void expect_build(gcase *c, int rc, const char *n1, const char *n2) {
  ptl_expect_build(c->argp, c->world, rc, n1, n2);
}

static const int64_t S24[] = {2, 4}, G123[] = {1, 2, 3};

START_TEST(test_bad_dim) {
  gcase c;
  mk(&c, 3, 2, S24, 0, G123, 0, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].dims[0] = 2;
  expect_build(&c, SPK_EINVAL, "gather dim 2", NULL);
  for (int r = 0; r < 3; r++)
    c.args[r].dims[0] = -3;
  expect_build(&c, SPK_EINVAL, "gather dim -3", NULL);
  mk(&c, 3, 2, S24, 0, G123, 0, SPK_F32);
  c.args[1].dims[0] = 5; /* only one rank is out of range */
  expect_build(&c, SPK_EINVAL, "gather dim 5", NULL);
  mk(&c, 3, 2, S24, 0, G123, 0, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].ndims = 2;
  expect_build(&c, SPK_EINVAL, "1 dim", NULL);
}
END_TEST

START_TEST(test_mismatch) {
  gcase c;
  mk(&c, 3, 2, S24, 0, G123, 0, SPK_F32);
  c.args[2].dtype = SPK_I32; /* same size, still a disagreement */
  expect_build(&c, SPK_EMISMATCH, "dtype", "rank 2");
  /* A non-gather dim differs on rank 2 (its own output is consistent). */
  mk(&c, 3, 3, (const int64_t[]){2, 3, 4}, 1, G123, 0, SPK_F32);
  c.args[2].in.dim[2] = c.args[2].out.dim[2] = 5;
  expect_build(&c, SPK_EMISMATCH, "dim 2", "rank 2");
  /* Rank 1 gathers along dim 1, the others along dim 0. */
  mk(&c, 3, 2, (const int64_t[]){2, 2}, 0, (const int64_t[]){2, 2, 2}, 0,
     SPK_F32);
  c.args[1].dims[0] = 1;
  c.args[1].out.dim[0] = 2, c.args[1].out.dim[1] = 6;
  expect_build(&c, SPK_EMISMATCH, "disagree on dim", "rank 1");
  /* Size lists that each fit their own rank but differ between ranks. */
  mk(&c, 2, 1, (const int64_t[]){0}, 0, (const int64_t[]){1, 2}, 1, SPK_U8);
  c.sizes[1][0] = 4, c.args[1].out.dim[0] = 6;
  expect_build(&c, SPK_EMISMATCH, "sizes", "rank 1");
  /* Input ndim differs. */
  mk(&c, 2, 2, S24, 0, G123, 0, SPK_F32);
  c.args[1].in.ndim = c.args[1].out.ndim = 3;
  c.args[1].in.dim[2] = c.args[1].out.dim[2] = 1;
  expect_build(&c, SPK_EMISMATCH, "ndim", "rank 1");
  /* Scalar and flags take part in the agreement too. */
  mk(&c, 2, 2, S24, 0, G123, 0, SPK_F32);
  c.args[1].flags = SPK_SCALE_UP << SPK_FLAG_SCALE_SHIFT; /* valid, differs */
  expect_build(&c, SPK_EMISMATCH, "flags", "rank 1");
  mk(&c, 2, 2, S24, 0, G123, 0, SPK_F32);
  c.args[1].scalar = -1;
  expect_build(&c, SPK_EMISMATCH, "scalar", "rank 1");
}
END_TEST

START_TEST(test_bad_output) {
  gcase c;
  /* Without a size list the total is only known when all ranks meet. */
  mk(&c, 3, 2, S24, 0, G123, 0, SPK_F32);
  c.args[1].out.dim[0] = 5;
  expect_build(&c, SPK_EINVAL, "[6, 4]", "rank 1");
  mk(&c, 3, 2, S24, 0, G123, 1, SPK_F32);
  c.args[2].out.dim[0] = 7;
  expect_build(&c, SPK_EINVAL, "[6, 4]", "rank 2");
  mk(&c, 3, 2, S24, 1, G123, 0, SPK_F32);
  c.args[0].out.dim[0] = 3; /* non-gather dim of the output */
  expect_build(&c, SPK_EINVAL, "[2, 6]", "rank 0");
  mk(&c, 3, 2, S24, 0, G123, 0, SPK_F32);
  c.args[0].out.ndim = 3, c.args[0].out.dim[2] = 1;
  expect_build(&c, SPK_EINVAL, "output shape", "rank 0");
}
END_TEST

START_TEST(test_bad_sizes) {
  gcase c;
  mk(&c, 3, 2, S24, 0, G123, 1, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].nsizes = 2;
  expect_build(&c, SPK_EINVAL, "2 entries", "world size is 3");
  mk(&c, 3, 2, S24, 0, G123, 1, SPK_F32);
  for (int r = 0; r < 3; r++) /* lists agree, but rank 2 holds 3 */
    c.sizes[r][2] = 4, c.args[r].out.dim[0] = 7;
  expect_build(&c, SPK_EINVAL, "rank 2", "sizes[2]");
  mk(&c, 2, 2, S24, 0, (const int64_t[]){0, 2}, 1, SPK_F32);
  for (int r = 0; r < 2; r++)
    c.sizes[r][0] = -1;
  expect_build(&c, SPK_EINVAL, "negative", NULL);
}
END_TEST

/* Shapes are not checked anywhere else before the planner turns them into
 * byte counts: a negative or overflowing dim must be refused, not planned
 * as a move of 2^64 - n bytes (or of 0 bytes after wrapping). */
static void expect_refused(gcase *c, const char *what) {
  spk_plan plan;
  spk_plan_init(&plan, c->world);
  spk_err err = {{0}};
  int got = spk_plan_build(c->argp, c->world, &plan, &err);
  size_t nmoves = plan.nmoves;
  spk_plan_free(&plan);
  ck_assert_msg(got == SPK_EINVAL,
                "%s: plan_build gave %d with %zu moves, want SPK_EINVAL", what,
                got, nmoves);
}

START_TEST(test_bad_shape) {
  gcase c;
  mk(&c, 2, 2, S24, 0, (const int64_t[]){-1, 3}, 0, SPK_F32);
  expect_refused(&c, "rank 0 input [-1, 4], output [2, 4]");
  mk(&c, 2, 2, (const int64_t[]){2, -3}, 0, (const int64_t[]){1, 1}, 0,
     SPK_F32);
  expect_refused(&c, "inputs [1, -3], outputs [2, -3]");
  const int64_t big = (int64_t)1 << 40;
  mk(&c, 2, 2, (const int64_t[]){0, big}, 0, (const int64_t[]){big, big}, 0,
     SPK_F64);
  expect_refused(&c, "inputs [2^40, 2^40] float64 (2^83 bytes)");
  mk(&c, 2, 1, (const int64_t[]){0}, 0, (const int64_t[]){INT64_MAX, 1}, 1,
     SPK_U8);
  for (int r = 0; r < 2; r++)
    c.args[r].out.dim[0] = 5;
  expect_refused(&c, "sizes [INT64_MAX, 1] (sum wraps), outputs [5]");
}
END_TEST

/* spk_args_check alone: what one rank can see before anything is sent. */
START_TEST(test_args_check) {
  gcase c;
  mk(&c, 3, 2, S24, 0, G123, 1, SPK_F32);
  spk_op_args a = c.args[1];
  ptl_expect_check(&a, 3, 1, SPK_OK, NULL);
  gcase c1; /* gather dim 1 spelled -1 */
  mk(&c1, 3, 2, S24, 1, G123, 1, SPK_F32);
  c1.args[2].dims[0] = -1;
  ptl_expect_check(&c1.args[2], 3, 2, SPK_OK, NULL);
  a = c.args[1], a.dims[0] = 2;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "gather dim 2");
  a = c.args[1], a.dims[0] = -3;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "gather dim -3");
  a = c.args[1], a.nsizes = 4;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "4 entries");
  a = c.args[1], a.in.dim[0] = 3;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "sizes[1]");
  a = c.args[1], a.out.dim[0] = 5;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "[6, 4]");
  /* No size list: the gather dim of the output is unknown, the rest not. */
  a = c.args[1], a.nsizes = 0, a.sizes = NULL, a.out.dim[0] = 99;
  ptl_expect_check(&a, 3, 1, SPK_OK, NULL);
  a.out.dim[1] = 5;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "[99, 4]");
  a = c.args[1], a.ndims = 0;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "1 dim");
  a = c.args[1];
  ptl_expect_check(&a, 3, 3, SPK_EINVAL, "rank 3");
  ptl_expect_check(&a, 3, -1, SPK_EINVAL, "rank -1");
  ptl_expect_check(&a, 0, 0, SPK_EINVAL, "world");
  a = c.args[1], a.op = (spk_op_kind)0;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "op");
  a = c.args[1], a.op = SPK_OP_COUNT;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "op");
  a = c.args[1], a.dtype = (spk_dtype)SPK_DTYPE_COUNT;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "dtype");
  a = c.args[1], a.in.ndim = 0;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "input ndim");
  a = c.args[1], a.out.ndim = SPK_MAX_DIMS + 1;
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "output ndim");
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_random,    test_edges,      test_bad_dim,
                          test_mismatch,  test_bad_output, test_bad_sizes,
                          test_bad_shape, test_args_check};
  return ptl_run_suite("plan_gather", 120, tests, PTL_LEN(tests));
}
