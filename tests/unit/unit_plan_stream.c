/* Plans that touch (write, plus their inputs) at least stream_bytes copy
 * with non-temporal stores: their outputs must be exact, odd lengths and
 * unaligned offsets included, and a plan of a single large move must run
 * as well as one of many. Checked against the gather written out by hand;
 * small gathers with stream_bytes 1 take the same copies at every
 * alignment. */
#include <stdlib.h>
#include <string.h>

#include "plan_cut.h"
#include "plan_testlib.h"

/* Every rank of w asks for op on uint8 tensors of shapes in and out,
 * along dim. */
static void byte_args(spk_op_args *a, const spk_op_args **argp, int w,
                      spk_op_kind op, spk_shape in, spk_shape out, int dim) {
  for (int r = 0; r < w; r++) {
    memset(&a[r], 0, sizeof(a[r]));
    a[r].op = op, a[r].dtype = SPK_U8;
    a[r].in = in, a[r].out = out;
    a[r].ndims = 1, a[r].dims[0] = dim;
    argp[r] = &a[r];
  }
}

/* all_gather of w ranks' uint8 inputs of n bytes along dim 1 of [2, n]:
 * out_r[i][k*n + j] = in_k[i][j]. */
static void gather_case(int w, int64_t n, uint64_t stream_bytes) {
  spk_op_args a[8];
  const spk_op_args *argp[8];
  uint8_t *in[8], *out[8];
  byte_args(a, argp, w, SPK_OP_ALL_GATHER, (spk_shape){2, {2, n}},
            (spk_shape){2, {2, n * w}}, 1);
  for (int r = 0; r < w; r++) {
    in[r] = malloc((size_t)(2 * n) + 1) + 1; /* odd address */
    out[r] = malloc((size_t)(2 * n * w));
    ck_assert_ptr_nonnull(in[r] - 1);
    ck_assert_ptr_nonnull(out[r]);
    for (int64_t i = 0; i < 2 * n; i++)
      in[r][i] = (uint8_t)(i * 7 + r * 13 + 1);
    memset(out[r], 0, (size_t)(2 * n * w));
  }
  spk_plan plan;
  spk_err err;
  spk_plan_init(&plan, w);
  if (stream_bytes != 0)
    plan.stream_bytes = stream_bytes;
  ck_assert_int_eq(spk_plan_build(argp, w, &plan, &err), SPK_OK);
  ck_assert_uint_eq(plan.in_bytes, (uint64_t)(w * 2 * n));
  ck_assert_uint_ge(plan.bytes + plan.in_bytes, plan.stream_bytes);
  uint8_t *bases[16];
  for (int r = 0; r < w; r++)
    bases[r * SPK_T_COUNT + SPK_T_IN] = in[r],
    bases[r * SPK_T_COUNT + SPK_T_OUT] = out[r];
  spk_plan_exec(&plan, bases);
  for (int r = 0; r < w; r++)
    for (int64_t i = 0; i < 2; i++)
      for (int k = 0; k < w; k++)
        ck_assert_msg(memcmp(out[r] + i * n * w + k * n, in[k] + i * n,
                             (size_t)n) == 0,
                      "w %d n %lld: rank %d row %lld piece %d differs", w,
                      (long long)n, r, (long long)i, k);
  spk_plan_free(&plan);
  for (int r = 0; r < w; r++)
    free(in[r] - 1), free(out[r]);
}

START_TEST(large_gathers_are_exact) {
  gather_case(2, (4 << 20) + 7, 0);  /* 48 MiB touched, odd rows */
  gather_case(3, (2 << 20) + 33, 0); /* unaligned row starts */
}
END_TEST

START_TEST(small_streamed_gathers_are_exact) {
  for (int64_t n = 1; n <= 300; n += 13)
    gather_case(2 + (int)(n % 3), n, 1);
}
END_TEST

/* One rank's split of a 20 MiB tensor: a plan of one move over the
 * threshold (40 MiB touched). */
