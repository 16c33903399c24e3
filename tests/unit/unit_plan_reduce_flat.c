/* The fast path runs a small all_reduce as one flat reduce of the ranks'
 * inputs (spk_reduce_flat) when spk_plan_flat says the plan's reduce
 * steps are exactly that. Both halves are checked here against the plan
 * itself: every all_reduce planned on one node is flat, and the flat
 * reduce gives every rank's output of the plan, bit for bit, for every
 * dtype and reduce op, NaNs and lengths shorter than the world included.
 * Plans that are not one flat reduce (reduce_scatter, a node's part of
 * a plan across nodes) are refused. */
#include <stdlib.h>
#include <string.h>

#include "plan_cut.h"
#include "plan_testlib.h"

#define W 8

/* Every rank of w asks for op with n elements of dt in and out. */
static void reduce_args(spk_op_args *a, const spk_op_args **argp, int w,
                        spk_op_kind op, spk_dtype dt, int red, int64_t n) {
  for (int r = 0; r < w; r++) {
    memset(&a[r], 0, sizeof(a[r]));
    a[r].op = op, a[r].dtype = dt, a[r].flags = (uint32_t)red;
    a[r].in = (spk_shape){1, {n}};
    a[r].out = op == SPK_OP_ALL_REDUCE ? a[r].in : (spk_shape){1, {n / w}};
    if (op == SPK_OP_REDUCE_SCATTER)
      a[r].ndims = 1, a[r].dims[0] = 0;
    argp[r] = &a[r];
  }
}

static void flat_case(int w, spk_dtype dt, int red, int64_t n) {
  spk_op_args a[W];
  const spk_op_args *argp[W];
  size_t bytes = (size_t)n * spk_dtype_size(dt);
  uint8_t *in[W], *out[W], *bases[2 * W];
  reduce_args(a, argp, w, SPK_OP_ALL_REDUCE, dt, red, n);
  for (int r = 0; r < w; r++) {
    in[r] = malloc(bytes + 1), out[r] = malloc(bytes + 1);
    ck_assert_ptr_nonnull(in[r]);
    ck_assert_ptr_nonnull(out[r]);
    ptl_fill_random(in[r], bytes);
    bases[PTL_IN(r)] = in[r], bases[PTL_OUT(r)] = out[r];
  }
  uint8_t *flat = malloc(bytes + 1);
  ck_assert_ptr_nonnull(flat);
  spk_plan plan;
  spk_err err;
  spk_plan_init(&plan, w);
  ck_assert_int_eq(spk_plan_build(argp, w, &plan, &err), SPK_OK);
  ck_assert_msg(spk_plan_flat(&plan, bytes), "w %d dtype %d op %d n %lld: "
                "the all_reduce plan is not flat", w, dt, red, (long long)n);
  ck_assert(!spk_plan_flat(&plan, bytes + 1));
  spk_plan_exec(&plan, bases);
  spk_reduce_flat(&plan, (const uint8_t *const *)in, (uint32_t)w, flat,
                  bytes);
  for (int r = 0; r < w; r++)
    ck_assert_msg(memcmp(out[r], flat, bytes) == 0, "w %d dtype %d op %d n "
                  "%lld: the flat reduce differs from rank %d's output", w,
                  dt, red, (long long)n, r);
  spk_plan_free(&plan);
  for (int r = 0; r < w; r++)
    free(in[r]), free(out[r]);
  free(flat);
}

START_TEST(flat_reduce_is_the_plan) {
  ptl_rng_seed(18);
  for (int it = 0; it < 400; it++) {
    int w = (int)ptl_rng_range(1, W);
    spk_dtype dt = ptl_dtypes[it % 8];
    int red = (int)ptl_rng_range(0, SPK_RED_COUNT - 1);
    int64_t n = it % 5 == 0 ? ptl_rng_range(0, w - 1)
                            : ptl_rng_range(1, it % 7 == 0 ? 1500 : 70);
    flat_case(w, dt, red, n);
  }
}
END_TEST

START_TEST(other_plans_are_not_flat) {
  spk_op_args a[W];
  const spk_op_args *argp[W];
  spk_plan plan;
  spk_err err;
  /* reduce_scatter: each step reduces into its own rank's output. */
  reduce_args(a, argp, 4, SPK_OP_REDUCE_SCATTER, SPK_F32, SPK_RED_SUM, 64);
  spk_plan_init(&plan, 4);
  ck_assert_int_eq(spk_plan_build(argp, 4, &plan, &err), SPK_OK);
  ck_assert(!spk_plan_flat(&plan, 16 * 4));
  ck_assert(!spk_plan_flat(&plan, 64 * 4));
  spk_plan_free(&plan);
  /* A node's part of an all_reduce across two nodes: half the steps. */
  reduce_args(a, argp, 4, SPK_OP_ALL_REDUCE, SPK_F32, SPK_RED_SUM, 64);
  uint8_t mine[4] = {1, 1, 0, 0};
  spk_plan_init(&plan, 4);
  ck_assert_int_eq(spk_plan_part(&plan, mine, &err), SPK_OK);
  ck_assert_int_eq(spk_plan_build(argp, 4, &plan, &err), SPK_OK);
  ck_assert(!spk_plan_flat(&plan, 64 * 4));
  spk_plan_free(&plan);
}
END_TEST

int main(void) {
  const TTest *tests[] = {flat_reduce_is_the_plan, other_plans_are_not_flat};
  return ptl_run_suite("plan_reduce_flat", 60, tests, PTL_LEN(tests));
}
