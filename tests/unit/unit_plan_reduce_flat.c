/* The fast path runs a small all_reduce as one flat reduce of the ranks'
 * inputs (spk_reduce_flat) when spk_plan_flat says the plan's reduce
 * steps are exactly that. Both halves are checked here against the plan
 * itself: every all_reduce planned on one node is flat, and the flat
 * reduce gives every rank's output of the plan, bit for bit, for every
 * dtype and reduce op, NaNs and lengths shorter than the world included.
 * Plans that are not one flat reduce (reduce_scatter, a node's part of
 * a plan across nodes) are refused. And the reduce itself folds the
 * sources in order, ((s0 + s1) + s2) ..., 16-bit floats in fp32 rounded
 * once, as a plain loop here does: 1 to 8 sources, lengths around the
 * kernel's blocks, the output in place of a source or apart. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
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

/* Element i of the fold of srcs (nsrc of them) in dtype dt, op red, as a
 * plain loop: what spk_reduce_flat must give, bit for bit. */
#define FOLD(T, A, LD, ST)                                                   \
  do {                                                                       \
    A acc = LD(((const T *)srcs[0])[i]);                                     \
    for (int k = 1; k < nsrc; k++) {                                         \
      A v = LD(((const T *)srcs[k])[i]);                                     \
      if (red == SPK_RED_SUM)                                                \
        acc = (A)(acc + v);                                                  \
      else if (red == SPK_RED_MAX)                                           \
        acc = (v > acc || v != v) ? v : acc;                                 \
      else                                                                   \
        acc = (v < acc || v != v) ? v : acc;                                 \
    }                                                                        \
    ((T *)want)[i] = ST(acc);                                                \
  } while (0)
#define ID(x) (x)

static void fold(spk_dtype dt, int red, uint8_t *const *srcs, int nsrc,
                 uint8_t *want, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case SPK_F32: FOLD(float, float, ID, ID); break;
    case SPK_F64: FOLD(double, double, ID, ID); break;
    case SPK_F16: FOLD(uint16_t, float, spk_f16_to_f32, spk_f32_to_f16); break;
    case SPK_BF16:
      FOLD(uint16_t, float, spk_bf16_to_f32, spk_f32_to_bf16);
      break;
    case SPK_I32: /* sums wrap (unsigned); max and min compare signed */
      if (red == SPK_RED_SUM)
        FOLD(int32_t, uint32_t, (uint32_t), (int32_t));
      else
        FOLD(int32_t, int32_t, ID, ID);
      break;
    case SPK_U8: FOLD(uint8_t, uint8_t, ID, ID); break;
    default: ck_abort_msg("dtype %d not folded here", dt);
    }
  }
}

/* A sum of two NaNs may keep either one's payload (the compiler may
 * swap an add's operands): sums here are of finite numbers. Max and min
 * keep their NaNs, which win in a fixed order. */
static void make_finite(spk_dtype dt, uint8_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dt == SPK_F32 && !isfinite(((float *)p)[i]))
      ((float *)p)[i] = 1.5f;
    else if (dt == SPK_F64 && !isfinite(((double *)p)[i]))
      ((double *)p)[i] = 2.5;
    else if (dt == SPK_F16 && (((uint16_t *)p)[i] & 0x7c00) == 0x7c00)
      ((uint16_t *)p)[i] = 0x3c00; /* 1.0 */
    else if (dt == SPK_BF16 && (((uint16_t *)p)[i] & 0x7f80) == 0x7f80)
      ((uint16_t *)p)[i] = 0x3f80; /* 1.0 */
  }
}

static void fold_case(int nsrc, spk_dtype dt, int red, int64_t n,
                      int in_place) {
  spk_op_args a[W];
  const spk_op_args *argp[W];
  size_t bytes = (size_t)n * spk_dtype_size(dt);
  uint8_t *srcs[W], *want = malloc(bytes + 1), *out = malloc(bytes + 1);
  ck_assert_ptr_nonnull(want);
  ck_assert_ptr_nonnull(out);
  for (int k = 0; k < nsrc; k++) {
    srcs[k] = malloc(bytes + 1);
    ck_assert_ptr_nonnull(srcs[k]);
    ptl_fill_random(srcs[k], bytes);
    if (red == SPK_RED_SUM)
      make_finite(dt, srcs[k], n);
  }
  fold(dt, red, srcs, nsrc, want, n);
  reduce_args(a, argp, nsrc, SPK_OP_ALL_REDUCE, dt, red, n);
  spk_plan plan;
  spk_err err;
  spk_plan_init(&plan, nsrc);
  ck_assert_int_eq(spk_plan_build(argp, nsrc, &plan, &err), SPK_OK);
  /* in place: into the last source, which the last pass reads */
  uint8_t *dst = in_place ? srcs[nsrc - 1] : out;
  spk_reduce_flat(&plan, (const uint8_t *const *)srcs, (uint32_t)nsrc, dst,
                  bytes);
  ck_assert_msg(memcmp(dst, want, bytes) == 0, "%d sources, dtype %d op %d "
                "n %lld%s: not the plain fold", nsrc, dt, red, (long long)n,
                in_place ? ", in place" : "");
  spk_plan_free(&plan);
  for (int k = 0; k < nsrc; k++)
    free(srcs[k]);
  free(want), free(out);
}

START_TEST(reduce_folds_the_sources_in_order) {
  static const spk_dtype dts[] = {SPK_F32, SPK_F64, SPK_F16, SPK_BF16,
                                  SPK_I32, SPK_U8};
  static const int64_t ns[] = {1, 15, 16, 17, 255, 256, 257, 1000};
  ptl_rng_seed(41);
  for (int nsrc = 1; nsrc <= W; nsrc++)
    for (size_t d = 0; d < PTL_LEN(dts); d++)
      for (size_t j = 0; j < PTL_LEN(ns); j++)
        fold_case(nsrc, dts[d], (int)((nsrc + d + j) % SPK_RED_COUNT),
                  ns[j], (int)(j & 1));
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
  const TTest *tests[] = {flat_reduce_is_the_plan, other_plans_are_not_flat,
                          reduce_folds_the_sources_in_order};
  return ptl_run_suite("plan_reduce_flat", 60, tests, PTL_LEN(tests));
}