START_TEST(single_large_move) {
  int64_t n = (20 << 20) + 5;
  spk_op_args a;
  const spk_op_args *argp[1] = {&a};
  memset(&a, 0, sizeof(a));
  a.op = SPK_OP_SPLIT, a.dtype = SPK_U8;
  a.in = a.out = (spk_shape){1, {n}};
  a.ndims = 1;
  uint8_t *x = malloc((size_t)n), *y = calloc(1, (size_t)n);
  ck_assert_ptr_nonnull(x);
  ck_assert_ptr_nonnull(y);
  for (int64_t i = 0; i < n; i++)
    x[i] = (uint8_t)(i ^ (i >> 9));
  spk_plan plan;
  spk_err err;
  spk_plan_init(&plan, 1);
  ck_assert_int_eq(spk_plan_build(argp, 1, &plan, &err), SPK_OK);
  ck_assert_uint_eq(plan.nmoves, 1);
  ck_assert_uint_ge(plan.bytes + plan.in_bytes, plan.stream_bytes);
  uint8_t *bases[2] = {x, y};
  spk_plan_exec(&plan, bases);
  ck_assert_int_eq(memcmp(x, y, (size_t)n), 0);
  spk_plan_free(&plan);
  free(x), free(y);
}
END_TEST

/* in_bytes counts the input bytes the steps read, a byte read twice
 * once: all of a gather's inputs (above), 1/w of what each rank of a
 * split holds, and in a node's part its ranks' inputs only. */
START_TEST(in_bytes_count_reads) {
  enum { W = 4 };
  int64_t n = 1 << 12;
  spk_op_args a[W];
  const spk_op_args *argp[W];
  byte_args(a, argp, W, SPK_OP_SPLIT, (spk_shape){1, {n}},
            (spk_shape){1, {n / W}}, 0);
  spk_plan plan;
  spk_err err;
  spk_plan_init(&plan, W);
  ck_assert_int_eq(spk_plan_build(argp, W, &plan, &err), SPK_OK);
  ck_assert_uint_eq(plan.in_bytes, (uint64_t)n);
  spk_plan_free(&plan);
  for (int r = 0; r < W; r++) {
    a[r].op = SPK_OP_ALL_GATHER;
    a[r].out = (spk_shape){1, {n * W}};
  }
  uint8_t mine[W] = {1, 0, 0, 0};
  spk_plan_init(&plan, W);
  ck_assert_int_eq(spk_plan_part(&plan, mine, &err), SPK_OK);
  ck_assert_int_eq(spk_plan_build(argp, W, &plan, &err), SPK_OK);
  ck_assert_uint_eq(plan.in_bytes, (uint64_t)n);
  spk_plan_free(&plan);
}
END_TEST

/* A node's part of a plan across nodes runs as two local plans (before
 * and after the streams between nodes): each takes the decision of the
 * node's plan, which its own bytes, a share of the node's, cannot make.
 * 4 ranks on 2 nodes gathering 8 MiB each: node 0 touches 16 MiB of
 * inputs and 64 MiB of outputs (80), its second phase writes 48 MiB: with
 * stream_bytes 72 MiB the node's copies stream, all of them; with 96,
 * none. */
START_TEST(node_parts_stream_as_their_plan) {
  enum { W = 4 };
  int64_t n = 8 << 20;
  spk_op_args a[W];
  const spk_op_args *argp[W];
  byte_args(a, argp, W, SPK_OP_ALL_GATHER, (spk_shape){1, {n}},
            (spk_shape){1, {n * W}}, 0);
  int node_of[W] = {0, 0, 1, 1};
  uint8_t mine[W] = {1, 1, 0, 0};
  const uint64_t sbs[2] = {(uint64_t)72 << 20, (uint64_t)96 << 20};
  for (int i = 0; i < 2; i++) {
    spk_plan plan;
    spk_cut cut;
    spk_err err;
    spk_plan_init(&plan, W);
    plan.stream_bytes = sbs[i];
    ck_assert_int_eq(spk_plan_part(&plan, mine, &err), SPK_OK);
    ck_assert_int_eq(spk_plan_build(argp, W, &plan, &err), SPK_OK);
    ck_assert_int_eq(spk_plan_cut(&plan, node_of, 2, 0, &cut, &err), SPK_OK);
    ck_assert_int_eq(spk_plan_streams(&plan), i == 0);
    ck_assert_uint_eq(cut.local[1].bytes, (uint64_t)48 << 20);
    for (int ph = 0; ph < 2; ph++)
      if (cut.local[ph].bytes > 0)
        ck_assert_int_eq(spk_plan_streams(&cut.local[ph]), i == 0);
    spk_cut_free(&cut);
    spk_plan_free(&plan);
  }
}
END_TEST

int main(void) {
  const TTest *tests[] = {large_gathers_are_exact,
                          small_streamed_gathers_are_exact, single_large_move,
                          in_bytes_count_reads,
                          node_parts_stream_as_their_plan};
  return ptl_run_suite("plan_stream", 60, tests, PTL_LEN(tests));
}
